"""Experiment tracking without a store: what a run records, the failure policy, the install hint.

The trackers against real MLflow and TensorBoard stores are tested through ``attnrec train`` in
tests/cli/test_track_cli.py.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from attnrec.data.schema import DataSource, Interactions
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL, EvalResult
from attnrec.experiments._tracking_base import GuardedTracker, Status
from attnrec.experiments.tracking import (
    MlflowTracker,
    RunInfo,
    TensorBoardTracker,
    Trackers,
    TrackingError,
    mlflow_name,
    open_trackers,
)
from attnrec.recommend import Recommender
from attnrec.training.result import TrainResult


class Recording(GuardedTracker):
    """A tracker that keeps what it is asked to log; ``fail_on`` names the step that raises."""

    kind = "fake"

    def __init__(self, fail_on: str = "") -> None:
        super().__init__()
        self.fail_on = fail_on
        self.calls: list[tuple[str, object]] = []

    @property
    def where(self) -> str:
        return "memory"

    def _call(self, name: str, payload: object) -> None:
        if name == self.fail_on:
            raise ConnectionError("store gone\nsecond line of a long server message")
        self.calls.append((name, payload))

    def _log_run(self, info: RunInfo) -> None:
        self._call("run", info.params)

    def _log_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self._call("scalars", (step, dict(scalars)))

    def _log_texts(self, texts: Mapping[str, str]) -> None:
        self._call("texts", dict(texts))

    def _log_model(self, path: Path) -> None:
        self._call("model", path)

    def _close(self, status: Status) -> None:
        self._call("close", status)


def test_run_info_flattens_every_setting(ring: Interactions) -> None:
    rec = Recommender("sasrec", {"hidden": 16}, {"lr": 0.01})
    split = leave_one_out(ring, valid_users=10)
    params = RunInfo.of(rec, ring, split).params
    assert params["model.hidden"] == 16 and params["train.lr"] == 0.01
    assert params["run.model"] == "sasrec" and params["run.split"] == split.describe()
    assert params["data.sha256"] == ring.source.sha256
    assert (params["data.users"], params["data.items"], params["data.interactions"]) == (
        ring.n_users,
        ring.n_items,
        len(ring),
    )
    # Every field of both configs is there, and nothing else under their prefixes.
    assert {k for k in params if k.startswith("model.")} == {f"model.{k}" for k in vars(rec.config)}
    assert {k for k in params if k.startswith("train.")} == {f"train.{k}" for k in vars(rec.train_config)}


def test_a_failing_tracker_warns_once_then_stays_off(caplog: pytest.LogCaptureFixture) -> None:
    t = Recording(fail_on="scalars")
    with caplog.at_level(logging.WARNING, logger="attnrec"):
        t.on_epoch({"epoch": 1, "train_seconds": 0.5, "loss": 0.7})
        t.on_epoch({"epoch": 2, "train_seconds": 0.5, "loss": 0.6})
        t.log_model(Path("m"))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "fake tracking failed while logging epoch 1 (store gone); training goes on" in warnings[0]
    assert "second line" not in warnings[0]  # one line, whatever the store says
    assert (
        t.calls == []
    )  # epoch 2 and the model were not tried: a dead server costs one timeout, not one per epoch
    t.close("FINISHED")
    assert t.calls == [("close", "FINISHED")]  # the run is still ended, in case the store is back


def test_summary_logs_the_epochs_no_callback_saw() -> None:
    t = Recording()
    t.on_epoch({"epoch": 2, "train_seconds": 1.0, "loss": 0.5, "valid": {"NDCG@10": 0.3}})
    history = [
        {"epoch": 1, "train_seconds": 2.0, "loss": 0.9},
        {"epoch": 2, "train_seconds": 1.0, "loss": 0.5, "valid": {"NDCG@10": 0.3}},
    ]
    t.log_summary(
        TrainResult(
            best_epoch=2,
            best_value=0.3,
            best_metrics={"NDCG@10": 0.3},
            epochs=2,
            seconds=3.0,
            stopped="max_epochs",
            history=history,
        )
    )  # type: ignore[arg-type]
    steps = [payload[0] for name, payload in t.calls if name == "scalars"]  # type: ignore[index]
    assert steps == [2, 1, 2]  # epoch 2 as it ended, epoch 1 (trained before a resume) once, then the summary
    assert ("scalars", (1, {"train/epoch_seconds": 2.0, "train/loss": 0.9})) in t.calls
    assert ("texts", {"summary/stopped": "max_epochs"}) in t.calls


def test_test_results_carry_their_protocol() -> None:
    t = Recording()
    res = EvalResult(
        {"NDCG@10": 0.25}, FULL, "leave-one-out", "test", 50, DataSource("d", sha256="ab" * 32), 0.1
    )
    t.log_test("full", res)
    assert t.calls == [
        ("scalars", (0, {"test/full/NDCG@10": 0.25})),
        ("texts", {"test/full/protocol": res.describe()}),
    ]


@pytest.mark.parametrize(
    "status, exc", [("FINISHED", None), ("FAILED", ValueError), ("KILLED", KeyboardInterrupt)]
)
def test_the_group_ends_every_run_with_the_outcome(status: str, exc: type[BaseException] | None) -> None:
    a, b = Recording(), Recording()
    try:
        with Trackers([a, b]):
            if exc is not None:
                raise exc("boom")
    except (ValueError, KeyboardInterrupt):
        pass
    assert a.calls == b.calls == [("close", status)]


def test_mlflow_names_have_no_at_sign() -> None:
    assert mlflow_name("test/sampled-uniform/NDCG@10") == "test/sampled-uniform/NDCG_at_10"
    assert mlflow_name("valid/MRR") == "valid/MRR"
    assert mlflow_name("a+b") == "a_b"


@pytest.mark.parametrize(
    "kind, modules", [("mlflow", ["mlflow"]), ("tensorboard", ["tensorboard", "torch.utils.tensorboard"])]
)
def test_a_missing_package_names_its_extra(
    kind: str, modules: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)  # import raises ImportError, as when not installed
    with pytest.raises(
        TrackingError, match=rf"--track {kind} needs the {kind} package: pip install 'attnrec\[{kind}\]'"
    ):
        if kind == "mlflow":
            MlflowTracker(f"sqlite:///{tmp_path}/m.db")
        else:
            TensorBoardTracker(tmp_path / "tb")
    assert list(tmp_path.iterdir()) == []


def test_open_trackers_checks_the_flags_before_opening_anything(tmp_path: Path) -> None:
    assert not open_trackers([], model="sasrec")
    with pytest.raises(TrackingError, match="--track-uri applies to a tracked run"):
        open_trackers([], [str(tmp_path)], model="sasrec")
    with pytest.raises(TrackingError, match="--run-name applies to a tracked run"):
        open_trackers([], model="sasrec", run_name="r")
    with pytest.raises(
        TrackingError, match="--experiment names an MLflow experiment: it needs --track mlflow"
    ):
        open_trackers(["tensorboard"], [str(tmp_path / "tb")], model="sasrec", experiment="e")
    with pytest.raises(TrackingError, match=r"--track-uri given 1 time\(s\) for 2 --track"):
        open_trackers(["mlflow", "tensorboard"], [str(tmp_path / "tb")], model="sasrec")
    with pytest.raises(TrackingError, match="--track wandb: unknown tracker"):
        open_trackers(["wandb"], model="sasrec")
    assert list(tmp_path.iterdir()) == []
