"""``--json`` means one thing in every command (the result as JSON on stdout, nothing else there),
``--json-out PATH`` writes a file, and the progress display shows only on a terminal, never with
--quiet or --json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from attnrec.cli import _common, _output
from attnrec.cli.main import app, load_all
from synthetic_logs import write_cycle_pairs

runner = CliRunner()
TINY = ["--set", "hidden=8", "--set", "max_len=12", "--set", "n_layers=1", "--set", "max_epochs=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("json")
    pairs = write_cycle_pairs(root / "pairs.txt", 60, 20, 5, 12)
    args = ["train", "--data", str(pairs), "--out", str(root / "m"), *TINY, "--quiet", "--no-baseline"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return root / "m", pairs


def test_every_json_option_is_the_same_stdout_flag() -> None:
    from typer.main import get_command

    load_all()
    group = get_command(app)
    found = {}
    for name in group.list_commands(None):  # type: ignore[attr-defined,arg-type]
        command = group.get_command(None, name)  # type: ignore[attr-defined,arg-type]
        for param in command.params:
            if "--json" in param.opts:
                found[name] = (param.is_flag, param.help)  # type: ignore[attr-defined]
    assert {"data", "evaluate", "recommend", "explain", "explain-evaluate", "explain-rec"} <= set(found)
    assert set(found.values()) == {(True, _output.JsonOpt.__metadata__[0].help)}


def test_evaluate_json_prints_what_json_out_writes(trained: tuple[Path, Path], tmp_path: Path) -> None:
    model, pairs = trained
    written = tmp_path / "out" / "ev.json"
    args = ["evaluate", "--model", str(model), "--data", str(pairs), "--json", "--json-out", str(written)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)  # stdout holds the JSON and nothing else
    assert printed == json.loads(written.read_text())
    assert printed["model"] == "sasrec" and printed["results"][0]["metrics"]["NDCG@10"] >= 0
    # full ranking uses neither negatives nor a sampler, so its result does not list them
    assert printed["results"][0]["protocol"] == {
        "candidates": "full",
        "exclude_seen": True,
        "seed": 0,
        "ks": [1, 5, 10],
        "request_time": "previous",
    }
    table = runner.invoke(app, ["evaluate", "--model", str(model), "--data", str(pairs)])
    assert table.exit_code == 0 and "protocol:" in table.stdout


def test_evaluate_json_path_still_writes_the_file_with_a_deprecation_warning(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    model, pairs = trained
    old = tmp_path / "ev.json"
    result = runner.invoke(app, ["evaluate", "--model", str(model), "--data", str(pairs), "--json", str(old)])
    assert result.exit_code == 0, result.output
    assert "deprecated" in result.stderr and f"--json-out {old}" in result.stderr
    assert json.loads(old.read_text())["model"] == "sasrec" and "protocol:" in result.stdout
    sampled = runner.invoke(
        app,
        ["evaluate", "--model", str(model), "--data", str(pairs), "--protocol", "sampled-uniform", "--json"],
    )
    assert json.loads(sampled.stdout)["results"][0]["protocol"]["sampler"] == "uniform"
    stray = runner.invoke(app, ["evaluate", "--model", str(model), "--data", str(pairs), "stray"])
    assert stray.exit_code == 2 and "unexpected argument" in stray.output


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    screen = io.StringIO()
    monkeypatch.setattr(_common, "err", Console(file=screen, force_terminal=True, width=100))
    return screen


def test_the_progress_display_is_off_unless_a_terminal_and_off_with_quiet_or_json(
    terminal: io.StringIO,
) -> None:
    assert _output.show_progress()
    assert not _output.show_progress(quiet=True) and not _output.show_progress(as_json=True)
    with _output.progress_display(True, "scoring", 2) as steps:
        steps.update(1, what="scoring: full")
    assert "scoring: full" in terminal.getvalue() and "1/2" in terminal.getvalue()


def test_not_a_terminal_no_progress() -> None:
    assert not _output.show_progress()  # pytest captures stderr: not a terminal


def test_evaluate_shows_progress_on_a_terminal_only_without_json(
    trained: tuple[Path, Path], terminal: io.StringIO
) -> None:
    model, pairs = trained
    base = ["evaluate", "--model", str(model), "--data", str(pairs), "--protocol", "full"]
    assert runner.invoke(app, [*base, "--protocol", "sampled-uniform"]).exit_code == 0
    assert "scoring" in terminal.getvalue() and "2/2" in terminal.getvalue()
    terminal.truncate(0)
    terminal.seek(0)
    assert runner.invoke(app, [*base, "--json"]).exit_code == 0
    assert "scoring" not in terminal.getvalue() and "loading" not in terminal.getvalue()
