"""The one training loop: seeded epochs, validation-only early stopping, best weights, exact resume, DDP."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from torch import nn

from attnrec.checkpoint import CheckpointError, load_tensors, read_json, save_tensors, write_json
from attnrec.training import distributed
from attnrec.training.config import TrainConfig

log = logging.getLogger("attnrec.training")
Validate = Callable[[nn.Module], dict[str, float]]
STATE_JSON = "train_state.json"  # the commit point of a saved training state


@dataclass
class TrainResult:
    """What happened during training; ``history`` has one record per epoch."""

    best_epoch: int = 0
    best_value: float = float("nan")
    best_metrics: dict[str, float] = field(default_factory=dict)
    epochs: int = 0
    seconds: float = 0.0
    stopped: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def seconds_per_epoch(self) -> float:
        times = [h["train_seconds"] for h in self.history]
        return float(np.mean(times)) if times else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"seconds_per_epoch": self.seconds_per_epoch}


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else CPU; under torchrun ``auto``/``cuda`` mean GPU ``LOCAL_RANK``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and distributed.env_world_size() > 1 and torch.cuda.is_available():
        return torch.device("cuda", distributed.local_rank())
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    return dev


def cosine_lr(lr: float, epoch: int, max_epochs: int) -> float:
    """The learning rate of 1-based ``epoch`` under cosine annealing from ``lr`` over ``max_epochs``."""
    return lr * 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / max_epochs))


def sparse_parameters(module: nn.Module) -> list[torch.Tensor]:
    """Weights of ``nn.Embedding(sparse=True)`` submodules: they get sparse (row-wise) gradients."""
    return [m.weight for m in module.modules() if isinstance(m, nn.Embedding) and m.sparse and m.weight.requires_grad]


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
        parts.append(torch.optim.SGD(sparse, lr=cfg.lr) if cfg.optimizer == "sgd"
                     else torch.optim.SparseAdam(sparse, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2)))
    return parts[0] if len(parts) == 1 else Optimizers(parts)


class Optimizers(torch.optim.Optimizer):
    """Several optimizers over disjoint parameters, stepped, zeroed and saved as one.

    ``param_groups`` lists the parts' groups (the same dicts, so changing a learning rate reaches
    them); ``state_dict`` numbers the parameters across the parts in order.
    """

    def __init__(self, parts: list[torch.optim.Optimizer]) -> None:  # noqa: D107 - no Optimizer.__init__
        self.parts = parts
        self.defaults = {}

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return [g for opt in self.parts for g in opt.param_groups]

    @property
    def state(self) -> dict[Any, Any]:  # type: ignore[override]
        return {k: v for opt in self.parts for k, v in opt.state.items()}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for opt in self.parts:
            opt.step()

    def _sizes(self) -> list[tuple[int, int]]:
        return [(sum(len(g["params"]) for g in opt.param_groups), len(opt.param_groups)) for opt in self.parts]

    def state_dict(self) -> dict[str, Any]:
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
        offset = first = 0
        for opt, (n, ng) in zip(self.parts, self._sizes(), strict=True):
            groups = [g | {"params": [p - offset for p in g["params"]]}
                      for g in state_dict["param_groups"][first : first + ng]]
            state = {int(pid) - offset: st for pid, st in state_dict["state"].items() if offset <= int(pid) < offset + n}
            opt.load_state_dict({"state": state, "param_groups": groups})
            offset, first = offset + n, first + ng


def train(
    module: nn.Module,
    train_data: Any,
    validate: Validate,
    cfg: TrainConfig,
    *,
    state_dir: Path | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train ``module`` (which provides ``train_batches``/``train_rows``/``loss``) and keep the best weights.

    Epoch ``e`` draws its shuffling and negatives from ``np.random.default_rng([seed, e])`` and
    reseeds torch for dropout, so a run resumed from ``state_dir`` continues exactly as the
    uninterrupted run would: from an epoch end, or from the mid-epoch position saved every
    ``cfg.checkpoint_every`` batches / ``cfg.checkpoint_seconds`` seconds (the epoch's batches
    are regenerated up to that position and the torch RNG state is restored).

    Launched by torchrun (``WORLD_SIZE`` > 1) the loop joins the process group unless one exists,
    wraps the model in DistributedDataParallel and trains each rank on its slice of every global
    batch of ``cfg.batch_size`` rows; the loss is weighted by the rank's share of the batch's loss
    terms (``module.loss_terms(batch)`` when the model defines it, else rows), so the averaged
    gradient is that of the one-process batch. Rank 0 validates and writes the state; the metrics
    and the stop decision are broadcast. On return the module holds the best validation weights.
    """
    device = resolve_device(cfg.device)
    owns_group = distributed.init(device)
    try:
        result = _train(module, train_data, validate, cfg, device, state_dir, progress)
    except BaseException:
        if owns_group:
            distributed.cleanup(sync=False)
        raise
    if owns_group:
        distributed.cleanup()
    return result


def _train(
    module: nn.Module, train_data: Any, validate: Validate, cfg: TrainConfig, device: torch.device,
    state_dir: Path | None, progress: bool,
) -> TrainResult:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    rank, world = distributed.rank(), distributed.world_size()
    main = rank == 0
    module.to(device)
    opt = make_optimizer(module, cfg)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp == "fp16" and device.type == "cuda")
    sign = 1.0 if cfg.mode == "max" else -1.0
    result, best_state, bad, decays, start_epoch = TrainResult(), None, 0, 0, 1
    resume: _Resume | None = None
    if state_dir is not None and (state_dir / STATE_JSON).exists():
        resume = _load_state(state_dir, module, opt, scaler, device)
        start_epoch, bad, decays, best_state, result = resume.epoch + 1, resume.bad, resume.decays, resume.best, resume.result
        log.info("resumed from %s at epoch %d, batch %d", state_dir, start_epoch, resume.batch)
    if sparse_parameters(module) and (cfg.grad_clip > 0 or world > 1):
        raise ValueError("embeddings with sparse gradients (sparse_embedding) support neither grad_clip nor "
                         "multi-process training")
    stepper = _Stepper(module, cfg, device, rank, world)
    n_rows = module.train_rows(train_data)  # type: ignore[operator]
    n_batches = max(1, math.ceil(n_rows / cfg.batch_size))
    t0 = time.perf_counter() - result.seconds
    stopped = "max_epochs"
    for epoch in range(start_epoch, cfg.max_epochs + 1):
        if cfg.lr_schedule == "cosine":
            for g in opt.param_groups:
                g["lr"] = cosine_lr(cfg.lr, epoch, cfg.max_epochs)
        rng = np.random.default_rng([cfg.seed, epoch])
        torch.manual_seed(cfg.seed * 1_000_003 + epoch + 7919 * rank)
        skip = resume.batch if resume is not None and epoch == start_epoch else 0
        total, count = (resume.loss_total, resume.loss_count) if resume is not None and skip else (0.0, 0)
        e0 = time.perf_counter() - (resume.epoch_seconds if resume is not None and skip else 0.0)
        last_save = time.perf_counter()
        module.train()
        with _progress(progress and main, f"epoch {epoch}", n_batches) as (bar, task):
            if bar is not None and skip:
                bar.update(task, advance=skip)
            for i, batch in enumerate(module.train_batches(train_data, cfg.batch_size, rng)):  # type: ignore[operator]
                if i < skip:  # regenerate the epoch's stream up to the saved position, training nothing
                    if i == skip - 1:
                        assert resume is not None
                        resume.restore_rng(rng, device, rank, world, cfg.seed, epoch)
                    continue
                done = i + 1
                due = (state_dir is not None and done < n_batches and (
                    (cfg.checkpoint_every > 0 and done % cfg.checkpoint_every == 0)
                    or (cfg.checkpoint_seconds > 0 and main and time.perf_counter() - last_save >= cfg.checkpoint_seconds)))
                value, due = stepper.step(batch, opt, scaler, amp_dtype, epoch, due)
                total, count = total + value, count + 1
                if bar is not None:
                    rate = (count - skip) / max(time.perf_counter() - e0, 1e-9)
                    bar.update(task, advance=1, info=f"loss {total / count:.4f}  {rate:.1f} batch/s")
                if due:
                    rng_states = _gather_rng_states(device, world)
                    if main and state_dir is not None:
                        _save_state(state_dir, module, opt, scaler, epoch=epoch - 1, batch=done, bad=bad,
                                    decays=decays, best=best_state, result=result, loss_total=total,
                                    loss_count=count, epoch_seconds=time.perf_counter() - e0,
                                    numpy_rng=dict(rng.bit_generator.state), rng_states=rng_states,
                                    seconds=time.perf_counter() - t0)
                    last_save = time.perf_counter()
        if skip and count < skip + 1 and resume is not None and not resume.restored:
            raise CheckpointError(f"the training state was saved at batch {skip} of epoch {epoch}, but that epoch "
                                  "now has fewer batches: different training data or batch size?")
        record: dict[str, Any] = {"epoch": epoch, "loss": total / max(count, 1), "train_seconds": time.perf_counter() - e0}
        # One clock decides (rank 0's), so every rank stops after the same epoch.
        out_of_time = bool(distributed.broadcast_object(cfg.time_budget > 0 and time.perf_counter() - t0 > cfg.time_budget))
        if epoch % cfg.eval_every == 0 or epoch == cfg.max_epochs or out_of_time:
            module.eval()
            metrics = _validate_on_main(validate, module, main, world)
            record["valid"] = metrics
            if cfg.monitor not in metrics:
                raise KeyError(f"monitor {cfg.monitor!r} not among validation metrics {sorted(metrics)}")
            value = metrics[cfg.monitor]
            if best_state is None or sign * value > sign * result.best_value:
                result.best_epoch, result.best_value, result.best_metrics = epoch, value, metrics
                best_state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
                bad = 0
            else:
                bad += 1
                if cfg.lr_decay < 1.0:
                    decays += 1
                    for g in opt.param_groups:
                        g["lr"] *= cfg.lr_decay
            log.info("epoch %d loss %.4f valid %s %.4f (best %.4f @ %d)", epoch, record["loss"], cfg.monitor,
                     value, result.best_value, result.best_epoch)
        result.history.append(record)
        result.epochs, result.seconds = epoch, time.perf_counter() - t0
        if state_dir is not None and main:
            _save_state(state_dir, module, opt, scaler, epoch=epoch, batch=0, bad=bad, decays=decays,
                        best=best_state, result=result)
        if cfg.lr_decay < 1.0 and cfg.max_lr_decays and decays >= cfg.max_lr_decays:
            stopped = f"learning rate lowered {decays} times"
            break
        if cfg.lr_decay >= 1.0 and bad >= cfg.patience:
            stopped = f"no validation improvement in {bad} evaluations"
            break
        if out_of_time:
            stopped = f"time budget of {cfg.time_budget:.0f}s reached"
            break
    result.stopped = stopped
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return result


class _LossOf(nn.Module):
    """``forward(batch)`` = the model's loss, so DistributedDataParallel and torch.compile can wrap it.

    ``scale`` weights a rank's loss by its share of the global batch; an ``empty`` shard (a last
    batch with fewer rows than ranks) contributes a zero loss that still reaches every parameter,
    as DDP's gradient all-reduce expects.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: dict[str, torch.Tensor], scale: float = 1.0, empty: bool = False) -> torch.Tensor:
        if empty:
            return sum((p.sum() * 0.0 for p in self.module.parameters() if p.requires_grad),
                       torch.zeros((), device=next(self.module.parameters()).device))
        loss = self.module.loss(batch)  # type: ignore[operator]
        return loss if scale == 1.0 else loss * scale


def loss_terms(module: nn.Module, batch: dict[str, torch.Tensor]) -> int:
    """How many terms the model's (mean) loss averages over: ``module.loss_terms(batch)`` or the rows."""
    f = getattr(module, "loss_terms", None)
    return int(f(batch)) if callable(f) else distributed.batch_rows(batch)


class _Stepper:
    """One optimisation step on this rank's share of a global batch."""

    def __init__(self, module: nn.Module, cfg: TrainConfig, device: torch.device, rank: int, world: int) -> None:
        self.module, self.cfg, self.device, self.rank, self.world = module, cfg, device, rank, world
        self.shared = frozenset(getattr(module, "shared_batch_keys", ()))
        runner: nn.Module = _LossOf(module)
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel

            runner = DistributedDataParallel(runner, device_ids=[device.index] if device.type == "cuda" else None)
        if cfg.compile:
            if device.type == "cuda":
                runner = torch.compile(runner, dynamic=True)  # type: ignore[assignment]
            else:
                log.info("compile=True ignored on %s (CUDA only)", device)
        self.runner = runner

    def step(
        self, batch: dict[str, torch.Tensor], opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
        amp_dtype: torch.dtype | None, epoch: int, due: bool,
    ) -> tuple[float, bool]:
        """Returns the global batch's mean loss and whether a mid-epoch save is due (rank 0 decides)."""
        scale, empty = 1.0, False
        if self.world > 1:
            terms = loss_terms(self.module, batch)
            batch = distributed.shard_batch(batch, self.rank, self.world, self.shared)
            empty = distributed.batch_rows(batch) == 0
            scale = 0.0 if empty else self.world * loss_terms(self.module, batch) / max(terms, 1)
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        with torch.autocast(self.device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            loss = self.runner(batch, scale, empty)
        if self.world > 1:  # the global loss (and rank 0's save decision) on every rank, before backward
            stats = torch.stack([loss.detach().float() / self.world,
                                 torch.tensor(float(due and self.rank == 0), device=loss.device)])
            distributed.all_reduce_sum(stats)
            value, due = stats[0], bool(stats[1].item() > 0)
        else:
            value = loss.detach()
        if not torch.isfinite(value):
            raise FloatingPointError(f"epoch {epoch}: loss became {value.item()}; lower the learning rate")
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if self.cfg.grad_clip > 0:
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(self.module.parameters(), self.cfg.grad_clip)
        scaler.step(opt)
        scaler.update()
        return float(value.item()), due


def _validate_on_main(validate: Validate, module: nn.Module, main: bool, world: int) -> dict[str, float]:
    """Validation metrics computed on rank 0 and broadcast (an error there is raised on every rank)."""
    payload: tuple[str, Any] | None = None
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
    if payload[0] == "error":
        raise RuntimeError(f"validation failed on rank 0: {payload[1]}")
    return dict(payload[1])


def _gather_rng_states(device: torch.device, world: int) -> list[dict[str, torch.Tensor]]:
    """Every rank's torch RNG state (CPU, and CUDA when training there), gathered on all ranks."""
    mine = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(device)
    if world == 1:
        return [mine]
    import torch.distributed as dist

    states: list[Any] = [None] * world
    dist.all_gather_object(states, {k: v.cpu() for k, v in mine.items()})
    return states

class _progress:
    """A rich progress bar, or nothing when disabled."""

    def __init__(self, enabled: bool, label: str, total: int) -> None:
        self.enabled, self.label, self.total = enabled, label, total
        self.bar: Progress | None = None

    def __enter__(self) -> tuple[Progress | None, Any]:
        if not self.enabled:
            return None, None
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                            TimeElapsedColumn(), transient=True)
        self.bar.__enter__()
        return self.bar, self.bar.add_task(self.label, total=self.total, info="")

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@dataclass
class _Resume:
    """A saved training state: where to continue and with what."""

    epoch: int  # last completed epoch
    batch: int  # batches of epoch + 1 already trained (0: resume at an epoch boundary)
    bad: int
    decays: int
    best: dict[str, torch.Tensor] | None
    result: TrainResult
    loss_total: float = 0.0
    loss_count: int = 0
    epoch_seconds: float = 0.0
    numpy_rng: dict[str, Any] | None = None
    rng_states: list[dict[str, torch.Tensor]] = field(default_factory=list)
    restored: bool = False

    def restore_rng(self, rng: np.random.Generator, device: torch.device, rank: int, world: int, seed: int,
                    epoch: int) -> None:
        """After regenerating the epoch's first ``batch`` batches: check the data stream, restore torch's RNG."""
        if self.numpy_rng is not None and rng.bit_generator.state != self.numpy_rng:
            raise CheckpointError(
                f"the training state was saved at epoch {self.epoch + 1}, batch {self.batch}, but regenerating that "
                "epoch's batches does not reach the same random state: different training data, batch size, "
                "model settings or seed than the interrupted run?")
        if len(self.rng_states) == world:
            torch.set_rng_state(self.rng_states[rank]["cpu"])
            if device.type == "cuda" and "cuda" in self.rng_states[rank]:
                torch.cuda.set_rng_state(self.rng_states[rank]["cuda"], device)
        else:  # another process count than the saved run: same batches, but fresh dropout streams
            log.warning("training state saved with %d process(es), resumed with %d: dropout randomness differs",
                        len(self.rng_states), world)
            torch.manual_seed(seed * 1_000_003 + epoch + 7919 * rank + 104_729 * self.batch)
        self.restored = True


def _save_state(
    d: Path, module: nn.Module, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler, *, epoch: int, batch: int,
    bad: int, decays: int, best: dict[str, torch.Tensor] | None, result: TrainResult, loss_total: float = 0.0,
    loss_count: int = 0, epoch_seconds: float = 0.0, numpy_rng: dict[str, Any] | None = None,
    rng_states: list[dict[str, torch.Tensor]] | None = None, seconds: float | None = None,
) -> None:
    """Write the state: tensors under a new name, then the JSON naming them (the atomic commit), then
    remove older tensor files. A kill at any point leaves the previous complete state loadable."""
    tensors = {f"model.{k}": v for k, v in module.state_dict().items()}
    if best is not None:
        tensors |= {f"best.{k}": v for k, v in best.items()}
    osd = opt.state_dict()
    scalars = []  # optimizer state kept as Python numbers (e.g. SparseAdam's step), restored as such
    for pid, st in osd["state"].items():
        for key, val in st.items():
            tensors[f"opt.{pid}.{key}"] = val if torch.is_tensor(val) else torch.tensor(val)
            if not torch.is_tensor(val):
                scalars.append(f"{pid}.{key}")
    for r, states in enumerate(rng_states or []):
        tensors |= {f"rng.{r}.{k}": v for k, v in states.items()}
    name = f"train_state.e{epoch:05d}.b{batch:07d}.safetensors"
    sha = save_tensors(d / name, tensors)
    res = result.to_dict()
    if seconds is not None:
        res["seconds"] = seconds
    meta = {"format": 2, "epoch": epoch, "batch": batch, "bad": bad, "decays": decays, "tensors": name,
            "sha256": sha, "param_groups": osd["param_groups"], "result": res, "loss_total": loss_total,
            "loss_count": loss_count, "epoch_seconds": epoch_seconds, "numpy_rng": numpy_rng,
            "world_size": len(rng_states or []), "scaler": scaler.state_dict() if scaler.is_enabled() else None,
            "opt_scalars": scalars}
    write_json(d / STATE_JSON, meta)
    for old in d.glob("train_state*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


def _load_state(
    d: Path, module: nn.Module, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler, device: torch.device
) -> _Resume:
    path = d / STATE_JSON
    meta = read_json(path)
    try:
        name = str(meta.get("tensors", "train_state.safetensors"))
        sha, epoch, batch = str(meta["sha256"]), int(meta["epoch"]), int(meta.get("batch", 0))
        r = dict(meta["result"])
        param_groups = meta["param_groups"]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: incomplete or corrupted training state ({type(e).__name__}: {e})") from e
    tensors = load_tensors(d / name, sha)
    model = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")} or None
    try:
        module.load_state_dict(model)
    except RuntimeError as e:
        raise CheckpointError(f"{d}: training state does not match this model ({e})") from e
    state: dict[int, dict[str, Any]] = {}
    rng: dict[int, dict[str, torch.Tensor]] = {}
    scalars = set(meta.get("opt_scalars") or [])
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, key = k.split(".", 2)
            state.setdefault(int(pid), {})[key] = (v.item() if f"{pid}.{key}" in scalars
                                                   else v.to(device) if key != "step" else v)
        elif k.startswith("rng."):
            _, rk, key = k.split(".", 2)
            rng.setdefault(int(rk), {})[key] = v
    try:
        opt.load_state_dict({"state": state, "param_groups": param_groups})
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"{d}: optimizer state does not match this model ({e})") from e
    if meta.get("scaler") and scaler.is_enabled():
        scaler.load_state_dict(meta["scaler"])
    r.pop("seconds_per_epoch", None)
    return _Resume(epoch, batch, int(meta["bad"]), int(meta["decays"]), best, TrainResult(**r),
                   float(meta.get("loss_total", 0.0)), int(meta.get("loss_count", 0)),
                   float(meta.get("epoch_seconds", 0.0)), meta.get("numpy_rng"), [rng[i] for i in sorted(rng)])
