"""The content-only baseline: recency-weighted attribute cosine, exact on a hand-computed case; ranks cold
items."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from attnrec import Recommender
from attnrec.data.feature_files import with_features
from attnrec.data.features import FeatureTable
from attnrec.data.schema import IdMap, Sequences
from attnrec.models.content import Content, ContentConfig
from attnrec.models.item_context import ItemFeatures, ModelContext
from synthetic_logs import ring_log


def three_items(**config: float) -> Content:
    """Items a = {x}, b = {y}, c = {x, y} over two attribute values."""
    table = FeatureTable.from_frame(
        pd.DataFrame({"item_id": ["a", "b", "c"], "attrs": [["x"], ["y"], ["x", "y"]]}),
        "item_id",
        {"attrs": "multi"},
    )
    ctx = ModelContext(ItemFeatures.from_table(table, IdMap(np.array(["a", "b", "c"], dtype=object), 1)))
    return Content(ContentConfig(**config), 1, 3, ctx)  # type: ignore[arg-type]


def scores(model: Content, history: list[int]) -> torch.Tensor:
    return model.score(model.score_inputs(np.array([0]), Sequences.from_lists([history], model.n_items)))[0]


def test_hand_computed_scores() -> None:
    # history a then b, halflife 1: weights a 0.5 (one back), b 1 -> profile (0.5, 1), |p| = sqrt(1.25)
    s = scores(three_items(halflife=1.0), [1, 2])
    p = math.sqrt(1.25)
    expected = [0.5 / p, 1 / p, (0.5 + 1) / math.sqrt(2) / p]  # cosines with (1,0), (0,1), (1,1)/sqrt 2
    assert s[0] == -math.inf
    assert s[1:].tolist() == pytest.approx(expected, abs=1e-6)


def test_recency_weighting_follows_the_halflife() -> None:
    # a long halflife weighs a and b nearly alike; a short one nearly only the latest item (b)
    flat, steep = scores(three_items(halflife=1e6), [1, 2]), scores(three_items(halflife=0.05), [1, 2])
    assert flat[1].item() == pytest.approx(flat[2].item(), abs=1e-5)
    assert steep[2].item() == pytest.approx(1.0, abs=1e-5) and steep[1].item() == pytest.approx(0.0, abs=1e-5)


def test_empty_history_scores_zero_not_nan() -> None:
    s = scores(three_items(), [])
    assert torch.equal(s[1:], torch.zeros(3))


def test_bad_settings_and_missing_features_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="halflife must be > 0"):
        ContentConfig(halflife=0)
    with pytest.raises(ValueError, match="item_features must be 'multi-hot'"):
        ContentConfig(item_features="sum")
    with pytest.raises(ValueError, match="needs item features"):
        Content(ContentConfig(), 1, 3)


def test_a_cold_item_with_matching_attributes_ranks_above_a_non_matching_one() -> None:
    data = ring_log(n_users=60, n_items=12)
    table = FeatureTable.from_frame(
        pd.DataFrame(
            {
                "item_id": [f"i{k}" for k in range(12)] + ["new_match", "new_other"],
                "tags": [[f"t{k % 3}"] for k in range(12)] + [["t0"], ["zz"]],
            }
        ),
        "item_id",
        {"tags": "multi"},
    )
    data = with_features(data, item=table)
    rec = Recommender("content").fit(data, progress=False)
    new = table.rekey({"new_match": "new_match", "new_other": "new_other"})
    assert rec.add_items(new) == ["new_match", "new_other"]
    top = rec.recommend(history=["i0", "i3", "i6"], k=14)  # all tagged t0
    assert top.items.index("new_match") < top.items.index("new_other")
    assert top.scores[top.items.index("new_match")] == pytest.approx(1.0)
