"""The resume-state format of the training loop: model, optimizer, best weights, early stopping, RNG.

A state directory holds ``train_state.json`` (the commit point: counters, the result so far, the
optimizer's parameter groups, the name and SHA-256 of the tensor file) and one
``train_state.eNNNNN.bNNNNNNN.safetensors`` file (model and best weights, optimizer state, every
rank's torch RNG state for a mid-epoch save). :func:`save_state` writes the tensors first and the
JSON last, so a kill at any point leaves the previous complete state loadable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnrec.checkpoint import CheckpointError, load_tensors, read_json, save_tensors, write_json
from attnrec.training.result import TrainResult
from attnrec.training.train_config import TrainConfig

log = logging.getLogger("attnrec.training")
STATE_JSON = "train_state.json"  # the commit point of a saved training state
FORMAT = 2

# The training settings a resumed run must share with the run that saved the state: they decide its
# trajectory. Budgets, stopping rules and hardware settings may change (a run ended on its time budget
# continues when the budget is raised).
TRAJECTORY = (
    "lr",
    "batch_size",
    "optimizer",
    "beta1",
    "beta2",
    "weight_decay",
    "grad_clip",
    "lr_decay",
    "max_lr_decays",
    "lr_schedule",
    "monitor",
    "mode",
    "seed",
    "amp",
)

NumpyRngState = dict[str, Any]  # numpy's ``bit_generator.state``: nested JSON-able dict, as numpy types it
RngStates = list[dict[str, torch.Tensor]]  # per rank: torch's "cpu" (and "cuda") RNG state


@dataclass
class TrainState:
    """Where the loop is and what it has decided so far; saved with the tensors of model and optimizer."""

    epoch: int = 0  # last completed epoch
    batch: int = 0  # batches of epoch + 1 already trained (0: at an epoch boundary)
    bad: int = 0  # evaluations without improvement since the best one
    decays: int = 0  # learning-rate drops so far (lr_decay < 1)
    best: dict[str, torch.Tensor] | None = None  # the best validation weights (CPU copies)
    result: TrainResult = field(default_factory=TrainResult)
    # Mid-epoch only: the epoch's running loss, its time so far and the random state at ``batch``.
    loss_total: float = 0.0
    loss_count: int = 0
    epoch_seconds: float = 0.0
    numpy_rng: NumpyRngState | None = None
    rng_states: RngStates = field(default_factory=list)

    def restore_rng(
        self, rng: np.random.Generator, device: torch.device, rank: int, world: int, seed: int, epoch: int
    ) -> None:
        """After regenerating the epoch's first ``batch`` batches: check the data stream, restore torch's
        RNG."""
        if self.numpy_rng is not None and rng.bit_generator.state != self.numpy_rng:
            raise CheckpointError(
                f"the training state was saved at epoch {self.epoch + 1}, batch {self.batch}, but "
                "regenerating that epoch's batches does not reach the same random state: different training "
                "data, batch size, model settings or seed than the interrupted run?"
            )
        if len(self.rng_states) == world:
            torch.set_rng_state(self.rng_states[rank]["cpu"])
            if device.type == "cuda" and "cuda" in self.rng_states[rank]:
                torch.cuda.set_rng_state(self.rng_states[rank]["cuda"], device)
        else:  # another process count than the saved run: same batches, but fresh dropout streams
            log.warning(
                "training state saved with %d process(es), resumed with %d: dropout randomness differs",
                len(self.rng_states),
                world,
            )
            torch.manual_seed(seed * 1_000_003 + epoch + 7919 * rank + 104_729 * self.batch)


def gather_rng_states(device: torch.device, world: int) -> RngStates:
    """Every rank's torch RNG state (CPU, and CUDA when training there), gathered on all ranks."""
    mine = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        mine["cuda"] = torch.cuda.get_rng_state(device)
    if world == 1:
        return [mine]
    import torch.distributed as dist

    states: list[dict[str, torch.Tensor] | None] = [None] * world
    dist.all_gather_object(states, {k: v.cpu() for k, v in mine.items()})
    return [s for s in states if s is not None]


def trajectory(cfg: TrainConfig) -> dict[str, Any]:
    """The settings of ``cfg`` a resumed run must keep (:data:`TRAJECTORY`; with a cosine schedule also
    ``max_epochs``, which shapes it)."""
    out = {k: getattr(cfg, k) for k in TRAJECTORY}
    if cfg.lr_schedule == "cosine":
        out["max_epochs"] = cfg.max_epochs
    return out


def save_state(
    d: Path,
    module: nn.Module,
    opt: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    state: TrainState,
    seconds: float | None = None,
    settings: dict[str, Any] | None = None,
) -> None:
    """Write ``state``: tensors under a new name, then the JSON naming them (the atomic commit), then remove
    older tensor files. ``seconds`` (mid-epoch) replaces the result's training time so far; ``settings``
    (:func:`trajectory`) are saved for :func:`load_state` to check."""
    tensors = {f"model.{k}": v for k, v in module.state_dict().items()}
    if state.best is not None:
        tensors |= {f"best.{k}": v for k, v in state.best.items()}
    osd = opt.state_dict()
    scalars = []  # optimizer state kept as Python numbers (e.g. SparseAdam's step), restored as such
    for pid, st in osd["state"].items():
        for key, val in st.items():
            tensors[f"opt.{pid}.{key}"] = val if torch.is_tensor(val) else torch.tensor(val)
            if not torch.is_tensor(val):
                scalars.append(f"{pid}.{key}")
    for r, states in enumerate(state.rng_states):
        tensors |= {f"rng.{r}.{k}": v for k, v in states.items()}
    name = f"train_state.e{state.epoch:05d}.b{state.batch:07d}.safetensors"
    sha = save_tensors(d / name, tensors)
    res = state.result.to_dict()
    if seconds is not None:
        res["seconds"] = seconds
    meta = {
        "format": FORMAT,
        "epoch": state.epoch,
        "batch": state.batch,
        "bad": state.bad,
        "decays": state.decays,
        "tensors": name,
        "sha256": sha,
        "param_groups": osd["param_groups"],
        "result": res,
        "loss_total": state.loss_total,
        "loss_count": state.loss_count,
        "epoch_seconds": state.epoch_seconds,
        "numpy_rng": state.numpy_rng,
        "world_size": len(state.rng_states),
        "scaler": scaler.state_dict() if scaler.is_enabled() else None,
        "opt_scalars": scalars,
        "settings": settings,
    }
    write_json(d / STATE_JSON, meta)
    for old in d.glob("train_state*.safetensors"):
        if old.name != name:
            old.unlink(missing_ok=True)


def load_state(
    d: Path,
    module: nn.Module,
    opt: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    device: torch.device,
    settings: dict[str, Any] | None = None,
) -> TrainState:
    """Load the state saved in ``d`` into ``module``, ``opt`` and ``scaler``; return the loop's position.

    Raises :class:`CheckpointError` for a missing, truncated or corrupted state, one of another model, or
    one saved with other ``settings`` (:func:`trajectory`; states saved before settings were recorded
    are not checked).
    """
    path = d / STATE_JSON
    meta = read_json(path)
    saved = meta.get("settings") if isinstance(meta, dict) else None
    if isinstance(saved, dict) and settings is not None:
        diff = [
            f"{k}={saved.get(k)!r} (now {settings.get(k)!r})"
            for k in sorted(saved.keys() | settings.keys())
            if saved.get(k) != settings.get(k)
        ]
        if diff:
            raise CheckpointError(
                f"{d}: training state saved with other settings: {', '.join(diff)}; resume with "
                "the same settings or use another state directory"
            )
    try:
        name = str(meta.get("tensors", "train_state.safetensors"))
        sha, epoch, batch = str(meta["sha256"]), int(meta["epoch"]), int(meta.get("batch", 0))
        r = dict(meta["result"])
        param_groups = meta["param_groups"]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(
            f"{path}: incomplete or corrupted training state ({type(e).__name__}: {e})"
        ) from e
    tensors = load_tensors(d / name, sha)
    model = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")} or None
    try:
        module.load_state_dict(model)
    except RuntimeError as e:
        raise CheckpointError(f"{d}: training state does not match this model ({e})") from e
    opt_state, rng = _split_tensors(tensors, set(meta.get("opt_scalars") or []), device)
    try:
        opt.load_state_dict({"state": opt_state, "param_groups": param_groups})
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"{d}: optimizer state does not match this model ({e})") from e
    if meta.get("scaler") and scaler.is_enabled():
        scaler.load_state_dict(meta["scaler"])
    r.pop("seconds_per_epoch", None)
    return TrainState(
        epoch,
        batch,
        int(meta["bad"]),
        int(meta["decays"]),
        best,
        TrainResult(**r),
        float(meta.get("loss_total", 0.0)),
        int(meta.get("loss_count", 0)),
        float(meta.get("epoch_seconds", 0.0)),
        meta.get("numpy_rng"),
        rng,
    )


def _split_tensors(
    tensors: dict[str, torch.Tensor], scalars: set[str], device: torch.device
) -> tuple[dict[int, dict[str, Any]], RngStates]:
    """The optimizer state by parameter id (on ``device``; ``step`` counters and ``scalars`` as saved)
    and the per-rank RNG states, from the saved tensor file."""
    state: dict[int, dict[str, Any]] = {}
    rng: dict[int, dict[str, torch.Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith("opt."):
            _, pid, key = k.split(".", 2)
            state.setdefault(int(pid), {})[key] = (
                v.item() if f"{pid}.{key}" in scalars else v.to(device) if key != "step" else v
            )
        elif k.startswith("rng."):
            _, rk, key = k.split(".", 2)
            rng.setdefault(int(rk), {})[key] = v
    return state, [rng[i] for i in sorted(rng)]
