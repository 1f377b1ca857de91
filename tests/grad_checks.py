"""Gradient checks shared by the model tests: one flat gradient vector per loss, their cosine, and a short
training."""

from __future__ import annotations

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models.contracts import Trainable


def flat_grad(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The gradient of ``model.loss(batch)`` over every parameter that gets one, as one vector."""
    assert isinstance(model, Trainable)
    model.zero_grad()
    model.loss(batch).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def assert_trains(m: torch.nn.Module, train: Sequences) -> None:
    """Six epochs of Adam: every epoch's last loss finite, the last below the first."""
    assert isinstance(m, Trainable)
    opt = torch.optim.Adam(m.parameters(), 5e-3)
    losses = []
    for epoch in range(6):
        for batch in m.train_batches(train, 64, np.random.default_rng(epoch)):
            loss_value = m.loss(batch)
            opt.zero_grad()
            loss_value.backward()
            opt.step()
        losses.append(loss_value.item())
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
