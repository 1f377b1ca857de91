"""One optimisation step of the training loop, on one process or on this rank's share of a global batch."""

from __future__ import annotations

import logging
import math

import torch
from torch import nn

from attnrec.models.contracts import Batch, SharedBatch, Trainable, WeightedLoss
from attnrec.training import distributed
from attnrec.training.train_config import TrainConfig

log = logging.getLogger("attnrec.training")

# ``train.amp`` -> the autocast dtype ("none" is absent: no autocast).
AMP_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}


def amp_autocast(device_type: str, amp_dtype: torch.dtype | None) -> torch.autocast:
    """The autocast context of a training step's forward pass and loss: ``amp_dtype`` (from
    :data:`AMP_DTYPES`), or a disabled context when mixed precision is off. Weights, optimizer state and
    the backward's accumulation stay float32."""
    return torch.autocast(device_type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None)


class LossOf(nn.Module):
    """``forward(batch)`` = the model's loss, so DistributedDataParallel and torch.compile can wrap it.

    ``scale`` weights a rank's loss by its share of the global batch; an ``empty`` shard (a last
    batch with fewer rows than ranks) contributes a zero loss that still reaches every parameter,
    as DDP's gradient all-reduce expects.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        if not isinstance(module, Trainable):
            raise TypeError(
                f"{type(module).__name__} cannot be trained by the loop: it has no "
                "train_rows/train_batches/loss (attnrec.models.contracts.Trainable)"
            )
        self.module = module  # a submodule, so DDP and torch.compile see its parameters

    def forward(self, batch: Batch, scale: float = 1.0, empty: bool = False) -> torch.Tensor:
        """The (scaled) loss of ``batch``; a zero touching every parameter when ``empty``."""
        if empty:
            return sum(
                (p.sum() * 0.0 for p in self.module.parameters() if p.requires_grad),
                torch.zeros((), device=next(self.module.parameters()).device),
            )
        loss = self.module.loss(batch)  # scalar
        return loss if scale == 1.0 else loss * scale


def loss_terms(model: object, batch: Batch) -> int:
    """How many terms the model's (mean) loss averages over: its :class:`WeightedLoss` count, else the
    rows."""
    return int(model.loss_terms(batch)) if isinstance(model, WeightedLoss) else distributed.batch_rows(batch)


def shared_keys(model: object) -> frozenset[str]:
    """Batch entries drawn once per batch (:class:`SharedBatch`), kept whole on every rank."""
    return frozenset(model.shared_batch_keys) if isinstance(model, SharedBatch) else frozenset()


class Stepper:
    """One optimisation step on this rank's share of a global batch."""

    def __init__(
        self, module: nn.Module, cfg: TrainConfig, device: torch.device, rank: int, world: int
    ) -> None:
        self.module, self.cfg, self.device, self.rank, self.world = module, cfg, device, rank, world
        self.shared = shared_keys(module)
        # asked once: a Protocol isinstance check is slow for a per-step question
        self.weighted: WeightedLoss | None = module if isinstance(module, WeightedLoss) else None
        self.local = LossOf(module)
        runner: nn.Module = self.local
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            runner = DistributedDataParallel(
                runner, device_ids=[device.index] if device.type == "cuda" else None
            )
        if cfg.compile:
            if device.type == "cuda":
                runner = torch.compile(runner, dynamic=True)  # type: ignore[assignment]
            else:
                log.info("compile=True ignored on %s (CUDA only)", device)
        self.runner = runner

    def release(self) -> None:
        """Drop the DistributedDataParallel wrapper (if any), which must not outlive the process group."""
        self.runner = self.local

    def step(
        self,
        batch: Batch,
        opt: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler,
        amp_dtype: torch.dtype | None,
        epoch: int,
        due: bool,
    ) -> tuple[float, bool]:
        """Returns the global batch's mean loss and whether a mid-epoch save is due (rank 0 decides)."""
        scale, empty = 1.0, False
        if self.world > 1:
            terms = self._terms(batch)
            batch = distributed.shard_batch(batch, self.rank, self.world, self.shared)
            empty = distributed.batch_rows(batch) == 0
            scale = 0.0 if empty else self.world * self._terms(batch) / max(terms, 1)
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        with amp_autocast(self.device.type, amp_dtype):
            loss = self.runner(batch, scale, empty)  # scalar
        if self.world > 1:  # the global loss (and rank 0's save decision) on every rank, before backward
            stats = torch.stack(
                [
                    loss.detach().float() / self.world,
                    torch.tensor(float(due and self.rank == 0), device=loss.device),
                ]
            )  # (2,)
            distributed.all_reduce_sum(stats)
            value, due = stats[0], bool(stats[1].item() > 0)
        else:
            value = loss.detach()
        loss_value = float(value.item())  # the one host sync of the step
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"epoch {epoch}: loss became {loss_value}; lower the learning rate")
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if self.cfg.grad_clip > 0:
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(self.module.parameters(), self.cfg.grad_clip)
        scaler.step(opt)
        scaler.update()
        return loss_value, due

    def _terms(self, batch: Batch) -> int:
        """How many terms the loss averages over in ``batch`` (see :func:`loss_terms`)."""
        return (
            int(self.weighted.loss_terms(batch))
            if self.weighted is not None
            else distributed.batch_rows(batch)
        )
