"""The new metrics in the results tables (as extra columns, only where runs report them) and in tracking."""

from __future__ import annotations

from typing import Any

from attnrec.data.schema import DataSource
from attnrec.evaluation.metrics import METRICS
from attnrec.evaluation.protocol import EvalResult, protocol_by_name
from attnrec.experiments._tracking_base import GuardedTracker, Status
from attnrec.experiments.tables import metric_columns, results_markdown
from attnrec.experiments.tracking import mlflow_name


def _record(name: str, metrics: dict[str, float], ptext: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": "sasrec",
        "data": {"name": "toy.csv", "sha256": "ab" * 32},
        "split": "temporal",
        "evaluations": {"p": {"metrics": metrics, "protocol_text": ptext}},
        "train": {"epochs": 3, "best_epoch": 2},
        "seconds_per_epoch": 1.0,
        "fit_seconds": 60.0,
        "peak_rss_mb": 100.0,
        "machine": {"cpu": "c", "cores": 2, "torch_threads": 1, "cuda": None, "torch": "t"},
        "git_sha": "0123456789ab",
        "finished": "now",
    }


def test_tables_add_a_column_per_metric_beyond_the_standard_ones() -> None:
    plain = {k: 0.5 for k in METRICS}
    assert metric_columns([plain]) == list(METRICS)  # the committed tables keep their columns
    more = plain | {"Recall@10": 0.25, "Coverage@10": 0.125}
    assert metric_columns([plain, more]) == [*METRICS, "Recall@10", "Coverage@10"]
    table = results_markdown([_record("w", more, "every item of the 7d after the cut time")], "cmd", "src")
    header = next(line for line in table.splitlines() if line.startswith("| run |"))
    assert header.startswith("| run | model | " + " | ".join(METRICS) + " | Recall@10 | Coverage@10 | epochs")
    row = next(line for line in table.splitlines() if line.startswith("| w |"))
    assert "| 0.5000 | 0.2500 | 0.1250 | 3 (best 2) |" in row


class _Recorder(GuardedTracker):
    """A tracker that keeps what it is asked to log."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.scalars: dict[str, float] = {}
        self.texts: dict[str, str] = {}

    @property
    def where(self) -> str:
        return "memory"

    def _log_run(self, info: Any) -> None: ...

    def _log_scalars(self, scalars: Any, step: int) -> None:
        self.scalars |= {mlflow_name(k): v for k, v in scalars.items()}

    def _log_texts(self, texts: Any) -> None:
        self.texts |= {mlflow_name(k): v for k, v in texts.items()}

    def _log_model(self, path: Any) -> None: ...

    def _close(self, status: Status) -> None: ...


def test_tracking_names_the_new_metrics_and_records_the_request_time() -> None:
    result = EvalResult(
        {"Recall@10": 0.25, "MAP@10": 0.125, "Coverage@10": 0.5, "Novelty@10": 7.0},
        protocol_by_name("time-window"),
        "temporal",
        "test",
        10,
        DataSource("toy"),
        1.0,
        extra={"cut_time": 86_400.0},
        request_time="window start",
    )
    tracker = _Recorder()
    tracker.log_test("time-window", result)
    assert tracker.scalars == {
        "test/time-window/Recall_at_10": 0.25,
        "test/time-window/MAP_at_10": 0.125,
        "test/time-window/Coverage_at_10": 0.5,
        "test/time-window/Novelty_at_10": 7.0,
    }
    text = tracker.texts["test/time-window/protocol"]
    assert "every item of the 7d after the cut time" in text
    assert "request time = window start 1970-01-02 00:00:00 UTC" in text
