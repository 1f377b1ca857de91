"""Epoch callbacks see every epoch's finished record and can stop the run as patience would."""

from __future__ import annotations

import pytest

import attnrec
from attnrec.config import ConfigError
from attnrec.data.schema import Interactions
from attnrec.data.split import leave_one_out
from attnrec.training.callbacks import StopTraining
from attnrec.training.result import EpochRecord


class Recorder:
    def __init__(self, stop_after: int = 0) -> None:
        self.records: list[EpochRecord] = []
        self.stop_after = stop_after

    def on_epoch(self, record: EpochRecord) -> None:
        self.records.append(dict(record))  # type: ignore[arg-type]
        if self.stop_after and record["epoch"] >= self.stop_after:
            raise StopTraining("pruned")


def test_callbacks_see_each_epoch_and_stop_the_run(ring: Interactions) -> None:
    split = leave_one_out(ring)
    watch, stop = Recorder(), Recorder(stop_after=2)
    rec = attnrec.Recommender(
        "sasrec",
        {"hidden": 16, "max_len": 20, "loss": "ce"},
        {"max_epochs": 5, "batch_size": 32, "patience": 10},
    )
    rec.fit(ring, split, progress=False, callbacks=[watch, stop])
    result = rec.train_result_
    assert result is not None and result.stopped == "pruned" and result.epochs == 2
    # both callbacks saw the same finished records: loss, time and validation metrics included
    assert [r["epoch"] for r in watch.records] == [1, 2] == [r["epoch"] for r in stop.records]
    assert watch.records == [dict(h) for h in result.history]
    assert all("NDCG@10" in r["valid"] and r["loss"] > 0 for r in watch.records)


def test_other_exceptions_end_training(ring: Interactions) -> None:
    class Broken:
        def on_epoch(self, record: EpochRecord) -> None:
            raise RuntimeError("tracking server unreachable")

    rec = attnrec.Recommender("sasrec", {"hidden": 16, "max_len": 20}, {"max_epochs": 2, "batch_size": 32})
    with pytest.raises(RuntimeError, match="tracking server unreachable"):
        rec.fit(ring, leave_one_out(ring), progress=False, callbacks=[Broken()])


def test_closed_form_fits_report_their_one_epoch(ring: Interactions) -> None:
    watch = Recorder()
    attnrec.Recommender("pop").fit(ring, leave_one_out(ring), progress=False, callbacks=[watch])
    assert [r["epoch"] for r in watch.records] == [1] and "NDCG@10" in watch.records[0]["valid"]


@pytest.mark.parametrize(("callbacks", "message"), [([print], "has none"), (None, "not NoneType")])
def test_a_callback_without_on_epoch_is_refused_before_training(
    ring: Interactions, callbacks: object, message: str
) -> None:
    """A plain function as a callback trained a whole epoch, then ended in an ``AttributeError``."""
    rec = attnrec.Recommender("sasrec", {"hidden": 8, "max_len": 10}, {"max_epochs": 1, "batch_size": 32})
    with pytest.raises(ConfigError, match=message):
        rec.fit(ring, progress=False, callbacks=callbacks)  # type: ignore[arg-type]
    assert rec.train_result_ is None  # nothing trained
