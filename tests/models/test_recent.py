"""Recent: the history's latest items first, then popularity; and why it is measured with the history kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from baseline_kit import assert_save_load_identity, demo, fit

from attnrec.data.schema import Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.protocol import evaluate, protocol_by_name
from attnrec.models.recent import Recent, RecentConfig


def _fitted(n_items: int = 6) -> Recent:
    # training counts: item 5 x3, item 6 x2, item 1 x1; items 2-4 never
    train = Sequences.from_lists([[5, 5, 6], [6, 5, 1]], n_items=n_items)
    return Recent(RecentConfig(), 2, n_items).fit(train, np.random.default_rng(0))


def test_latest_history_item_first_then_popularity() -> None:
    model = _fitted()
    history = Sequences.from_lists([[2, 3, 2, 4], []], n_items=6)
    scores = model.score(model.score_inputs(np.array([0, 1]), history))  # (2, 7)
    assert torch.isneginf(scores[:, 0]).all()
    # user 0: 4 (latest), then 2 (seen again after 3), then 3; then 5, 6, 1 by popularity
    assert scores[0].argsort(descending=True)[:6].tolist() == [4, 2, 3, 5, 6, 1]
    assert scores[0, 2] == scores[0].max() - 1, "item 2 keeps its latest position, not its first"
    # an empty history: popularity only, each count / (max count + 1)
    assert scores[1, 1:].tolist() == pytest.approx([1 / 4, 0, 0, 0, 3 / 4, 2 / 4])
    assert model.num_parameters() == 0


def test_only_the_last_max_len_items_rank_first() -> None:
    train = Sequences.from_lists([[5, 5, 6]], n_items=6)
    model = Recent(RecentConfig(max_len=2), 1, 6).fit(train, np.random.default_rng(0))
    scores = model.score(model.score_inputs(np.array([0]), Sequences.from_lists([[1, 2, 3]], n_items=6)))
    assert scores[0].argsort(descending=True)[:3].tolist() == [3, 2, 5]  # item 1 is too old: popularity (0)
    with pytest.raises(ValueError, match="max_len"):
        RecentConfig(max_len=0)


def test_a_repeated_target_ranks_first_once_the_rest_of_the_history_is_removed() -> None:
    # Why the baseline is measured with the history kept: under "full" every history item except the target
    # is removed, so a repeated target only meets unseen items, and this baseline puts it first.
    model = _fitted()
    cases = EvalSet(np.array([0]), Sequences.from_lists([[2, 3, 4]], n_items=6), np.array([2]))

    def score(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        return model.score(model.score_inputs(users, hist))

    assert evaluate(score, cases, protocol_by_name("full")).metrics["MRR"] == 1.0
    # with the history kept, 4 and 3 are later than 2: rank 3
    assert evaluate(score, cases, protocol_by_name("full-history")).metrics["MRR"] == pytest.approx(1 / 3)
    assert "history kept" in protocol_by_name("full-history").describe()


def test_recommender_fit_save_load(tmp_path: Path) -> None:
    data, split = demo()
    rec = fit("recent", data, split)
    assert rec.train_result_ is not None and rec.train_result_.stopped == "fitted"
    assert_save_load_identity(rec, tmp_path)
    last = data.items.to_external([1])[0]
    assert rec.recommend(history=[last], k=1, exclude_seen=False).items == [last]
