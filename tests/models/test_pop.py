"""POP: plain counting, the same ranking for everyone, exact persistence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from baseline_kit import assert_save_load_identity, assert_seen_filtered, demo, fit

from attnrec.data.build import from_columns
from attnrec.data.schema import Sequences
from attnrec.models.pop import Pop, PopConfig


def test_most_frequent_item_first() -> None:
    # item "c" 4 times, "a" 3 times, "b" 2 times, "d" once (all in training: 5 items per user)
    users = ["1"] * 5 + ["2"] * 5
    items = ["c", "a", "c", "b", "d"] + ["a", "c", "a", "c", "b"]
    train = from_columns(users, items).sequences()
    model = Pop(PopConfig(), n_users=2, n_items=4).fit(train, np.random.default_rng(0))
    scores = model.score(model.score_inputs(np.array([0, 1]), train))
    assert scores.shape == (2, 5) and torch.isneginf(scores[:, 0]).all()
    assert torch.equal(scores[0], scores[1]), "POP is not personalised"
    # internal indices follow first appearance: c=1, a=2, b=3, d=4
    assert scores[0, 1:].tolist() == [4.0, 3.0, 2.0, 1.0]
    assert model.num_parameters() == 0


def test_recommends_by_training_popularity() -> None:
    data, split = demo()
    rec = fit("pop", data, split)
    counts = np.bincount(split.train.items, minlength=data.n_items + 1)
    counts[0] = -1
    best = data.items.to_external([int(np.argmax(counts))])[0]
    assert rec.recommend(
        history=["no-such-item-but-a-history", data.items.to_external([1])[0]], k=1, exclude_seen=False
    ).items == [best]
    assert rec.train_result_ is not None and rec.train_result_.stopped == "fitted"


def test_state_round_trip_and_shape_check() -> None:
    train = Sequences.from_lists([[1, 2, 2], [3]], n_items=3)
    model = Pop(PopConfig(), 2, 3).fit(train, np.random.default_rng(0))
    other = Pop(PopConfig(), 2, 3)
    other.load_state_dict(model.state_dict())
    batch = model.score_inputs(np.array([0]), train)
    assert torch.equal(other.score(batch), model.score(batch))
    assert model.state_dict()["counts"].dtype == torch.float64, "saved directories hold float64 counts"
    with pytest.raises(RuntimeError, match="size mismatch for counts"):
        Pop(PopConfig(), 2, 5).load_state_dict(model.state_dict())
    with pytest.raises(ValueError, match="items"):
        Pop(PopConfig(), 2, 5).fit(train, np.random.default_rng(0))


def test_save_load_and_seen_filtering(tmp_path: Path) -> None:
    data, split = demo()
    rec = fit("pop", data, split)
    assert_save_load_identity(rec, tmp_path)
    assert_seen_filtered(rec)
