"""The one training loop: seeded epochs, validation-only early stopping, best weights, exact resume, DDP.

The loop's parts live beside it: the optimizer and learning-rate schedules in
:mod:`attnrec.training.optim`, the per-batch (distributed) step in :mod:`attnrec.training.step`,
the resume-state format in :mod:`attnrec.training.state`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import torch
from torch import nn

from attnrec.checkpoint import CheckpointError, check_dir_target
from attnrec.models.contracts import Trainable
from attnrec.training import distributed
from attnrec.training.callbacks import EpochCallback, check_callbacks, run_callbacks
from attnrec.training.epoch_bar import EpochBar
from attnrec.training.optim import cosine_lr, make_optimizer, scale_lr, set_lr, sparse_parameters
from attnrec.training.result import EpochRecord, TrainResult
from attnrec.training.state import (
    STATE_JSON,
    TrainState,
    gather_rng_states,
    load_state,
    save_state,
    trajectory,
)
from attnrec.training.step import AMP_DTYPES, Stepper
from attnrec.training.train_config import TrainConfig, check_device

__all__ = ["TrainResult", "Validate", "resolve_device", "train"]

log = logging.getLogger("attnrec.training")
Validate = Callable[[nn.Module], dict[str, float]]
T = TypeVar("T")


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else CPU; under torchrun ``auto``/``cuda`` mean GPU
    ``LOCAL_RANK``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and distributed.env_world_size() > 1 and torch.cuda.is_available():
        return torch.device("cuda", distributed.local_rank())
    dev = torch.device(check_device(name))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    return dev


def train(
    module: Trainable[T],
    train_data: T,
    validate: Validate | None,
    cfg: TrainConfig,
    *,
    state_dir: Path | None = None,
    progress: bool = True,
    callbacks: Sequence[EpochCallback] = (),
) -> TrainResult:
    """Train ``module`` (an ``nn.Module`` that is :class:`~attnrec.models.contracts.Trainable`) and keep the
    best weights.

    Epoch ``e`` draws its shuffling and negatives from ``np.random.default_rng([seed, e])`` and
    reseeds torch for dropout, so a run resumed from ``state_dir`` continues exactly as the
    uninterrupted run would: from an epoch end, or from the mid-epoch position saved every
    ``cfg.checkpoint_every`` batches / ``cfg.checkpoint_seconds`` seconds (the epoch's batches
    are regenerated up to that position and the torch RNG state is restored).

    Launched by torchrun (``WORLD_SIZE`` > 1) the loop joins the process group unless one exists,
    wraps the model in DistributedDataParallel and trains each rank on its slice of every global
    batch of ``cfg.batch_size`` rows; the loss is weighted by the rank's share of the batch's loss
    terms (:class:`~attnrec.models.contracts.WeightedLoss` when the model is one, else rows), so the
    averaged gradient is that of the one-process batch. Rank 0 validates and writes the state; the
    metrics and the stop decision are broadcast. On return the module holds the best validation weights.

    ``callbacks`` (:mod:`attnrec.training.callbacks`) see every finished epoch's record on the main
    rank and may stop the run after it (e.g. experiment tracking, pruning a tuning trial).

    ``validate=None`` (a final fit on every event) trains ``cfg.max_epochs`` epochs (or until the time
    budget) without validation and keeps the last weights.
    """
    state_dir = None if state_dir is None else check_dir_target(state_dir, "the training state_dir")
    loop = _Loop(module, train_data, validate, cfg, state_dir, progress, check_callbacks(callbacks))
    owns_group = distributed.init(loop.device)
    try:
        result = loop.run()
    except BaseException:
        if owns_group:
            distributed.cleanup(sync=False)
        raise
    if owns_group:
        distributed.cleanup()
    return result


class _Loop(Generic[T]):
    """One call of :func:`train`: the settings, the model and the state the epochs share."""

    def __init__(
        self,
        module: Trainable[T],
        train_data: T,
        validate: Validate | None,
        cfg: TrainConfig,
        state_dir: Path | None,
        progress: bool,
        callbacks: tuple[EpochCallback, ...] = (),
    ) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"train() needs a torch nn.Module, not {type(module).__name__}")
        self.module, self.train_data, self.validate, self.cfg = module, train_data, validate, cfg
        self.state_dir, self.progress, self.callbacks = state_dir, progress, callbacks
        self.device = resolve_device(cfg.device)

    def run(self) -> TrainResult:
        """Set up (optimizer, resume), train the epochs, restore the best weights."""
        cfg, module, device = self.cfg, self.module, self.device
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.rank, self.world = distributed.rank(), distributed.world_size()
        self.main = self.rank == 0
        module.to(device)
        self.opt = make_optimizer(module, cfg)
        self.amp_dtype = AMP_DTYPES.get(cfg.amp)
        self.scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp == "fp16" and device.type == "cuda")
        self.state, resume = TrainState(), None
        self.settings = trajectory(cfg)  # saved with every state, checked on resume
        if self.state_dir is not None and (self.state_dir / STATE_JSON).exists():
            resume = self.state = load_state(
                self.state_dir, module, self.opt, self.scaler, device, self.settings
            )
            log.info("resumed from %s at epoch %d, batch %d", self.state_dir, resume.epoch + 1, resume.batch)
        if sparse_parameters(module) and (cfg.grad_clip > 0 or self.world > 1):
            raise ValueError(
                "embeddings with sparse gradients (sparse_embedding) support neither grad_clip nor "
                "multi-process training"
            )
        self.stepper = Stepper(module, cfg, device, self.rank, self.world)
        try:
            result = self._epochs(resume)
        finally:
            # the DistributedDataParallel wrapper must not outlive its process group (distributed.cleanup)
            self.stepper.release()
        if self.state.best is not None:
            module.load_state_dict(self.state.best)
        module.eval()
        return result

    def _epochs(self, resume: TrainState | None) -> TrainResult:
        """Train epoch after epoch (from ``resume`` when given) until a stopping rule fires."""
        cfg, module = self.cfg, self.module
        rows = module.train_rows(self.train_data)
        if rows == 0:  # else every epoch is one empty batch whose mean loss is NaN, reported as divergence
            raise ValueError(
                f"the training data gives {type(module).__name__} no training rows: too few events per "
                "user after the split (leave-one-out holds out each user's last two; a next-item "
                "model needs two more)"
            )
        self.n_batches = max(1, math.ceil(rows / cfg.batch_size))
        self.t0 = time.perf_counter() - self.state.result.seconds
        result, stopped = self.state.result, f"epoch limit of {cfg.max_epochs} reached"
        start = self.state.epoch + 1
        for epoch in range(start, cfg.max_epochs + 1):
            # A state saved mid-epoch continues inside its epoch; one saved at an epoch end starts the next
            # afresh.
            inside = resume if resume is not None and resume.batch and epoch == start else None
            record = self._train_epoch(epoch, inside)
            # One clock decides (rank 0's), so every rank stops after the same epoch.
            out_of_time = bool(distributed.broadcast_object(self._out_of_time()))
            if self.validate is None:  # a final fit: the last epoch's weights are the model
                result.best_epoch = epoch
            elif epoch % cfg.eval_every == 0 or epoch == cfg.max_epochs or out_of_time:
                record["valid"] = self._evaluate(epoch, record)
            result.history.append(record)
            result.epochs, result.seconds = epoch, time.perf_counter() - self.t0
            if self.state_dir is not None and self.main:
                at_end = TrainState(
                    epoch=epoch,
                    bad=self.state.bad,
                    decays=self.state.decays,
                    best=self.state.best,
                    result=result,
                )
                save_state(self.state_dir, module, self.opt, self.scaler, at_end, settings=self.settings)
            asked = run_callbacks(self.callbacks, record) if self.main else ""
            reason = str(distributed.broadcast_object(asked)) or self._stop_reason(epoch, out_of_time)
            if reason:
                stopped = reason
                break
        result.stopped = stopped
        return result

    def _train_epoch(self, epoch: int, resume: TrainState | None) -> EpochRecord:
        """Train one epoch (from ``resume``'s mid-epoch position when given); its record without
        validation."""
        cfg, module = self.cfg, self.module
        if cfg.lr_schedule == "cosine":
            set_lr(self.opt, cosine_lr(cfg.lr, epoch, cfg.max_epochs))
        rng = np.random.default_rng([cfg.seed, epoch])
        torch.manual_seed(cfg.seed * 1_000_003 + epoch + 7919 * self.rank)
        skip = resume.batch if resume is not None else 0
        total, count = (resume.loss_total, resume.loss_count) if resume is not None else (0.0, 0)
        e0 = time.perf_counter() - (resume.epoch_seconds if resume is not None else 0.0)
        last_save, restored = time.perf_counter(), False
        module.train()
        with EpochBar(self.progress and self.main, f"epoch {epoch}", self.n_batches) as bar:
            bar.advance(skip)
            for i, batch in enumerate(module.train_batches(self.train_data, cfg.batch_size, rng)):
                if i < skip:  # regenerate the epoch's stream up to the saved position, training nothing
                    if i == skip - 1 and resume is not None:
                        resume.restore_rng(rng, self.device, self.rank, self.world, cfg.seed, epoch)
                        restored = True
                    continue
                done = i + 1
                due = (
                    self.state_dir is not None
                    and done < self.n_batches
                    and (
                        (cfg.checkpoint_every > 0 and done % cfg.checkpoint_every == 0)
                        or (
                            cfg.checkpoint_seconds > 0
                            and self.main
                            and time.perf_counter() - last_save >= cfg.checkpoint_seconds
                        )
                    )
                )
                value, due = self.stepper.step(batch, self.opt, self.scaler, self.amp_dtype, epoch, due)
                total, count = total + value, count + 1
                bar.advance(
                    1,
                    f"loss {total / count:.4f}  {(count - skip) / max(time.perf_counter() - e0, 1e-9):.1f} "
                    "batch/s",
                )
                if due:
                    self._save_mid_epoch(epoch, done, total, count, e0, rng)
                    last_save = time.perf_counter()
                # One process: the epoch ends at the batch that passes the time budget (it is then
                # validated as any last epoch). Several: at the epoch end, where the ranks agree.
                if self.world == 1 and done < self.n_batches and self._out_of_time():
                    log.info(
                        "time budget reached after batch %d of %d of epoch %d", done, self.n_batches, epoch
                    )
                    break
        if skip and count < skip + 1 and not restored:
            raise CheckpointError(
                f"the training state was saved at batch {skip} of epoch {epoch}, but that epoch "
                "now has fewer batches: different training data or batch size?"
            )
        return {"epoch": epoch, "loss": total / max(count, 1), "train_seconds": time.perf_counter() - e0}

    def _save_mid_epoch(
        self, epoch: int, done: int, total: float, count: int, e0: float, rng: np.random.Generator
    ) -> None:
        """Save the position after ``done`` batches of ``epoch`` (started at ``e0``): every rank joins the RNG
        gather, rank 0 writes."""
        rng_states = gather_rng_states(self.device, self.world)
        if self.main and self.state_dir is not None:
            mid = replace(  # the loop's decisions so far, positioned after batch ``done``
                self.state,
                epoch=epoch - 1,
                batch=done,
                loss_total=total,
                loss_count=count,
                epoch_seconds=time.perf_counter() - e0,
                numpy_rng=dict(rng.bit_generator.state),
                rng_states=rng_states,
            )
            save_state(
                self.state_dir,
                self.module,
                self.opt,
                self.scaler,
                mid,
                seconds=time.perf_counter() - self.t0,
                settings=self.settings,
            )

    def _evaluate(self, epoch: int, record: EpochRecord) -> dict[str, float]:
        """Validate; keep the best weights, count evaluations without improvement, lower the rate
        (lr_decay)."""
        cfg, st, result = self.cfg, self.state, self.state.result
        self.module.eval()
        assert self.validate is not None
        metrics = _validate_on_main(self.validate, self.module, self.main, self.world)
        if cfg.monitor not in metrics:
            raise KeyError(f"monitor {cfg.monitor!r} not among validation metrics {sorted(metrics)}")
        value = metrics[cfg.monitor]
        sign = 1.0 if cfg.mode == "max" else -1.0
        if st.best is None or sign * value > sign * result.best_value:
            result.best_epoch, result.best_value, result.best_metrics = epoch, value, metrics
            st.best = {k: v.detach().cpu().clone() for k, v in self.module.state_dict().items()}
            st.bad = 0
        else:
            st.bad += 1
            if cfg.lr_decay < 1.0:
                st.decays += 1
                scale_lr(self.opt, cfg.lr_decay)
        log.info(
            "epoch %d loss %.4f valid %s %.4f (best %.4f @ %d)",
            epoch,
            record["loss"],
            cfg.monitor,
            value,
            result.best_value,
            result.best_epoch,
        )
        return metrics

    def _out_of_time(self) -> bool:
        cfg = self.cfg
        return cfg.time_budget > 0 and time.perf_counter() - self.t0 > cfg.time_budget

    def _stop_reason(self, epoch: int, out_of_time: bool) -> str:
        """Why training stops after this epoch ("" to go on): the first rule that would stop it alone."""
        cfg, st = self.cfg, self.state
        if epoch >= cfg.max_epochs:  # the loop ends here whatever the other rules say
            return f"epoch limit of {cfg.max_epochs} reached"
        may_stop = epoch >= cfg.min_epochs
        if may_stop and cfg.lr_decay < 1.0 and cfg.max_lr_decays and st.decays >= cfg.max_lr_decays:
            return f"learning rate lowered {st.decays} times"
        if may_stop and cfg.lr_decay >= 1.0:
            bad = st.bad if cfg.smooth == 1 else smoothed_bad(self._monitored(), cfg.smooth, cfg.mode)
            if bad >= cfg.patience:
                smoothed = "" if cfg.smooth == 1 else f" (mean of the last {cfg.smooth} validations)"
                return f"no validation improvement in {bad} evaluations{smoothed}"
        if out_of_time:
            return f"time budget of {cfg.time_budget:.0f}s reached"
        return ""

    def _monitored(self) -> list[float]:
        """The monitored validation value of every validated epoch so far, in order."""
        return [r["valid"][self.cfg.monitor] for r in self.state.result.history if "valid" in r]


def smoothed_bad(values: list[float], window: int, mode: str) -> int:
    """Evaluations since the best moving average of ``window`` consecutive ``values`` (``mode`` max/min).

    The average of the first ``k < window`` values is over those ``k``, so the count starts with
    the first evaluation. Pure, so a resumed run (whose history holds every evaluation) decides alike.

    >>> smoothed_bad([0.1, 0.3, 0.2, 0.2], 2, "max")   # means 0.1, 0.2, 0.25, 0.2: best at index 2
    1
    """
    sign = 1.0 if mode == "max" else -1.0
    best, best_at = -float("inf"), -1
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        mean = sign * sum(chunk) / len(chunk)
        if mean > best:
            best, best_at = mean, i
    return len(values) - 1 - best_at if values else 0


def _validate_on_main(validate: Validate, module: nn.Module, main: bool, world: int) -> dict[str, float]:
    """Validation metrics computed on rank 0 and broadcast (an error there is raised on every rank)."""
    payload: tuple[str, dict[str, float] | str] | None = None
    if main:
        try:
            with torch.no_grad():
                payload = ("ok", validate(module))
        except Exception as e:
            if world > 1:
                distributed.broadcast_object(("error", f"{type(e).__name__}: {e}"))
            raise
    payload = distributed.broadcast_object(payload)
    assert payload is not None
    status, content = payload
    if status == "error" or isinstance(content, str):
        raise RuntimeError(f"validation failed on rank 0: {content}")
    return dict(content)
