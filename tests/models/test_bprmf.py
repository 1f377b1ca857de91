"""BPR-MF: learns a checkerboard, beats POP, folds unknown users in, persists exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from baseline_kit import (
    demo,
    fit,
)

from attnrec import Recommender
from attnrec.data.build import from_columns
from attnrec.data.schema import Interactions
from attnrec.models.bprmf import BPRMF, BPRMFConfig


def checkerboard(n_users: int = 60, n_items: int = 30, per_user: int = 9, seed: int = 0) -> Interactions:
    """Even users consume odd items, odd users even items: each a random 9 of their 15."""
    rng = np.random.default_rng(seed)
    users, items = [], []
    for u in range(n_users):
        side = np.arange(1 + u % 2, n_items + 1, 2)  # u even -> odd items 1,3,..; u odd -> even items
        for i in rng.choice(side, per_user, replace=False):
            users.append(f"u{u}")
            items.append(str(i))
    return from_columns(users, items)


@pytest.fixture(scope="module")
def board() -> tuple[Interactions, Recommender]:
    data = checkerboard()
    return data, fit("bprmf", data, epochs=30, batch_size=64)


def test_checkerboard_unseen_items_of_the_right_parity_come_first(
    board: tuple[Interactions, Recommender],
) -> None:
    data, rec = board
    right = 0
    for u in range(data.n_users):
        got = rec.recommend(user=f"u{u}", k=6).items  # 6 unseen items of the user's side remain
        right += sum(int(i) % 2 != u % 2 for i in got)
    assert right / (6 * data.n_users) >= 0.9


def test_unknown_user_is_folded_in(board: tuple[Interactions, Recommender]) -> None:
    _, rec = board
    for history, parity in ((["1", "3", "5", "7"], 1), (["2", "4", "6", "8"], 0)):
        got = rec.recommend(history=history, k=5).items
        assert all(int(i) % 2 == parity for i in got), (history, got)
    # the same history for a known user of the other side follows that user's own factors
    mixed = rec.recommend(user="u1", history=["1", "3"], k=5).items
    assert sum(int(i) % 2 == 0 for i in mixed) >= 4


def test_scores_shape_padding_and_loss_decreases() -> None:
    data, split = demo()
    torch.manual_seed(0)
    model = BPRMF(BPRMFConfig(dim=8, n_negatives=3), data.n_users, data.n_items)
    rng = np.random.default_rng(0)
    batch = next(model.train_batches(split.train, 256, rng))
    assert batch["negative"].shape[1] == 3 and len(batch["negative"]) <= 256
    seen = set(zip(batch["user"].tolist(), batch["positive"].tolist(), strict=True))
    keys = {(u, i) for u in range(data.n_users) for i in split.train[u].tolist()}
    assert seen <= keys
    assert not any(
        (u, int(j)) in keys
        for u, row in zip(batch["user"].tolist(), batch["negative"], strict=True)
        for j in row
    ), "negatives are never items of the user's training history"
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    first = model.loss(batch).item()
    for _ in range(20):
        opt.zero_grad()
        model.loss(batch).backward()
        opt.step()
    assert model.loss(batch).item() < first
    scores = model.score(model.score_inputs(np.array([0, -1]), split.train.take(np.array([0, 1]))))
    assert scores.shape == (2, data.n_items + 1) and torch.isneginf(scores[:, 0]).all()
    assert torch.isfinite(scores[:, 1:]).all()


def test_similar_items_by_factor_cosine(board: tuple[Interactions, Recommender]) -> None:
    _, rec = board
    got = rec.similar_items("1", k=5)
    assert got.method == "embedding-cosine" and all(int(i) % 2 == 1 for i in got.items)
