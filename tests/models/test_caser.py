"""Caser: convolutions over the last L items plus a user embedding; chain, beats POP, persistence."""

from __future__ import annotations

import numpy as np
import torch
from baseline_kit import (
    assert_beats_pop,
    chain,
    demo,
    fit,
    successor_accuracy,
)

from attnrec.models.caser import Caser, CaserConfig


def test_only_the_last_window_items_matter() -> None:
    torch.manual_seed(0)
    model = Caser(CaserConfig(dim=8, window=3, n_vertical=2, n_horizontal=4, fold_in_steps=0), 2, 15).eval()
    users = torch.tensor([0, 0])
    hist = torch.tensor([[1, 2, 3, 4, 5, 6], [9, 9, 9, 4, 5, 6]])  # same last 3 items
    other = torch.tensor([[1, 2, 3, 4, 5, 7]])
    with torch.no_grad():
        s = model.score({"user": users, "history": hist})
        t = model.score({"user": users[:1], "history": other})
    torch.testing.assert_close(s[0], s[1])
    assert not torch.allclose(s[0, 1:], t[0, 1:])
    assert s.shape == (2, 16) and torch.isneginf(s[:, 0]).all()


def test_training_instances_have_windows_targets_and_unseen_negatives() -> None:
    data, split = demo()
    model = Caser(CaserConfig(window=4, targets=2, n_negatives=5), data.n_users, data.n_items)
    batch = next(model.train_batches(split.train, 200, np.random.default_rng(0)))
    assert (
        batch["window"].shape[1] == 4 and batch["positive"].shape[1] == 2 and batch["negative"].shape[1] == 5
    )
    for u, w, pos, neg in zip(
        *(batch[k].tolist() for k in ("user", "window", "positive", "negative")), strict=True
    ):
        seq = split.train[u].tolist()
        assert not set(seq) & set(neg)
        # Some position p >= 1 of the user's sequence has exactly this instance: the 4 items before p
        # (left-padded) as the window and the 2 items from p on (right-padded) as the positives.
        instances = [
            ([0] * (4 - min(p, 4)) + seq[max(0, p - 4) : p], (seq[p : p + 2] + [0, 0])[:2])
            for p in range(1, len(seq))
        ]
        assert (w, pos) in instances, (u, w, pos)
    assert torch.isfinite(model.loss(batch))
    assert model.train_rows(split.train) == int(np.maximum(split.train.lengths() - 1, 0).sum())


def test_recovers_a_deterministic_chain() -> None:
    data = chain()
    rec = fit("caser", data, config={"targets": 1, "dropout": 0.0}, epochs=30, batch_size=128, lr=1e-2)
    assert successor_accuracy(rec, data, context=5) == 1.0  # a full window of L = 5 items


def test_learns_with_sparse_tables() -> None:
    data, split = demo()  # lazy Adam on the tables, Adam on the convolutions (gradients: test_baselines)
    assert_beats_pop(fit("caser", data, split, config={"sparse": True}, epochs=15))
