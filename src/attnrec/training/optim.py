"""Optimizers and learning-rate schedules of the training loop.

:func:`make_optimizer` builds the configured optimizer (with SparseAdam for embeddings that have
sparse gradients, combined by :class:`Optimizers`); :func:`cosine_lr` and :func:`set_lr` set the
learning rate per epoch. The rate is a function of the epoch (or of the saved optimizer state),
so a resumed run follows the same schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from attnrec.training.train_config import TrainConfig


def cosine_lr(lr: float, epoch: int, max_epochs: int) -> float:
    """The learning rate of 1-based ``epoch`` under cosine annealing from ``lr`` over ``max_epochs``."""
    return lr * 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / max_epochs))


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of ``opt``."""
    for g in opt.param_groups:
        g["lr"] = lr


def scale_lr(opt: torch.optim.Optimizer, factor: float) -> None:
    """Multiply the learning rate of every parameter group of ``opt`` by ``factor``."""
    for g in opt.param_groups:
        g["lr"] *= factor


def sparse_parameters(module: nn.Module) -> list[torch.Tensor]:
    """Weights of ``nn.Embedding(sparse=True)`` submodules: they get sparse (row-wise) gradients."""
    return [
        m.weight
        for m in module.modules()
        if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad
    ]


def make_optimizer(module: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The configured optimizer; embeddings with sparse gradients get SparseAdam (lazy Adam) or plain SGD.

    SparseAdam updates only the rows a batch touched (their moments too), so a step's time and
    memory do not grow with the table; weight decay does not apply to those rows.
    """
    sparse = sparse_parameters(module)
    skip = {id(p) for p in sparse}
    params = [p for p in module.parameters() if p.requires_grad and id(p) not in skip]
    parts: list[torch.optim.Optimizer] = []
    if params or not sparse:  # a model of embedding tables only (BPR-MF, FPMC) has no dense part
        if cfg.optimizer == "sgd":
            parts.append(torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay))
        else:
            cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
            parts.append(cls(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay))
    if sparse:
        parts.append(
            torch.optim.SGD(sparse, lr=cfg.lr)
            if cfg.optimizer == "sgd"
            else torch.optim.SparseAdam(sparse, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))
        )
    return parts[0] if len(parts) == 1 else Optimizers(parts)


class Optimizers(torch.optim.Optimizer):
    """Several optimizers over disjoint parameters, stepped, zeroed and saved as one.

    ``param_groups`` lists the parts' groups (the same dicts, so changing a learning rate reaches
    them); ``state_dict`` numbers the parameters across the parts in order.
    """

    # Not calling Optimizer.__init__: the parts own the parameters, groups and state; the
    # properties below only present them as one (hence the overrides of attributes by properties).
    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:  # noqa: D107
        self.parts = parts
        self.defaults = {}

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [g for opt in self.parts for g in opt.param_groups]

    @property
    def state(self) -> dict[torch.Tensor, Any]:  # type: ignore[override]
        return {k: v for opt in self.parts for k, v in opt.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero (or drop) the gradients of every part."""
        for opt in self.parts:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        """One step of every part (closures are not supported)."""
        for opt in self.parts:
            opt.step()

    def _sizes(self) -> list[tuple[int, int]]:
        """Per part: (number of parameters, number of parameter groups)."""
        return [
            (sum(len(g["params"]) for g in opt.param_groups), len(opt.param_groups)) for opt in self.parts
        ]

    def state_dict(self) -> dict[str, Any]:
        """One state dict over all parts, parameters numbered consecutively across them."""
        state: dict[int, Any] = {}
        groups: list[dict[str, Any]] = []
        offset = 0
        for opt, (n, _) in zip(self.parts, self._sizes(), strict=True):
            sd = opt.state_dict()
            state |= {int(pid) + offset: st for pid, st in sd["state"].items()}
            groups += [g | {"params": [p + offset for p in g["params"]]} for g in sd["param_groups"]]
            offset += n
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Split a :meth:`state_dict` back over the parts."""
        offset = first = 0
        for opt, (n, ng) in zip(self.parts, self._sizes(), strict=True):
            groups = [
                g | {"params": [p - offset for p in g["params"]]}
                for g in state_dict["param_groups"][first : first + ng]
            ]
            state = {
                int(pid) - offset: st
                for pid, st in state_dict["state"].items()
                if offset <= int(pid) < offset + n
            }
            opt.load_state_dict({"state": state, "param_groups": groups})
            offset, first = offset + n, first + ng
