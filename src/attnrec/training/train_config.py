"""Settings of the one training loop, shared by every neural model."""

from __future__ import annotations

import re
from dataclasses import dataclass

from attnrec.config import check_finite

DEVICES = re.compile(r"auto|cpu|mps|cuda(:\d+)?")  # the device names attnrec takes


def check_device(name: str) -> str:
    """``name`` when it names a device (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ``mps``), else a one-line
    ``ValueError`` (not torch's traceback); whether the machine has it is
    :func:`~attnrec.training.loop.resolve_device`'s question."""
    if not isinstance(name, str) or not DEVICES.fullmatch(name):
        raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, not {name!r}")
    return name


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, early stopping and device settings.

    Early stopping watches ``monitor`` on the validation split (never test). ``mode`` is
    ``"max"`` for ranking metrics and ``"min"`` for losses/errors. When ``lr_decay`` < 1 the
    learning rate is multiplied by it after an evaluation without improvement, and training
    stops after ``max_lr_decays`` such drops (PETER's schedule); otherwise it stops after
    ``patience`` evaluations without improvement. ``lr_schedule="cosine"`` anneals the learning
    rate over ``max_epochs`` instead (a function of the epoch, so a resumed run follows it exactly).

    Validation is noisy when it has few cases (the standard error of NDCG@10 on 1,000 users is
    several percent of its value), and patience then stops on noise. Two settings make the rule
    noise-aware: ``smooth`` > 1 counts patience on the mean of the last ``smooth`` validation values
    (the best weights are still those of the best single evaluation), and ``min_epochs`` never stops
    on patience (or on ``max_lr_decays``) before that epoch. Both are off by default, so runs made
    before they existed repeat exactly; the ``Recommender`` warns when validation is too small to
    decide with the chosen patience.

    With a ``state_dir`` the loop saves its full state (model, optimizer, best weights, early
    stopping counters) at every epoch end, and also mid-epoch every ``checkpoint_every`` batches
    and/or every ``checkpoint_seconds`` seconds, with the batch position and the torch RNG state,
    so a killed run resumes exactly where it was. ``compile`` wraps the training step in
    ``torch.compile`` on CUDA (ignored on CPU, where compilation costs more than it saves).
    """

    lr: float = 1e-3
    batch_size: int = 128
    max_epochs: int = 200
    patience: int = 5
    min_epochs: int = 0  # never stop on patience / lr decays before this epoch
    smooth: int = 1  # patience counts on the mean of the last N validation values (1 = the raw value)
    eval_every: int = 1
    optimizer: str = "adam"  # adam, adamw or sgd
    beta1: float = 0.9
    beta2: float = 0.98
    weight_decay: float = 0.0
    grad_clip: float = 0.0  # 0 disables clipping
    lr_decay: float = 1.0
    max_lr_decays: int = 0
    lr_schedule: str = (
        "constant"  # or "cosine": epoch e trains at lr * (1 + cos(pi (e - 1) / max_epochs)) / 2
    )
    monitor: str = "NDCG@10"
    mode: str = "max"
    seed: int = 0
    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    amp: str = "none"  # none, bf16 or fp16 autocast (fp16 only on CUDA)
    time_budget: float = 0.0  # seconds of training; 0 = no limit
    threads: int = 0  # CPU threads for torch; 0 = torch's default
    checkpoint_every: int = 0  # also save the training state every N batches (0 = only at epoch ends)
    checkpoint_seconds: float = 0.0  # ... and/or every T seconds (0 = off); rank 0 writes
    compile: bool = False  # torch.compile the training step (CUDA only)

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam", "adamw", "sgd"):
            raise ValueError(f"optimizer must be adam, adamw or sgd, not {self.optimizer!r}")
        if self.lr_schedule not in ("constant", "cosine"):
            raise ValueError(f"lr_schedule must be constant or cosine, not {self.lr_schedule!r}")
        if self.lr_schedule == "cosine" and self.lr_decay < 1.0:
            raise ValueError("lr_schedule='cosine' and lr_decay < 1 both set the learning rate; choose one")
        if self.mode not in ("max", "min"):
            raise ValueError("mode must be 'max' or 'min'")
        check_device(self.device)
        if self.amp not in ("none", "bf16", "fp16"):
            raise ValueError("amp must be none, bf16 or fp16")
        check_finite(self)
        if self.lr <= 0 or self.batch_size < 1 or self.max_epochs < 1 or self.eval_every < 1:
            raise ValueError("lr, batch_size, max_epochs and eval_every must be positive")
        if self.min_epochs < 0 or self.smooth < 1:
            raise ValueError("min_epochs must be >= 0 and smooth >= 1")
        if self.checkpoint_every < 0 or self.checkpoint_seconds < 0:
            raise ValueError("checkpoint_every and checkpoint_seconds must be >= 0")
