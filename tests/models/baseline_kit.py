"""Shared helpers for the baseline tests: small demo data, a deterministic chain, fit and check."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnrec import Recommender
from attnrec.data.build import from_columns
from attnrec.data.demo import make_demo
from attnrec.data.schema import Interactions
from attnrec.data.split import EvalSet, Split, leave_one_out
from attnrec.evaluation.protocol import FULL, evaluate


@functools.cache
def demo() -> tuple[Interactions, Split]:
    """A small demo log (300 users, 120 items, ~7k interactions) and its leave-one-out split."""
    data = make_demo(n_users=300, n_items=120, seed=1, mean_length=25)
    return data, leave_one_out(data)


@functools.cache
def pop_metrics() -> dict[str, float]:
    data, split = demo()
    return fit("pop", data, split).evaluate(split.test, FULL).metrics


def fit(
    name: str,
    data: Interactions,
    split: Split | None = None,
    *,
    config: dict[str, Any] | None = None,
    epochs: int = 15,
    **train: Any,
) -> Recommender:
    """Fit ``name`` with its demo preset for exactly ``epochs`` epochs (no early stop, no time budget)."""
    rec = Recommender(
        name,
        config=config,
        preset="demo",
        train={"max_epochs": epochs, "patience": 1000, "time_budget": 0, "threads": 1} | train,
    )
    return rec.fit(data, split, progress=False)


def assert_beats_pop(rec: Recommender) -> dict[str, float]:
    """Full-ranking test HR@10 and NDCG@10 clearly above POP's (1.3x and +0.08 HR@10)."""
    _, split = demo()
    ours, pop = rec.evaluate(split.test, FULL).metrics, pop_metrics()
    assert ours["HR@10"] >= max(1.3 * pop["HR@10"], pop["HR@10"] + 0.08), (rec.name, ours, pop)
    assert ours["NDCG@10"] >= 1.3 * pop["NDCG@10"], (rec.name, ours, pop)
    return ours


def chain(n_users: int = 120, n_items: int = 24, length: int = 14, seed: int = 0) -> Interactions:
    """Every user walks the cycle ``1 -> 2 -> ... -> n_items -> 1`` from a random start.

    The next item is a deterministic function of the current one, so a first-order model must put
    ``i + 1`` first after ``i``; item popularity is flat, so nothing else helps.
    """
    rng = np.random.default_rng(seed)
    users, items = [], []
    for u in range(n_users):
        start = int(rng.integers(n_items))
        for t in range(length):
            users.append(f"u{u}")
            items.append(str((start + t) % n_items + 1))
    return from_columns(users, items)


def successor_accuracy(rec: Recommender, data: Interactions, context: int = 2) -> float:
    """Share of items ``i`` for which the ad-hoc history ``[i - context + 1, ..., i]`` gets ``i + 1``
    first."""
    n = data.n_items
    hits = 0
    for i in range(1, n + 1):
        history = [str((i - j - 1) % n + 1) for j in reversed(range(context))]
        top = rec.recommend(history=history, k=1).items
        hits += top == [str(i % n + 1)]
    return hits / n


def assert_save_load_identity(rec: Recommender, tmp_path: Path) -> None:
    """The reloaded model scores the test cases exactly like the original, recommendations included."""
    data, split = demo()
    cases = split.test
    rows = np.arange(min(64, len(cases)))
    hist = cases.histories.take(rows)
    before = rec.score_histories(cases.users[rows], hist)
    loaded = Recommender.load(rec.save(tmp_path / rec.name), device="cpu")
    after = loaded.score_histories(cases.users[rows], hist)
    assert torch.equal(before, after)
    user = data.users.to_external([int(cases.users[0])])[0]
    assert rec.recommend(user=user, k=10) == loaded.recommend(user=user, k=10)


def assert_recommend_matches_scores(rec: Recommender, k: int = 5) -> None:
    """``recommend`` (which may take the factorised query/item-vector path) ranks like ``score_histories``."""
    data, _ = demo()
    seqs = data.sequences()
    for u in (1, 50, 99):
        hist = seqs[u]
        scores = rec.score_histories(np.array([u]), data.sequences().take(np.array([u])))[0].clone()
        scores[torch.as_tensor(hist)] = -torch.inf
        want = data.items.to_external(torch.topk(scores, k).indices.numpy())
        assert rec.recommend(user=data.users.to_external([u])[0], k=k).items == want


def assert_seen_filtered(rec: Recommender) -> None:
    """No recommendation repeats an item of the user's history, nor returns padding."""
    data, _ = demo()
    for u in range(0, data.n_users, 37):
        user = data.users.to_external([u])[0]
        seen = set(data.items.to_external(data.sequences()[u]))
        got = rec.recommend(user=user, k=20).items
        assert len(got) == 20 and not seen & set(got)


def assert_deterministic(name: str, epochs: int = 2) -> None:
    """Same seed, same scores; another seed, other scores."""
    data, split = demo()
    cases = split.test
    rows = np.arange(32)
    scores = [
        fit(name, data, split, epochs=epochs, seed=s).score_histories(
            cases.users[rows], cases.histories.take(rows)
        )
        for s in (3, 3, 4)
    ]
    assert torch.equal(scores[0], scores[1])
    assert not torch.equal(scores[0], scores[2])


def adhoc_matches_user(rec: Recommender, k: int = 10, min_overlap: float = 0.4) -> float:
    """Recommendations for a user's history given ad hoc (unknown user) overlap the user's own."""
    data, _ = demo()
    seqs = data.sequences()
    overlaps = []
    for u in range(0, data.n_users, 29):
        user = data.users.to_external([u])[0]
        history = data.items.to_external(seqs[u])
        own = set(rec.recommend(user=user, k=k).items)
        adhoc = set(rec.recommend(history=history, k=k).items)
        overlaps.append(len(own & adhoc) / k)
    mean = float(np.mean(overlaps))
    assert mean >= min_overlap, (rec.name, overlaps)
    return mean


def assert_fold_in_helps(rec: Recommender, factor: float = 1.1) -> tuple[float, float]:
    """Test cases scored as unknown users (index -1): the folded-in vector beats the mean-user prior."""
    _, split = demo()
    t = split.test
    anonymous = EvalSet(np.full(len(t), -1), t.histories, t.targets)
    folded = evaluate(rec.score_histories, anonymous, FULL).metrics["NDCG@10"]
    steps = rec.core.config.fold_in_steps
    rec.core.config = dataclasses.replace(rec.core.config, fold_in_steps=0)
    try:
        prior = evaluate(rec.score_histories, anonymous, FULL).metrics["NDCG@10"]
    finally:
        rec.core.config = dataclasses.replace(rec.core.config, fold_in_steps=steps)
    assert folded >= factor * prior, (rec.name, folded, prior)
    return folded, prior
