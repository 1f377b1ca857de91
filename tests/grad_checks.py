"""Gradient comparisons for the sampled-softmax tests: one flat gradient vector per loss, and their cosine."""

from __future__ import annotations

import torch

from attnrec.models.contracts import Trainable


def flat_grad(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The gradient of ``model.loss(batch)`` over every parameter that gets one, as one vector."""
    assert isinstance(model, Trainable)
    model.zero_grad()
    model.loss(batch).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))
