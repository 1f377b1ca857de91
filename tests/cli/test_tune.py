"""``attnrec tune`` end to end on a tiny file: its best.toml trains again unchanged; bad input is one error
line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import TINY_NETWORK, TINY_TRAINING, run

from synthetic_logs import write_cycle_pairs

TINY = [
    "--model",
    "sasrec",
    *TINY_NETWORK,
    "--set",
    "n_heads=1",
    *TINY_TRAINING,
    "--max-epochs",
    "1",
    "--quiet",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cycle_pairs(tmp_path_factory.mktemp("data") / "pairs.txt", 100, 30, 5, 16)


def test_tune_exports_a_config_that_train_accepts_and_reproduces(pairs: Path, tmp_path: Path) -> None:
    out = tmp_path / "tune"
    code, output = run("tune", "--data", str(pairs), *TINY, "--trials", "2", "--out", str(out))
    assert code == 0, output
    assert "study sasrec-pairs.txt: trials" in output and "protocol: test on pairs.txt" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trials"]["complete"] == 2 and summary["test"]["target"] == "test"
    assert (out / "tune.db").exists()  # the default storage, which a second run resumes from

    code, output = run(
        "train",
        "--data",
        str(pairs),
        "--config",
        str(out / "best.toml"),
        "--out",
        str(tmp_path / "m"),
        "--quiet",
        "--no-progress",
        "--no-baseline",
    )
    assert code == 0, output
    # the same settings and seed: the retrained model reaches the best trial's validation value
    found = re.search(r"validation NDCG@10 ([0-9.]+)", output)
    assert found is not None and float(found.group(1)) == pytest.approx(
        summary["best"]["valid_value"], abs=1e-4
    )

    code, output = run("tune", "--data", str(pairs), *TINY, "--trials", "2", "--out", str(out))
    assert code == 0 and "2 trial(s): 2 complete" in output  # resumed: nothing left to run


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "nope"], "unknown model 'nope'"),
        (["--space", "SPACE"], r"space.toml: unknown \[model\] key 'dropuot'"),
        (
            ["--storage", "sqlite:////no/such/dir/t.db"],
            "--storage sqlite:////no/such/dir/t.db: cannot open it",
        ),
        (["--metric", "NDCG@7"], "unknown metric 'NDCG@7'"),
        (["--set", "model.hidden=x"], "hidden: 'x' is not a valid int"),
    ],
)
def test_bad_input_is_one_error_line(pairs: Path, tmp_path: Path, extra: list[str], message: str) -> None:
    space = tmp_path / "space.toml"
    space.write_text("[model]\ndropuot = {low = 0.0, high = 0.5}\n")
    args = [str(space) if a == "SPACE" else a for a in extra]
    code, output = run("tune", "--data", str(pairs), *TINY, *args, "--out", str(tmp_path / "o"))
    assert code == 2, output
    assert re.search(message, output), output
    assert not (tmp_path / "o" / "trials").exists()  # nothing was trained


def test_tune_has_useful_help() -> None:
    code, output = run("tune", "--help")
    assert code == 0 and "Usage" in output and "Example" in output
    for option in (
        "--data",
        "--space",
        "--trials",
        "--time-budget",
        "--trial-budget",
        "--jobs",
        "--storage",
        "--metric",
    ):
        assert option in output


def test_without_optuna_the_cli_loads_and_tune_says_what_to_install(pairs: Path) -> None:
    probe = (
        "import sys; sys.modules['optuna'] = None; from attnrec.cli.main import main; "
        "sys.argv = ['attnrec', *sys.argv[1:]]; main()"
    )
    help_run = subprocess.run(
        [sys.executable, "-c", probe, "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert help_run.returncode == 0 and "tune" in help_run.stdout
    tune_run = subprocess.run(
        [sys.executable, "-c", probe, "tune", "--data", str(pairs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert tune_run.returncode == 2 and "Traceback" not in tune_run.stderr
    assert (
        "attnrec tune needs Optuna (optuna is not installed): pip install 'attnrec[tune]'" in tune_run.stderr
    )


def test_a_tiny_trial_budget_stops_each_trial_inside_its_first_epoch(pairs: Path, tmp_path: Path) -> None:
    optuna = pytest.importorskip("optuna")
    out = tmp_path / "tune"
    args = [*TINY[: TINY.index("--max-epochs")], "--set", "batch_size=8", "--max-epochs", "50", "--quiet"]
    code, output = run(
        "tune", "--data", str(pairs), *args, "--trials", "2", "--trial-budget", "0.001", "--out", str(out)
    )
    assert code == 0, output
    study = optuna.load_study(study_name="sasrec-pairs.txt", storage=f"sqlite:///{out / 'tune.db'}")
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 2
    for t in trials:
        assert t.value is not None  # validated: the trial kept weights to score
        assert t.user_attrs["epochs"] == 1 and "time budget" in t.user_attrs["stopped"]


def test_optuna_lines_go_through_attnrecs_logger() -> None:
    pytest.importorskip("optuna")
    import logging

    from attnrec.experiments.tuning import _optuna_logging

    class Lines(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    _optuna_logging(True)
    _optuna_logging(True)  # added once however often asked
    source = logging.getLogger("optuna")
    assert [type(h).__name__ for h in source.handlers].count("_ToAttnrec") == 1
    assert not [h for h in source.handlers if type(h) is logging.StreamHandler]  # Optuna's own is gone
    attnrec, lines = logging.getLogger("attnrec"), Lines()
    attnrec.addHandler(lines)
    try:
        attnrec.setLevel(logging.INFO)
        logging.getLogger("optuna.study").info("Trial 0 finished")
        attnrec.setLevel(logging.WARNING)  # attnrec is quiet: so is Optuna
        logging.getLogger("optuna.study").info("Trial 1 finished")
    finally:
        attnrec.removeHandler(lines)
    assert lines.lines == ["Trial 0 finished"]


def test_tune_shows_its_trials_on_a_terminal(
    pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from attnrec.cli import _common

    screen = io.StringIO()
    monkeypatch.setattr(_common, "err", Console(file=screen, force_terminal=True, width=100))
    loud = [a for a in TINY if a != "--quiet"]
    code, output = run("tune", "--data", str(pairs), *loud, "--trials", "2", "--out", str(tmp_path / "t"))
    assert code == 0, output
    assert "tuning sasrec: trials" in screen.getvalue() and "2/2" in screen.getvalue()
