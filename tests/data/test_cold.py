"""The cold-item protocol's split: cold items never in training or histories, every one a test target."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnrec.data.cold import cold_items, cold_start
from attnrec.data.feature_files import with_features
from attnrec.data.features import FeatureTable
from attnrec.data.schema import DataError, Interactions
from attnrec.data.split import leave_one_out, parse_split
from synthetic_logs import ring_log


def log_with_features(n_items: int = 40) -> Interactions:
    data = ring_log(n_users=150, n_items=n_items)
    table = FeatureTable.from_frame(
        pd.DataFrame(
            {
                "item_id": [f"i{k}" for k in range(n_items)],
                "tags": [[f"t{k % 5}", f"g{k % 3}"] for k in range(n_items)],
            }
        ),
        "item_id",
        {"tags": "multi"},
    )
    return with_features(data, item=table)


def test_cold_items_never_in_training_nor_in_any_history() -> None:
    cs = cold_start(log_with_features(), 0.2, seed=0)
    cold = set(range(cs.n_warm + 1, cs.data.n_items + 1))
    assert len(cold) == cs.record.n_items == 8  # 20% of 40
    sp = cs.split
    assert not cold & set(sp.train.items.tolist())
    for cases in (sp.valid, sp.test):
        assert not cold & set(cases.histories.items.tolist())
    assert not cold & set(sp.valid.targets.tolist())  # validation: warm targets only
    assert not cold & set(cs.warm.item.tolist()) and cs.warm.n_items == cs.n_warm
    assert sp.train.n_items == sp.valid.histories.n_items == cs.n_warm
    assert sp.test.histories.n_items == cs.data.n_items


def test_every_cold_item_is_a_test_target_and_the_counts_are_recorded() -> None:
    cs = cold_start(log_with_features(), 0.2, seed=0)
    is_cold = cs.is_cold(cs.split.test.targets)
    assert set(cs.split.test.targets[is_cold].tolist()) == set(range(cs.n_warm + 1, cs.data.n_items + 1))
    assert cs.record.n_test_targets == is_cold.sum() and cs.record.n_warm_targets == (~is_cold).sum()
    assert cs.record.n_empty_dropped == 0  # no history here is made of cold items only
    assert parse_split(cs.split.describe()) == ("leave-one-out", {"cold_items": 0.2, "cold_seed": 0.0})


def test_the_split_is_leave_one_out_relabelled_test_cases_and_targets_unchanged() -> None:
    data = log_with_features()
    cs = cold_start(data, 0.2, seed=0)
    base = leave_one_out(data)
    # same users, same targets (external IDs), histories = the plain ones without the cold items
    assert np.array_equal(cs.split.test.users, base.test.users)
    assert data.items.to_external(base.test.targets) == cs.data.items.to_external(cs.split.test.targets)
    cold_ext = set(cs.cold_ids)
    for r in (0, 7, 33):
        plain = [i for i in data.items.to_external(base.test.histories[r]) if i not in cold_ext]
        assert cs.data.items.to_external(cs.split.test.histories[r]) == plain


def test_same_seed_same_cold_set_other_seed_other_set() -> None:
    data = log_with_features()
    a = cold_items(data, 0.2, np.random.default_rng(0))
    assert np.array_equal(a, cold_items(data, 0.2, np.random.default_rng(0)))
    assert not np.array_equal(a, cold_items(data, 0.2, np.random.default_rng(1)))
    assert cold_start(data, 0.2, seed=3).cold_ids == cold_start(data, 0.2, seed=3).cold_ids


def test_cold_items_are_drawn_among_test_targets_with_features() -> None:
    data = log_with_features()
    targets = set(data.items.to_external(leave_one_out(data).test.targets))
    cs = cold_start(data, 0.2, seed=0)
    assert set(cs.cold_ids) <= targets
    assert cs.cold_features is not None and list(cs.cold_features.ids.external) == cs.cold_ids


@pytest.mark.parametrize("share", [0.0, 1.0, -0.1])
def test_a_share_outside_0_1_is_refused(share: float) -> None:
    with pytest.raises(DataError, match="share must be in"):
        cold_start(log_with_features(), share)


def test_a_share_larger_than_the_targets_is_a_clear_error() -> None:
    with pytest.raises(DataError, match="only .* items are test targets"):
        cold_start(log_with_features(), 0.99)
