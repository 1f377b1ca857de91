"""The one training loop: seeded epochs, validation-only early stopping, best weights, resume."""

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
from attnrec.training.config import TrainConfig

log = logging.getLogger("attnrec.training")
Validate = Callable[[nn.Module], dict[str, float]]


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
    """``auto`` picks CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but CUDA is not available")
    return dev


def make_optimizer(module: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in module.parameters() if p.requires_grad]
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    return cls(params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)


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
    reseeds torch for dropout, so a run resumed from ``state_dir`` after epoch ``e`` continues
    exactly as the uninterrupted run would. On return the module holds the best validation weights.
    """
    device = resolve_device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    module.to(device)
    opt = make_optimizer(module, cfg)
    sign = 1.0 if cfg.mode == "max" else -1.0
    result, best_state, bad, decays, start_epoch = TrainResult(), None, 0, 0, 1
    if state_dir is not None and (state_dir / "train_state.json").exists():
        start_epoch, bad, decays, best_state, result = _load_state(state_dir, module, opt, device)
        log.info("resumed from %s at epoch %d", state_dir, start_epoch)
    n_rows = module.train_rows(train_data)  # type: ignore[operator]
    n_batches = max(1, math.ceil(n_rows / cfg.batch_size))
    t0 = time.perf_counter() - result.seconds
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp)
    scaler = torch.amp.GradScaler("cuda", enabled=cfg.amp == "fp16" and device.type == "cuda")
    stopped = "max_epochs"
    for epoch in range(start_epoch, cfg.max_epochs + 1):
        rng = np.random.default_rng([cfg.seed, epoch])
        torch.manual_seed(cfg.seed * 1_000_003 + epoch)
        module.train()
        e0, total, count = time.perf_counter(), 0.0, 0
        with _progress(progress, f"epoch {epoch}", n_batches) as (bar, task):
            for batch in module.train_batches(train_data, cfg.batch_size, rng):  # type: ignore[operator]
                batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
                with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
                    loss = module.loss(batch)  # type: ignore[operator]
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"epoch {epoch}: loss became {loss.item()}; lower the learning rate")
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                if cfg.grad_clip > 0:
                    scaler.unscale_(opt)
                    nn.utils.clip_grad_norm_(module.parameters(), cfg.grad_clip)
                scaler.step(opt)
                scaler.update()
                total, count = total + loss.item(), count + 1
                if bar is not None:
                    rate = count / max(time.perf_counter() - e0, 1e-9)
                    bar.update(task, advance=1, info=f"loss {total / count:.4f}  {rate:.1f} batch/s")
        record: dict[str, Any] = {"epoch": epoch, "loss": total / max(count, 1), "train_seconds": time.perf_counter() - e0}
        out_of_time = cfg.time_budget > 0 and time.perf_counter() - t0 > cfg.time_budget
        if epoch % cfg.eval_every == 0 or epoch == cfg.max_epochs or out_of_time:
            module.eval()
            with torch.no_grad():
                metrics = validate(module)
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
        if state_dir is not None:
            _save_state(state_dir, module, opt, epoch, bad, decays, best_state, result)
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


def _save_state(
    d: Path, module: nn.Module, opt: torch.optim.Optimizer, epoch: int, bad: int, decays: int,
    best: dict[str, torch.Tensor] | None, result: TrainResult,
) -> None:
    tensors = {f"model.{k}": v for k, v in module.state_dict().items()}
    if best is not None:
        tensors |= {f"best.{k}": v for k, v in best.items()}
    osd = opt.state_dict()
    for pid, st in osd["state"].items():
        for key, val in st.items():
            tensors[f"opt.{pid}.{key}"] = val if torch.is_tensor(val) else torch.tensor(val)
    sha = save_tensors(d / "train_state.safetensors", tensors)
    meta = {"epoch": epoch, "bad": bad, "decays": decays, "sha256": sha,
            "param_groups": osd["param_groups"], "result": result.to_dict()}
    write_json(d / "train_state.json", meta)


def _load_state(
    d: Path, module: nn.Module, opt: torch.optim.Optimizer, device: torch.device
) -> tuple[int, int, int, dict[str, torch.Tensor] | None, TrainResult]:
    meta = read_json(d / "train_state.json")
    tensors = load_tensors(d / "train_state.safetensors", meta.get("sha256"))
    model = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")} or None
    try:
        module.load_state_dict(model)
    except RuntimeError as e:
        raise CheckpointError(f"{d}: training state does not match this model ({e})") from e
    state: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, key = k.split(".", 2)
            state.setdefault(int(pid), {})[key] = v.to(device) if key != "step" else v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    r = meta["result"]
    r.pop("seconds_per_epoch", None)
    return meta["epoch"] + 1, meta["bad"], meta["decays"], best, TrainResult(**r)
