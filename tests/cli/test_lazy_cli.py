"""``attnrec --version`` and ``attnrec --help`` answer without importing torch; commands load their module
lazily."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

from typer.testing import CliRunner

import attnrec
from attnrec.cli.main import COMMANDS, app, command_name, load_all

# Reports, as JSON, which heavy modules a CLI call imported (run in a fresh interpreter).
RUNNER = """
import sys
from attnrec.cli.main import app
try:
    app(sys.argv[1:], prog_name="attnrec")
except SystemExit:
    pass
print("\\n" + __import__("json").dumps(sorted(m for m in ("torch", "pandas", "optuna") if m in sys.modules)))
"""


def _imported(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, check=True, timeout=120
    )
    heavy: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return heavy


def test_version_and_help_do_not_import_torch() -> None:
    assert _imported("--version") == []
    assert _imported("--help") == []


def test_a_command_imports_what_it_needs_when_it_runs() -> None:
    assert "torch" in _imported("train", "--help")


def test_the_command_table_lists_every_command_with_its_docstring_line() -> None:
    load_all()
    registered = {command_name(c): c for c in app.registered_commands}
    assert set(registered) == set(COMMANDS)
    for name, info in registered.items():
        assert info.callback is not None
        assert info.callback.__module__ == f"attnrec.cli.{COMMANDS[name].module}"
        doc = " ".join((inspect.getdoc(info.callback) or "").split("\n\n")[0].split())
        assert doc == COMMANDS[name].summary, name


def test_help_lists_every_command_and_each_runs() -> None:
    runner = CliRunner()
    listing = runner.invoke(app, ["--help"], terminal_width=200)
    assert listing.exit_code == 0
    for name, entry in COMMANDS.items():
        assert f" {name} " in listing.output and entry.summary[:40] in listing.output
    for name, entry in COMMANDS.items():  # each command loads and shows its own help
        own = runner.invoke(app, [name, "--help"], terminal_width=200)
        assert own.exit_code == 0 and entry.summary[:40] in own.output, name
    assert runner.invoke(app, ["nosuch"]).exit_code == 2


def test_public_names_load_on_first_use() -> None:
    assert set(attnrec.__all__) == {"__version__", *attnrec._EXPORTS}
    for name in attnrec._EXPORTS:
        assert getattr(attnrec, name).__name__ == name
