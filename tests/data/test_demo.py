"""The built-in demo dataset: deterministic, realistic, and learnable only sequentially."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch

from attnrec.data import leave_one_out
from attnrec.data.demo import make_demo
from attnrec.data.schema import DataError, Sequences
from attnrec.evaluation.protocol import FULL, evaluate


@pytest.fixture(scope="module")
def demo():
    start = time.process_time()  # CPU time: other jobs on a shared machine do not inflate it
    data = make_demo()
    return data, time.process_time() - start


def test_default_size_and_speed(demo) -> None:
    data, seconds = demo
    assert seconds < 2.0
    assert data.n_users == 2000
    assert data.n_items >= 480  # nearly every item of the 500 is consumed by someone
    lengths = data.sequences().lengths()
    assert lengths.min() >= 5
    assert 30 <= np.median(lengths) <= 80
    assert 60_000 <= len(data) <= 160_000


def test_deterministic_and_seeded() -> None:
    a, b = make_demo(200, 100, seed=1), make_demo(200, 100, seed=1)
    np.testing.assert_array_equal(a.user, b.user)
    np.testing.assert_array_equal(a.item, b.item)
    np.testing.assert_array_equal(a.timestamp, b.timestamp)
    assert a.items.to_list() == b.items.to_list()
    assert a.source == b.source and len(a.source.sha256) == 64
    c = make_demo(200, 100, seed=2)
    assert c.source.sha256 != a.source.sha256


def test_realistic_shape(demo) -> None:
    data, _ = demo
    # Chronological timestamps per user, no repeated item within a user.
    seqs = data.sequences()
    users = np.repeat(np.arange(data.n_users), seqs.lengths())
    same_user = users[1:] == users[:-1]
    assert np.all(np.diff(data.timestamp)[same_user] > 0)
    assert len(np.unique(users * (data.n_items + 1) + data.item)) == len(data)
    # Long tail: the 10% most popular items get far more than 10% of the interactions.
    pop = np.sort(data.item_popularity()[1:])[::-1]
    assert pop[: len(pop) // 10].sum() / pop.sum() > 0.25
    assert pop[0] > 10 * pop[-1]
    # Ratings in 1..5 and readable titles for every item.
    assert set(np.unique(data.rating)) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert data.item_titles is not None and set(data.item_titles) == set(data.items.to_list())
    assert all(re.fullmatch(r"[A-Za-z-]+ #\d+(, part \d)?", t) for t in data.item_titles.values())


def test_small_and_bad_arguments() -> None:
    tiny = make_demo(n_users=20, n_items=12, seed=0)
    assert tiny.n_users == 20 and tiny.n_items <= 12
    assert tiny.sequences().lengths().min() >= 5
    with pytest.raises(DataError, match="n_users"):
        make_demo(n_users=0)
    with pytest.raises(DataError, match="p_series"):
        make_demo(p_series=1.5)


def _transition_matrix(train: Sequences) -> np.ndarray:
    """Counts of item -> next item inside each user's training sequence."""
    n = train.n_items + 1
    items = train.items
    ends = train.offsets[1:]
    pos = np.arange(len(items) - 1)
    keep = ~np.isin(pos + 1, ends)  # the pair must not cross a user boundary
    counts = np.zeros((n, n), dtype=np.float64)
    np.add.at(counts, (items[pos[keep]], items[pos[keep] + 1]), 1.0)
    return counts


def test_transitions_beat_popularity(demo) -> None:
    """A first-order transition count model is far better than popularity: the signal is sequential."""
    data, _ = demo
    split = leave_one_out(data)
    pop = np.bincount(split.train.items, minlength=data.n_items + 1).astype(np.float64)
    trans = _transition_matrix(split.train)

    def popularity(
        users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor:
        return torch.as_tensor(np.tile(pop, (len(users), 1)))

    def transitions(
        users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor:
        last = histories.items[histories.offsets[1:] - 1]
        return torch.as_tensor(trans[last] + 1e-6 * pop[None, :])  # popularity breaks ties

    hr_pop = evaluate(popularity, split.test, FULL).metrics["HR@10"]
    hr_trans = evaluate(transitions, split.test, FULL).metrics["HR@10"]
    assert hr_pop < 0.2
    assert hr_trans > 2.0 * hr_pop
    assert hr_trans > 0.3
