"""benchmarks/peter.py: the matrix-factorisation rating baseline trains through attnrec's one training
loop."""

from __future__ import annotations

import numpy as np
import pytest
from bench_scripts import load

import attnrec.training.loop
from attnrec.data.reviews import ReviewData, random_split
from attnrec.data.schema import IdMap
from attnrec.evaluation.text_metrics import rmse

peter = load("peter")


def _ratings(n_users: int = 30, n_items: int = 20, n: int = 500, seed: int = 0) -> ReviewData:
    """Ratings with a user and an item effect (what biased MF can learn) plus noise."""
    rng = np.random.default_rng(seed)
    user, item = rng.integers(0, n_users, n), rng.integers(1, n_items + 1, n)
    ub, ib = rng.normal(0, 0.8, n_users), rng.normal(0, 0.8, n_items + 1)
    rating = np.clip(np.round(3 + ub[user] + ib[item] + rng.normal(0, 0.3, n)), 1, 5)
    words = tuple("sound is good" for _ in range(n))
    return ReviewData(
        user,
        item,
        rating,
        ("sound",) * n,
        ("good",) * n,
        words,
        np.ones(n),
        IdMap(np.array([f"u{i}" for i in range(n_users)], dtype=object)),
        IdMap(np.array([f"i{i}" for i in range(1, n_items + 1)], dtype=object), offset=1),
    )


def test_matrix_factorisation_learns_through_the_one_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _ratings()
    split = random_split(data, 0)
    calls: list[int] = []

    def counted(*args: object, **kwargs: object) -> attnrec.training.loop.TrainResult:
        calls.append(1)
        return attnrec.training.loop.train(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(peter, "train", counted)
    pred, chosen = peter.matrix_factorisation(data, split, seed=0)
    assert len(calls) == 6  # every width x L2 of the grid is one run of the training loop
    truth = data.rating[split.test]
    global_mean = np.full(len(truth), data.rating[split.train].mean())
    assert rmse(pred, truth) < 0.8 * rmse(global_mean, truth)  # the user and item effects were learned
    assert chosen["dim"] in (8, 32) and chosen["l2"] in (0.01, 0.1, 1.0) and 1 <= chosen["epochs"] <= 1000
