"""What a training run did: :class:`TrainResult`, returned by the loop and kept in its resume state."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np


class EpochRecord(TypedDict):
    """One epoch of :attr:`TrainResult.history`; ``valid`` only for epochs that were validated."""

    epoch: int
    train_seconds: float
    loss: NotRequired[float]  # mean training loss over the epoch's batches (absent for a closed-form fit)
    valid: NotRequired[dict[str, float]]


@dataclass
class TrainResult:
    """What happened during training; ``history`` has one record per epoch."""

    best_epoch: int = 0
    best_value: float = float("nan")
    best_metrics: dict[str, float] = field(default_factory=dict)
    epochs: int = 0
    seconds: float = 0.0
    stopped: str = ""
    history: list[EpochRecord] = field(default_factory=list)

    @property
    def seconds_per_epoch(self) -> float:
        """Mean training time of an epoch (validation excluded); NaN before the first epoch."""
        times = [h["train_seconds"] for h in self.history]
        return float(np.mean(times)) if times else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """The fields and ``seconds_per_epoch``, as saved in ``config.json`` and the training state (JSON
        values)."""
        return asdict(self) | {"seconds_per_epoch": self.seconds_per_epoch}
