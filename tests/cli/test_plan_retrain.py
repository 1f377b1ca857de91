"""``attnrec plan-retrain``: the plan as a table or JSON, the retrain options it chose, bad flags in one
line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_runner import fails, run, runner

from attnrec.cli.main import app
from attnrec.data.split import FINAL
from attnrec.experiments.retrain_plan import FineTune
from attnrec.recommend import Recommender
from synthetic_logs import daily_cycle_frame

DAY = 86400


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    settings = {"hidden": 8, "n_layers": 1, "n_heads": 1, "max_len": 10}
    train = {"max_epochs": 2, "batch_size": 64, "seed": 1, "threads": 1}
    rec = Recommender("sasrec", settings, train, auto=False).fit(daily_cycle_frame(), FINAL, progress=False)
    return rec.save(tmp_path_factory.mktemp("runs") / "m")


def test_the_command_prints_the_plan_and_its_retrain_options(tmp_path: Path, model: Path) -> None:
    data = tmp_path / "log.csv"
    daily_cycle_frame().to_csv(data, index=False)
    args = ["plan-retrain", "--model", str(model), "--data", str(data), "--periods", "3", "--epochs", "1"]
    result = runner.invoke(app, [*args, "--every", "2d", "--rows", "initial", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout)  # the plan alone on stdout; its progress lines went to stderr
    assert record["every"] == 2 * DAY and len(record["candidates"]) == 2
    assert record["flags"] == FineTune(**record["chosen"]).flags()
    code, output = run(*args, "--every", "48h", "--rows", "initial")
    # which one wins depends on CPU times here (every candidate costs next to nothing): one of the two
    assert code == 0 and re.search(
        r"chosen: attnrec retrain \.\.\. (--new-only )?--max-epochs 1 --new", output
    )
    assert "fine-tunes replayed" in output
    assert "is not a length of time" in fails(*args, "--every", "two days")
    assert "at least one second" in fails(*args, "--every", "0.1s")
    assert "comma-separated whole numbers" in fails(*args[:-1], "one", "--every", "1d")
    assert "leave no events before them" in fails(*args, "--every", "30d")


@pytest.mark.parametrize("fine_tune", [FineTune("new", 2, "histories"), FineTune("all", 1, "initial")])
def test_the_printed_options_run_attnrec_retrain(tmp_path: Path, model: Path, fine_tune: FineTune) -> None:
    """Whatever the plan chooses, its options are ones ``attnrec retrain`` takes, and they mean what the
    plan measured (new events only or every event, that many epochs)."""
    from attnrec.store import Event, SqliteStore

    base = tmp_path / "log.csv"
    daily_cycle_frame().to_csv(base, index=False)
    store = SqliteStore(tmp_path / "events.db")
    store.append([Event("u1", "i3", 1_702_000_000), Event("u1", "i4", 1_702_000_100)])
    store.close()
    out = tmp_path / "new"
    db = tmp_path / "events.db"
    args = ["--model", str(model), "--store", str(db), "--data", str(base), "--out", str(out)]
    code, output = run("retrain", *args, *fine_tune.flags().split())
    assert code == 0, output
    trained = Recommender.load(out)
    assert trained.train_result_ is not None and trained.train_result_.epochs == fine_tune.epochs
