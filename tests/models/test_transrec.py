"""TransRec: unit-ball item points, translations; recovers a chain, beats POP, persists exactly."""

from __future__ import annotations

import numpy as np
import torch
from baseline_kit import (
    chain,
    demo,
    fit,
    successor_accuracy,
)

from attnrec.models.transrec import TransRec, TransRecConfig


def test_recovers_a_deterministic_chain() -> None:
    data = chain()
    rec = fit("transrec", data, epochs=25, batch_size=128)
    assert successor_accuracy(rec, data) == 1.0


def test_scores_are_bias_minus_squared_distance() -> None:
    torch.manual_seed(0)
    model = TransRec(TransRecConfig(dim=6, init_std=1.0), n_users=3, n_items=9).eval()
    with torch.no_grad():
        model.user_trans.weight.normal_()
        model.global_trans.normal_()
        model.bias.weight.normal_()
    points = model.points()
    assert (points.norm(dim=1) <= 1 + 1e-6).all(), "item points stay inside the unit ball"
    hist = torch.tensor([[0, 4, 2]])
    with torch.no_grad():
        got = model.score({"user": torch.tensor([1]), "history": hist})[0]
    query = points[2] + model.global_trans + model.user_trans.weight[1]
    want = model.bias.weight[:, 0] - (query - points).pow(2).sum(1)
    assert torch.isneginf(got[0])
    torch.testing.assert_close(got[1:], want[1:].detach())


def test_unknown_user_without_fold_in_uses_the_global_translation() -> None:
    model = TransRec(TransRecConfig(dim=4, fold_in_steps=0), n_users=2, n_items=5).eval()
    with torch.no_grad():
        model.user_trans.weight.fill_(0.3)  # known users' offsets must not leak into an unknown user
        hist = torch.tensor([[1, 2], [1, 2]])
        s = model.score({"user": torch.tensor([-1, 0]), "history": hist})
        model.user_trans.weight.zero_()
        zero = model.score({"user": torch.tensor([0]), "history": hist[:1]})
    torch.testing.assert_close(s[0], zero[0])
    assert not torch.allclose(s[1], zero[0])


def test_train_rows_count_transitions() -> None:
    data, split = demo()
    model = TransRec(TransRecConfig(), data.n_users, data.n_items)
    rows = sum(len(b["user"]) for b in model.train_batches(split.train, 500, np.random.default_rng(0)))
    assert rows == model.train_rows(split.train) == int(np.maximum(split.train.lengths() - 1, 0).sum())
