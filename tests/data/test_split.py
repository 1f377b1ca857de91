"""Leave-one-out and temporal splits: exact contents and no leakage."""

from __future__ import annotations

import numpy as np
import pytest

from attnrec.data import from_columns, leave_one_out, make_demo, parse_split, temporal_split
from attnrec.data.schema import DataError


@pytest.fixture(scope="module")
def demo():  # type: ignore[no-untyped-def]
    return make_demo(n_users=300, n_items=120, seed=3)


def test_leave_one_out_exact(demo) -> None:  # type: ignore[no-untyped-def]
    split = leave_one_out(demo)
    seqs = demo.sequences()
    assert split.name == "leave-one-out"
    assert len(split.valid) == len(split.test) == demo.n_users  # demo users all have >= 5 items
    for r, u in enumerate(split.test.users):
        full = list(seqs[u])
        assert list(split.train[u]) == full[:-2]
        assert split.valid.users[r] == u and split.valid.targets[r] == full[-2]
        assert list(split.valid.histories[r]) == full[:-2]
        assert split.test.targets[r] == full[-1]
        assert list(split.test.histories[r]) == full[:-1]  # train + the validation item


def test_leave_one_out_no_leakage(demo) -> None:  # type: ignore[no-untyped-def]
    split = leave_one_out(demo)
    train_keys = split.train.user_item_keys()
    stride = demo.n_items + 1
    # The demo never repeats an item within a user, so held-out items must be absent from training.
    for cases in (split.valid, split.test):
        keys = cases.users * stride + cases.targets
        assert not np.isin(keys, train_keys).any()
    # Neither held-out item is in the validation input; only the validation item is in the test input.
    for r in range(len(split.test)):
        assert split.test.targets[r] not in split.test.histories[r]
        assert split.valid.targets[r] not in split.valid.histories[r]
        assert split.test.histories[r][-1] == split.valid.targets[r]
    # Total bookkeeping: every interaction is in train, or is a held-out target.
    assert len(split.train.items) + len(split.valid) + len(split.test) == len(demo)


def test_leave_one_out_with_a_validation_sample(demo) -> None:  # type: ignore[no-untyped-def]
    split = leave_one_out(demo, valid_users=40, seed=5)
    seqs, full_split = demo.sequences(), leave_one_out(demo)
    assert split.params == {"valid_users": 40, "seed": 5} and "valid_users=40" in split.describe()
    validated = set(split.valid.users.tolist())
    assert len(validated) == len(split.valid) == 40
    for r, u in enumerate(split.valid.users):
        full = list(seqs[u])
        assert list(split.train[u]) == full[:-2]  # the sampled users' validation item stays out of training
        assert split.valid.targets[r] == full[-2] and list(split.valid.histories[r]) == full[:-2]
    for u in set(range(demo.n_users)) - validated:
        assert list(split.train[u]) == list(seqs[u])[:-1]  # everyone else trains on all but the test item
    # The test cases are the leave-one-out ones, and the test targets never reach training.
    assert np.array_equal(split.test.users, full_split.test.users)
    assert np.array_equal(split.test.targets, full_split.test.targets)
    keys = split.test.users * (demo.n_items + 1) + split.test.targets
    assert not np.isin(keys, split.train.user_item_keys()).any()
    assert len(split.train.items) + len(split.valid) + len(split.test) == len(demo)
    # The sample is a pure function of the seed.
    assert np.array_equal(leave_one_out(demo, valid_users=40, seed=5).valid.users, split.valid.users)
    assert not np.array_equal(leave_one_out(demo, valid_users=40, seed=6).valid.users, split.valid.users)
    assert leave_one_out(demo, valid_users=10_000).params["valid_users"] == 10_000
    assert len(leave_one_out(demo, valid_users=10_000).valid) == len(full_split.valid)
    with pytest.raises(DataError, match="valid_users"):
        leave_one_out(demo, valid_users=-1)


def test_parse_split_inverts_describe(demo) -> None:  # type: ignore[no-untyped-def]
    assert parse_split("leave-one-out") == ("leave-one-out", {})
    assert parse_split("leave-one-out (valid_users=2048, seed=0)") == (
        "leave-one-out",
        {"valid_users": 2048, "seed": 0},
    )
    for split in (leave_one_out(demo, valid_users=40, seed=5), temporal_split(demo)):
        assert parse_split(split.describe()) == (split.name, split.params)


def test_leave_one_out_short_users_train_only() -> None:
    data = from_columns(["a", "b", "b", "c", "c", "c"], ["x", "x", "y", "x", "y", "z"])
    split = leave_one_out(data)
    assert list(split.test.users) == [2]
    assert [list(split.train[u]) for u in range(3)] == [[1], [1, 2], [1]]
    assert split.valid.targets.tolist() == [2] and split.test.targets.tolist() == [3]


def test_leave_one_out_needs_three_interactions() -> None:
    data = from_columns(["a", "b", "b"], ["x", "x", "y"])
    with pytest.raises(DataError, match="3 or more interactions"):
        leave_one_out(data)


def test_temporal_split_exact() -> None:
    # Global times 0..9; fractions 0.2/0.2 put the cut-offs at the 60% and 80% quantiles.
    users = ["a", "a", "a", "a", "b", "b", "b", "c", "c", "d"]
    items = ["1", "2", "3", "4", "1", "5", "6", "2", "7", "8"]
    times = [0, 2, 6, 8, 1, 7, 9, 3, 5, 4]
    data = from_columns(users, items, times)
    split = temporal_split(data, valid_fraction=0.2, test_fraction=0.2)
    t_valid, t_test = split.params["valid_cutoff"], split.params["test_cutoff"]
    assert t_valid == pytest.approx(np.quantile(times, 0.6)) and t_test == pytest.approx(
        np.quantile(times, 0.8)
    )
    ext = data.items.to_external
    # Training: everything strictly before the validation cut-off.
    seqs = data.sequences()
    ts = data.timestamp
    assert ts is not None
    for u in range(data.n_users):
        lo, hi = seqs.offsets[u], seqs.offsets[u + 1]
        assert list(split.train[u]) == [i for i, t in zip(seqs[u], ts[lo:hi], strict=True) if t < t_valid]
    # Validation: first item in [t_valid, t_test) of users with earlier history; test: first at/after t_test.
    for cases, lo_cut, hi_cut in ((split.valid, t_valid, t_test), (split.test, t_test, np.inf)):
        for r, u in enumerate(cases.users):
            lo, hi = seqs.offsets[u], seqs.offsets[u + 1]
            tt = ts[lo:hi]
            first = int(np.flatnonzero((tt >= lo_cut) & (tt < hi_cut))[0])
            assert cases.targets[r] == seqs[u][first]
            assert list(cases.histories[r]) == [i for i, t in zip(seqs[u], tt, strict=True) if t < lo_cut]
            assert len(cases.histories[r]) > 0
    assert ext(split.valid.targets) == ["3", "5"] and ext(split.test.targets) == ["4", "6"]
    assert data.users.to_external(split.test.users) == ["a", "b"]


def test_temporal_split_on_demo_no_future_in_inputs() -> None:
    data = make_demo(n_users=200, n_items=100, seed=5)
    split = temporal_split(data)
    assert len(split.test) > 0 and len(split.valid) > 0
    seqs = data.sequences()
    ts = data.timestamp
    assert ts is not None
    t_test = split.params["test_cutoff"]
    for r, u in enumerate(split.test.users):
        lo = seqs.offsets[u]
        n_hist = len(split.test.histories[r])
        assert np.all(ts[lo : lo + n_hist] < t_test)  # inputs are strictly before the cut-off
        assert ts[lo + n_hist] >= t_test  # and the target is the first after it


def test_temporal_split_errors() -> None:
    with pytest.raises(DataError, match="needs timestamps"):
        temporal_split(from_columns(["a", "a"], ["x", "y"]))
    data = from_columns(["a", "a", "b"], ["x", "y", "z"], [0, 1, 2])
    with pytest.raises(DataError, match="fractions"):
        temporal_split(data, valid_fraction=0.6, test_fraction=0.5)
