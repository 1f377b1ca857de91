"""Running ``attnrec`` in-process for the CLI tests: every exit must be a clean one."""

from __future__ import annotations

from typer.testing import CliRunner

from attnrec.cli.main import app

runner = CliRunner()
#: A network small enough for any CLI test (model settings only).
TINY_NETWORK = ["--set", "hidden=8", "--set", "max_len=12", "--set", "n_layers=1"]
#: Its training settings besides the number of epochs: one thread, batches of 64.
TINY_TRAINING = ["--set", "batch_size=64", "--set", "threads=1"]
#: A model small and quick enough for any CLI test: train it with these options.
TINY = [*TINY_NETWORK, "--set", "max_epochs=1", *TINY_TRAINING, "--no-progress", "--quiet"]


def run(*args: str) -> tuple[int, str]:
    """``attnrec ARGS``: its exit code and output, after checking it did not crash."""
    result = runner.invoke(app, list(args))
    # Exit codes come from typer.Exit/SystemExit only: any other exception is a crash.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def fails(*args: str) -> str:
    """``attnrec ARGS`` that must fail as bad input does: exit code 2 and an error line."""
    code, output = run(*args)
    assert code == 2, output
    assert "error" in output.lower()
    return output
