"""The ``attnrec`` command line's help and its answers to bad input.

Every bad input must end with exit code 2, one clear message and no traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import TINY, fails, run

from attnrec.config import ConfigError, resolve_overrides
from attnrec.models.sasrec import SASRecConfig
from attnrec.training.train_config import TrainConfig


# -- help ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "evaluate", "recommend", "data", "models"])
def test_every_command_has_useful_help(command: str) -> None:
    code, output = run(command, "--help")
    assert code == 0 and "Usage" in output and "Example" in output
    if command != "models":
        assert "--data" in output or "--model" in output


def test_top_level_help_lists_commands() -> None:
    code, output = run("--help")
    assert code == 0
    for command in ("train", "evaluate", "recommend", "data", "models"):
        assert command in output


def test_python_dash_m() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "attnrec", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0 and "recommend" in proc.stdout


# -- bad input: exit code 2, one clear line, no traceback ------------------------------------------
def test_missing_data_file(tmp_path: Path) -> None:
    output = fails("train", "--data", str(tmp_path / "nope.txt"), *TINY)
    assert "nope.txt" in output and ("not found" in output or "neither an existing file" in output)


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("a x\na y\na z w\n")
    output = fails("train", "--data", str(bad), "--format", "pairs", *TINY)
    assert "bad.txt:3" in output


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "empty" in fails("data", "--data", str(empty), "--format", "pairs")


def test_users_too_short_to_split(tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("a 1\na 2\nb 1\n")
    assert "3 or more" in fails("train", "--data", str(short), "--format", "pairs", *TINY)


def test_unknown_model(cycle_pairs: Path) -> None:
    output = fails("train", "--data", str(cycle_pairs), "--model", "gpt9", *TINY)
    assert "unknown model 'gpt9'" in output and "sasrec" in output


def test_unknown_preset(cycle_pairs: Path) -> None:
    assert "unknown preset" in fails("train", "--data", str(cycle_pairs), "--preset", "nope", *TINY)


def test_unknown_config_key_lists_valid_keys(cycle_pairs: Path) -> None:
    output = fails("train", "--data", str(cycle_pairs), *TINY, "--set", "hiden=3")
    assert "hiden" in output and "model.hidden" in output and "train.lr" in output
    output = fails("train", "--data", str(cycle_pairs), *TINY, "--set", "model.lr=3")
    assert "unknown model key 'lr'" in output


def test_bad_config_values(cycle_pairs: Path, tmp_path: Path) -> None:
    assert "not a valid int" in fails("train", "--data", str(cycle_pairs), *TINY, "--set", "seed=x")
    assert "loss must be" in fails("train", "--data", str(cycle_pairs), *TINY, "--set", "loss=mse")
    assert "key=value" in fails("train", "--data", str(cycle_pairs), *TINY, "--set", "hidden")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nhidden=")
    assert "invalid TOML" in fails("train", "--data", str(cycle_pairs), "--config", str(bad), *TINY)
    assert "config file not found" in fails(
        "train", "--data", str(cycle_pairs), "--config", str(tmp_path / "x.toml")
    )
    sect = tmp_path / "sect.toml"
    sect.write_text("[modle]\nhidden = 3\n")
    assert "unknown section" in fails("train", "--data", str(cycle_pairs), "--config", str(sect))


def test_bad_checkpoint_dirs(cycle_model: Path, tmp_path: Path) -> None:
    assert "not a directory" in fails("recommend", "--model", str(tmp_path / "none"), "--user", "u1")
    (tmp_path / "empty").mkdir()
    assert "config.json" in fails("recommend", "--model", str(tmp_path / "empty"), "--user", "u1")
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in cycle_model.iterdir():
        if f.is_file():
            (broken / f.name).write_bytes(f.read_bytes())
    weights = broken / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert "truncated or corrupted" in fails("recommend", "--model", str(broken), "--user", "u1")


def test_recommend_needs_user_or_history(cycle_model: Path) -> None:
    assert "--user" in fails("recommend", "--model", str(cycle_model))


def test_an_unknown_device_is_one_line(cycle_model: Path) -> None:
    """``--device foo`` once reached torch.device and ended in a traceback."""
    output = fails("recommend", "--model", str(cycle_model), "--user", "u1", "--device", "foo")
    assert "device must be auto, cpu, cuda, cuda:N or mps, not 'foo'" in output


def test_bad_evaluate_options(cycle_pairs: Path, cycle_model: Path) -> None:
    assert "--target" in fails(
        "evaluate", "--model", str(cycle_model), "--data", str(cycle_pairs), "--target", "train"
    )
    assert "--ks" in fails("evaluate", "--model", str(cycle_model), "--data", str(cycle_pairs), "--ks", "a,b")
    code, output = run(
        "evaluate", "--model", str(cycle_model), "--data", str(cycle_pairs), "--protocol", "halfway"
    )
    assert code == 2 and "halfway" in output  # click's own usage error


def test_resolve_overrides_prefixes_and_ambiguity() -> None:
    sections = {"model": SASRecConfig, "train": TrainConfig}
    over = resolve_overrides(sections, ["hidden=4", "train.lr=0.1", "model.dropout=0"])
    assert over == {"model": {"hidden": "4", "dropout": "0"}, "train": {"lr": "0.1"}}
    with pytest.raises(ConfigError, match="valid keys"):
        resolve_overrides(sections, ["nothing=1"])
    with pytest.raises(ConfigError, match="unknown train key"):
        resolve_overrides(sections, ["train.hidden=1"])
    with pytest.raises(ConfigError, match="ambiguous, both configs have it; write model.seed or train.seed"):
        resolve_overrides({"model": TrainConfig, "train": TrainConfig}, ["seed=1"])


# Number options that take any value: rating thresholds (a rating scale may start below zero).
ANY_NUMBER = {"--min-rating", "--min-target-rating"}


def test_every_number_option_declares_its_range() -> None:
    """A number out of range is refused as it is read, naming the option, before any data or model
    loads; an option without a range once passed -2 threads to torch (a traceback) and a negative seed
    to numpy (an error that named no option, after the data had loaded)."""
    import importlib

    import click
    import typer

    from attnrec.cli import main

    for entry in main.COMMANDS.values():
        importlib.import_module(f"attnrec.cli.{entry.module}")
    group = typer.main.get_command(main.app)
    ctx = click.Context(group)
    unbounded = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        for param in command.params:
            described = getattr(param, "type_descriptor", None)  # typer's own parameters carry it
            if described is None:
                continue
            numeric = described.annotation in (int, float, int | None, float | None)
            bounds = (getattr(param, "min", None), getattr(param, "max", None))
            ranged = bounds != (None, None) or described.parameter_info.parser is not None
            if numeric and not ranged and not set(param.opts) & ANY_NUMBER:
                unbounded.append(f"{name} {'/'.join(param.opts)}")
    assert unbounded == []
