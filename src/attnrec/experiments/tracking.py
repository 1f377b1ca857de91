"""Experiment tracking: a training run's settings, epochs, test results and model in MLflow or TensorBoard.

A :class:`Tracker` is one tracked run. It is an :class:`~attnrec.training.callbacks.EpochCallback`
(pass it to ``Recommender.fit(callbacks=[...])``) and is told, around the fit, what the run trains
(:meth:`~Tracker.log_run`), how it tested (:meth:`~Tracker.log_test`), how training ended
(:meth:`~Tracker.log_summary`) and where the model was saved (:meth:`~Tracker.log_model`).
:func:`open_trackers` opens the ``attnrec train --track`` ones as one :class:`Trackers` group.

What a tracker may cost a run is decided here, once:

* **fail fast at the start**: a missing package (with its install hint) or a store that cannot be
  opened (bad URI, unwritable directory, unreachable server) is a :class:`TrackingError` raised by
  the tracker's constructor, before any data is read or any epoch trained;
* **warn and go on during the run**: once a run is open, a logging call that fails logs one warning
  and switches that tracker off for the rest of the run (a server that went away would otherwise
  cost its timeout at every epoch); training, testing and saving the model go on untouched.

Names: metrics are ``train/loss``, ``train/epoch_seconds`` and ``valid/<metric>`` per epoch (step =
epoch), ``test/<protocol>/<metric>`` once at the end, for every metric the evaluation reported (the
time-window protocol's ``Recall@10``, ``MAP@10``, the list-level ``Coverage@10``, ``Novelty@10``, ...),
with ``test/<protocol>/protocol`` the protocol text (its request time too). MLflow allows no ``@`` in a
name, so there ``NDCG@10`` is written ``NDCG_at_10`` (TensorBoard keeps ``@``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, runtime_checkable

from attnrec.evaluation.protocol import EvalResult
from attnrec.experiments._tracking_base import (
    GuardedTracker,
    RunInfo,
    Status,
    TrackingError,
    default_run_name,
    first_line,
    model_files,
    require,
)
from attnrec.training.result import EpochRecord, TrainResult

KINDS = ("mlflow", "tensorboard")
DEFAULT_EXPERIMENT = "attnrec"
DEFAULT_MLFLOW_URI = (
    "sqlite:///mlruns.db"  # in the working directory, unless --track-uri or MLFLOW_TRACKING_URI
)
TENSORBOARD_ROOT = Path("runs") / "tensorboard"


# -- the tracker contract --------------------------------------------------------------------------
@runtime_checkable
class Tracker(Protocol):
    """One tracked run; also an epoch callback of the training loop. Opened by its constructor."""

    @property
    def where(self) -> str:
        """Where to find the run (printed after training)."""
        ...

    def log_run(self, info: RunInfo) -> None:
        """Record the settings, the data and the split (before training)."""
        ...

    def on_epoch(self, record: EpochRecord) -> None:
        """Record an epoch: training loss and seconds, validation metrics (step = epoch)."""
        ...

    def log_test(self, protocol: str, result: EvalResult, prefix: str = "test") -> None:
        """Record final metrics as ``<prefix>/<protocol>/<metric>`` and the protocol's description."""
        ...

    def log_summary(self, result: TrainResult) -> None:
        """Record how training ended (best epoch, stop reason) and any epochs not seen (a resumed run's)."""
        ...

    def log_model(self, path: Path) -> None:
        """Record the saved model directory."""
        ...

    def close(self, status: Status = "FINISHED") -> None:
        """End the run with ``status``."""
        ...


# -- MLflow ----------------------------------------------------------------------------------------
class MlflowTracker(GuardedTracker):
    """A run in an MLflow tracking store, written through an ``MlflowClient`` (no global ``mlflow`` state
    touched).

    ``uri`` is any MLflow tracking URI; ``None`` means ``$MLFLOW_TRACKING_URI``, else
    :data:`DEFAULT_MLFLOW_URI`. A new experiment in a SQLite store keeps its artifacts in
    ``mlartifacts/`` beside the database file (MLflow's default is the working directory's ``mlruns/``).
    """

    kind = "mlflow"

    def __init__(self, uri: str | None, experiment: str = DEFAULT_EXPERIMENT, run_name: str = "") -> None:
        super().__init__()
        mlflow = require("mlflow", "mlflow", self.kind)
        self.entities = require("mlflow.entities", "mlflow", self.kind)
        self.uri, self.experiment = (
            uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_MLFLOW_URI,
            experiment,
        )
        try:
            self.client = mlflow.MlflowClient(tracking_uri=self.uri)
            found = self.client.get_experiment_by_name(experiment)
            exp_id = (
                found.experiment_id
                if found is not None
                else self.client.create_experiment(experiment, artifact_location=_sqlite_artifacts(self.uri))
            )
            self.run_id: str = self.client.create_run(exp_id, run_name=run_name or None).info.run_id
        except Exception as e:  # MLflow raises its own, SQLAlchemy's and requests' exceptions
            raise TrackingError(
                f"--track mlflow: cannot open the tracking store {self.uri}: {first_line(e)}"
            ) from None

    @property
    def where(self) -> str:
        return f"MLflow run {self.run_id} (experiment {self.experiment!r}) in {self.uri}"

    def _log_run(self, info: RunInfo) -> None:
        params = [self.entities.Param(k, str(v)) for k, v in info.params.items()]
        tags = [self.entities.RunTag(k, v) for k, v in info.tags.items()]
        for i in range(
            0, max(len(params), len(tags)), 100
        ):  # MLflow takes at most 100 params and tags per batch
            self.client.log_batch(self.run_id, params=params[i : i + 100], tags=tags[i : i + 100])

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self.entities.Metric(mlflow_name(k), float(v), now, step) for k, v in scalars.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def _log_texts(self, texts: Mapping[str, str]) -> None:
        tags = [self.entities.RunTag(mlflow_name(k), v) for k, v in texts.items()]
        self.client.log_batch(self.run_id, tags=tags)

    def _log_model(self, path: Path) -> None:
        for entry in model_files(path):
            if entry.is_dir():
                self.client.log_artifacts(self.run_id, str(entry), f"model/{entry.name}")
            else:
                self.client.log_artifact(self.run_id, str(entry), "model")
        self.client.set_tag(self.run_id, "model_dir", str(path.resolve()))

    def _close(self, status: Status) -> None:
        self.client.set_terminated(self.run_id, status)


def mlflow_name(name: str) -> str:
    """``test/full/NDCG@10`` -> ``test/full/NDCG_at_10``: MLflow names allow letters, digits, ``_-. /:``
    only."""
    return re.sub(r"[^\w\-. /:]", "_", name.replace("@", "_at_"))


def _sqlite_artifacts(uri: str) -> str | None:
    """``<directory of the database>/mlartifacts`` for a ``sqlite:///`` store, else ``None`` (the store's
    default)."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlartifacts").as_uri()


# -- TensorBoard -----------------------------------------------------------------------------------
class TensorBoardTracker(GuardedTracker):
    """A run as TensorBoard event files in ``log_dir``: scalars, the settings as text and as hparams.

    The hparams (settings against the final test metrics) are written when the run closes, as the
    metrics they are compared on are known only then; the settings are also written as a text
    table at the start, so a run that fails keeps them.
    """

    kind = "tensorboard"

    def __init__(self, log_dir: Path, run_name: str = "") -> None:
        super().__init__()
        require("tensorboard", "tensorboard", self.kind)  # torch.utils.tensorboard needs it
        tb = require("torch.utils.tensorboard", "tensorboard", self.kind)
        self.summary = require("torch.utils.tensorboard.summary", "tensorboard", self.kind)
        self.log_dir, self.run_name = log_dir, run_name or log_dir.name
        try:
            self.writer = tb.SummaryWriter(log_dir=str(log_dir))
        except Exception as e:
            raise TrackingError(f"--track tensorboard: cannot write to {log_dir}: {first_line(e)}") from None
        self.hparams: dict[str, bool | int | float | str] = {}
        self.final: dict[str, float] = {}

    @property
    def where(self) -> str:
        return f"TensorBoard run {self.run_name!r} in {self.log_dir}"

    def _log_run(self, info: RunInfo) -> None:
        params = info.params
        self.hparams = {
            k: v if isinstance(v, bool | int | float | str) else str(v) for k, v in params.items()
        }
        rows = [f"| {k} | {v} |" for k, v in {**info.tags, **params}.items()]
        self.writer.add_text("settings", "\n".join(["| setting | value |", "|---|---|", *rows]))
        self.writer.flush()

    def log_test(self, protocol: str, result: EvalResult, prefix: str = "test") -> None:
        super().log_test(protocol, result, prefix)
        self.final |= {f"{prefix}/{protocol}/{k}": v for k, v in result.metrics.items()}

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # an epoch is visible in TensorBoard as soon as it ends

    def _log_texts(self, texts: Mapping[str, str]) -> None:
        for tag, text in texts.items():
            self.writer.add_text(tag, text)

    def _log_model(self, path: Path) -> None:
        self.writer.add_text("model_dir", str(path.resolve()))

    def _close(self, status: Status) -> None:
        if self.hparams:
            # The hparams dashboard looks the metrics up among the run's scalars, logged under these tags.
            file_writer = self.writer._get_file_writer()
            for summary in self.summary.hparams(self.hparams, self.final):
                file_writer.add_summary(summary)
        self.writer.add_text("status", status)
        self.writer.close()


# -- the group the CLI uses ------------------------------------------------------------------------
class Trackers:
    """Several trackers as one (each guards itself); a context manager that closes them with the run's
    status."""

    def __init__(self, trackers: Sequence[Tracker] = ()) -> None:
        self.trackers = list(trackers)

    def __bool__(self) -> bool:
        return bool(self.trackers)

    @property
    def where(self) -> str:
        return "; ".join(t.where for t in self.trackers)

    def _each(self, call: Callable[[Tracker], None]) -> None:
        for t in self.trackers:
            call(t)

    def log_run(self, info: RunInfo) -> None:
        self._each(lambda t: t.log_run(info))

    def on_epoch(self, record: EpochRecord) -> None:
        self._each(lambda t: t.on_epoch(record))

    def log_test(self, protocol: str, result: EvalResult, prefix: str = "test") -> None:
        self._each(lambda t: t.log_test(protocol, result, prefix))

    def log_summary(self, result: TrainResult) -> None:
        self._each(lambda t: t.log_summary(result))

    def log_model(self, path: Path) -> None:
        self._each(lambda t: t.log_model(path))

    def close(self, status: Status = "FINISHED") -> None:
        self._each(lambda t: t.close(status))

    def __enter__(self) -> Trackers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        status: Status = (
            "FINISHED" if kind is None else "KILLED" if issubclass(kind, KeyboardInterrupt) else "FAILED"
        )
        self.close(status)


def open_trackers(
    kinds: Sequence[str],
    uris: Sequence[str] = (),
    *,
    model: str,
    experiment: str | None = None,
    run_name: str | None = None,
) -> Trackers:
    """Open one run per kind in ``kinds`` (``mlflow``, ``tensorboard``), ``uris[i]`` the store of
    ``kinds[i]``.

    With one kind a single URI is its store; with several, give one URI per kind in the same order or
    none (each kind's default). Any tracker that cannot start raises :class:`TrackingError`, after
    closing those already opened as FAILED.
    """
    kinds = list(dict.fromkeys(kinds))
    if not kinds:
        given = [
            flag
            for flag, v in (("--track-uri", uris), ("--experiment", experiment), ("--run-name", run_name))
            if v
        ]
        if given:
            raise TrackingError(
                f"{given[0]} applies to a tracked run: add --track mlflow or --track tensorboard"
            )
        return Trackers()
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise TrackingError(f"--track {unknown[0]}: unknown tracker; use {' or '.join(KINDS)}")
    if uris and len(uris) != len(kinds):
        raise TrackingError(
            f"--track-uri given {len(uris)} time(s) for {len(kinds)} --track: give one per --track, "
            "in the same order, or none"
        )
    if experiment is not None and "mlflow" not in kinds:
        raise TrackingError("--experiment names an MLflow experiment: it needs --track mlflow")
    name = run_name or default_run_name(model)
    opened = Trackers()
    try:
        stores: list[str | None] = [*uris] or [None] * len(kinds)
        for kind, uri in zip(kinds, stores, strict=True):
            if kind == "mlflow":
                opened.trackers.append(MlflowTracker(uri, experiment or DEFAULT_EXPERIMENT, name))
            else:
                opened.trackers.append(
                    TensorBoardTracker(Path(uri) if uri else TENSORBOARD_ROOT / name, name)
                )
    except BaseException:
        opened.close("FAILED")
        raise
    return opened


__all__ = [
    "DEFAULT_EXPERIMENT",
    "DEFAULT_MLFLOW_URI",
    "KINDS",
    "TENSORBOARD_ROOT",
    "MlflowTracker",
    "RunInfo",
    "TensorBoardTracker",
    "Tracker",
    "Trackers",
    "TrackingError",
    "mlflow_name",
    "open_trackers",
]
