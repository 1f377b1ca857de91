"""``attnrec train --signal NAME:KIND``: a per-event column declared on the command line, read by the model,
kept in the saved model and declared again by the processes that load it (no Python of the user's)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import run

from attnrec.data.signals import find_signal, unregister_signal
from attnrec.store import open_store
from synthetic_logs import device_frame

TINY = ["--set", "hidden=8", "--set", "max_len=8", "--set", "n_layers=1", "--set", "loss=ce"]
TINY += ["--max-epochs", "1", "--no-progress", "--quiet", "--no-baseline"]


@pytest.fixture(autouse=True)
def undeclared() -> Iterator[None]:
    """Each test starts and ends without the signals it declares."""
    yield
    for name in ("device", "price"):
        if find_signal(name) is not None:
            unregister_signal(name)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    frame = device_frame("client")
    path = tmp_path / "log.csv"
    frame.assign(price=[float(i % 4) for i in range(len(frame))]).to_csv(path, index=False)
    return path


def test_train_declares_the_signals_and_a_loading_process_declares_them_again(
    log: Path, tmp_path: Path
) -> None:
    out = tmp_path / "model"
    signals = ["--signal", "device:categorical", "--signal", "price:numeric", "--columns", "device=client"]
    code, output = run("train", "--data", str(log), "--out", str(out), *signals, *TINY)
    assert code == 0, output
    assert json.loads((out / "config.json").read_text())["model_config"]["signals"] == "device,price"
    saved = json.loads((out / "signals.json").read_text())
    assert saved["device"]["kind"] == "categorical" and saved["device"]["values"] == ["phone", "tv"]
    assert saved["price"]["kind"] == "numeric" and "values" not in saved["price"]
    unregister_signal("device")
    unregister_signal("price")
    code, output = run("recommend", "--model", str(out), "--user", "u3", "-k", "3")
    assert code == 0, output  # loading declared them from the model directory
    code, output = run("recommend", "--model", str(out), "--history", "i1,i2", "-k", "3")
    assert code == 0, output  # a history without the signals: scored with them not known
    unregister_signal("device")
    unregister_signal("price")
    code, output = run("evaluate", "--model", str(out), "--data", str(log), "--columns", "device=client")
    assert code == 0, output  # the model loads (and declares) before the data is read: its columns are read
    assert find_signal("device") is not None and find_signal("price") is not None
    unregister_signal("device")
    unregister_signal("price")
    store = tmp_path / "events.db"
    code, output = run(
        "ingest", str(log), "--store", str(store), "--model", str(out), "--columns", "device=client"
    )
    assert code == 0, output  # the model declares its signals before the file is read: they are stored
    recent = open_store(str(store)).recent(["u3"], 2)["u3"]
    assert recent.signals == {"device": ["tv", "tv"], "price": [2.0, 3.0]}


@pytest.mark.parametrize(
    ("option", "model", "message"),
    [
        ("device:colour", "sasrec", "'device:colour' is not NAME:categorical or NAME:numeric"),
        ("device", "sasrec", "'device' is not NAME:categorical or NAME:numeric"),
        ("events:categorical", "sasrec", "'events' is built in"),
        ("device:categorical", "pop", "pop reads no per-event signals"),
    ],
)
def test_a_bad_signal_option_is_one_line(
    log: Path, tmp_path: Path, option: str, model: str, message: str
) -> None:
    code, output = run(
        "train", "--data", str(log), "--model", model, "--signal", option, "--out", str(tmp_path)
    )
    assert code == 2 and f"--signal: {message}" in output, output
    assert len(output.strip().splitlines()) == 1


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_tune_declares_the_signals_in_every_worker(log: Path, tmp_path: Path, jobs: str) -> None:
    out = tmp_path / "tune"
    signals = ["--signal", "device:categorical", "--columns", "device=client"]
    tiny = [*TINY[:8], "--max-epochs", "1", "--quiet", "--trials", "2", "--jobs", jobs, "--set", "threads=1"]
    code, output = run("tune", "--data", str(log), "--out", str(out), *signals, *tiny)
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"]["complete"] == 2, summary  # spawned workers declared it too (none failed)
    assert 'signals = "device"' in (out / "best.toml").read_text()
    (best,) = (out / "trials").iterdir()
    assert json.loads((best / "signals.json").read_text())["device"]["values"] == ["phone", "tv"]


def test_ingest_declares_the_signals_without_a_model(log: Path, tmp_path: Path) -> None:
    store = tmp_path / "events.db"
    signals = ["--signal", "device:categorical", "--signal", "price:numeric", "--columns", "device=client"]
    code, output = run("ingest", str(log), "--store", str(store), *signals)
    assert code == 0, output
    recent = open_store(str(store)).recent(["u3"], 2)["u3"]
    assert recent.signals == {"device": ["tv", "tv"], "price": [2.0, 3.0]}
    code, output = run("ingest", str(log), "--store", str(store), "--signal", "device:numeric")
    assert code == 2 and "--signal: 'device' is already declared as categorical, not numeric" in output


def test_tune_refuses_a_signal_for_a_model_without_them(log: Path, tmp_path: Path) -> None:
    code, output = run("tune", "--data", str(log), "--model", "pop", "--signal", "device:categorical")
    assert code == 2 and "--signal: pop reads no per-event signals" in output, output
    assert len(output.strip().splitlines()) == 1


def test_ingest_reads_a_signal_from_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    device_frame("client").to_json(path, orient="records", lines=True)
    store = tmp_path / "events.db"
    code, output = run(
        "ingest",
        str(path),
        "--store",
        str(store),
        "--signal",
        "device:categorical",
        "--columns",
        "device=client",
    )
    assert code == 0, output
    assert open_store(str(store)).recent(["u3"], 2)["u3"].signals == {"device": ["tv", "tv"]}
