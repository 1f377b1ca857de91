"""The shared half of the experiment trackers (:mod:`attnrec.experiments.tracking`): what a run trains
(:class:`RunInfo`) and the guarded logging every tracker goes through (:class:`GuardedTracker`).
"""

from __future__ import annotations

import importlib
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from attnrec import __version__
from attnrec.config import ConfigError, config_to_dict
from attnrec.data.schema import Interactions
from attnrec.data.split import Split
from attnrec.evaluation.protocol import EvalResult
from attnrec.recommend import Recommender
from attnrec.training.result import EpochRecord, TrainResult

log = logging.getLogger("attnrec.experiments.tracking")

STATE_DIR_NAME = "train_state"  # the resumable training state inside a model directory: not an artifact
Status = Literal["FINISHED", "FAILED", "KILLED"]


class TrackingError(ConfigError):
    """A tracker cannot start: its package is missing or its store cannot be opened."""


def require(module: str, extra: str, kind: str) -> ModuleType:
    """Import ``module`` (lazily: MLflow takes seconds to import) or say which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrackingError(
            f"--track {kind} needs the {kind} package: pip install 'attnrec[{extra}]'"
        ) from None


def default_run_name(model: str) -> str:
    """``<model>-<local date>-<time>``: the run name when none is given (the same for every tracker of a
    run)."""
    return f"{model}-{time.strftime('%Y%m%d-%H%M%S')}"


def first_line(e: BaseException) -> str:
    """An exception as one line (MLflow's messages can run over many)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


# -- what a run trains -----------------------------------------------------------------------------
@dataclass(frozen=True)
class RunInfo:
    """What every tracker records of a run: its flat settings (``params``) and what it is searched by
    (``tags``)."""

    params: Mapping[str, Any]
    tags: Mapping[str, str]

    @classmethod
    def of(cls, rec: Recommender, data: Interactions, split: Split) -> RunInfo:
        """The run that fits ``rec`` on ``data`` split by ``split``. Params: the run, the data, then
        ``model.<key>`` and ``train.<key>`` (nested tables joined by dots); tags: model, preset, data
        name and sha256, split, attnrec version."""
        source, described = data.source, split.describe()
        params: dict[str, Any] = {
            "run.model": rec.name,
            "run.preset": rec.preset,
            "run.split": described,
            "data.name": source.name,
            "data.format": source.format,
            "data.sha256": source.sha256,
            "data.users": data.n_users,
            "data.items": data.n_items,
            "data.interactions": len(data),
        }
        params |= _flatten("model", config_to_dict(rec.config))
        params |= _flatten("train", config_to_dict(rec.train_config))
        tags = {
            "attnrec.version": __version__,
            "model": rec.name,
            "preset": str(rec.preset),
            "data": source.name,
            "data.sha256": source.sha256,
            "split": described,
        }
        return cls(params, tags)


def _flatten(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}.{key}"
        out |= _flatten(name, value) if isinstance(value, Mapping) else {name: value}
    return out


class GuardedTracker(ABC):
    """The shared half of the trackers: every logging call guarded (warn once, then off), epochs
    remembered."""

    kind = ""

    def __init__(self) -> None:
        self.broken = False
        self.logged_epochs: set[int] = set()

    def _safely(self, what: str, *calls: Callable[[], None]) -> None:
        if self.broken:
            return
        try:
            for call in calls:
                call()
        except Exception as e:  # a tracking failure must not end the training it records
            self.broken = True
            log.warning(
                "%s tracking failed while %s (%s); training goes on, the rest of this run is not tracked",
                self.kind,
                what,
                first_line(e),
            )

    def log_run(self, info: RunInfo) -> None:
        self._safely("logging the settings", lambda: self._log_run(info))

    def on_epoch(self, record: EpochRecord) -> None:
        self.logged_epochs.add(record["epoch"])
        scalars = {"train/epoch_seconds": record["train_seconds"]}
        if "loss" in record:
            scalars["train/loss"] = record["loss"]
        scalars |= {f"valid/{k}": v for k, v in record.get("valid", {}).items()}
        self._safely(f"logging epoch {record['epoch']}", lambda: self._log_scalars(scalars, record["epoch"]))

    def log_test(self, protocol: str, result: EvalResult, prefix: str = "test") -> None:
        scalars = {f"{prefix}/{protocol}/{k}": v for k, v in result.metrics.items()}
        texts = {f"{prefix}/{protocol}/protocol": result.describe()}
        self._safely(
            f"logging the {protocol} {prefix} results",
            lambda: self._log_scalars(scalars, 0),
            lambda: self._log_texts(texts),
        )

    def log_summary(self, result: TrainResult) -> None:
        for record in result.history:  # epochs trained before a resume reached no callback of this run
            if record["epoch"] not in self.logged_epochs:
                self.on_epoch(record)
        scalars = {
            "summary/best_epoch": float(result.best_epoch),
            "summary/epochs": float(result.epochs),
            "summary/train_seconds": result.seconds,
            "summary/seconds_per_epoch": result.seconds_per_epoch,
        }
        scalars |= {f"summary/best_valid/{k}": v for k, v in result.best_metrics.items()}
        scalars = {k: v for k, v in scalars.items() if not math.isnan(v)}  # NaN: nothing was measured
        texts = {"summary/stopped": result.stopped}
        self._safely(
            "logging the training summary",
            lambda: self._log_scalars(scalars, result.epochs),
            lambda: self._log_texts(texts),
        )

    def log_model(self, path: Path) -> None:
        self._safely("logging the model", lambda: self._log_model(path))

    def close(self, status: Status = "FINISHED") -> None:
        # Tried even after a failure: the store may be back, and the run should not stay RUNNING.
        self.broken = False
        self._safely("closing the run", lambda: self._close(status))

    @abstractmethod
    def _log_run(self, info: RunInfo) -> None: ...

    @abstractmethod
    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None: ...

    @abstractmethod
    def _log_texts(self, texts: Mapping[str, str]) -> None: ...

    @abstractmethod
    def _log_model(self, path: Path) -> None: ...

    @abstractmethod
    def _close(self, status: Status) -> None: ...


def model_files(path: Path) -> Iterator[Path]:
    """The entries of a model directory worth keeping: all but the resumable training state."""
    return (p for p in sorted(path.iterdir()) if p.name != STATE_DIR_NAME)


__all__ = [
    "GuardedTracker",
    "RunInfo",
    "Status",
    "TrackingError",
    "default_run_name",
    "first_line",
    "model_files",
    "require",
]
