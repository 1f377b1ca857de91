"""RunConfig: a benchmark run config is checked before any data is read or any model trained."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnrec.config import ConfigError
from attnrec.experiments.configured import RunConfig


def _config(tmp_path: Path, run: str, extra: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\n{run}\n{extra}')
    return path


def test_a_config_reads_its_tables(tmp_path: Path) -> None:
    cfg = RunConfig.from_toml(_config(tmp_path, 'data = "demo"\nmodel = "pop"\nprotocols = ["full", "sampled-uniform"]',
                                      "[train]\nmax_epochs = 2\n"))
    assert (cfg.name, cfg.split, cfg.valid_protocol) == ("run", "leave-one-out", "full")  # name: the file's stem
    assert cfg.protocols == ("full", "sampled-uniform") and cfg.train_settings == {"max_epochs": 2}


@pytest.mark.parametrize(("run", "extra", "message"), [
    ('data = "demo"\nmodel = "pop"\nepochs = 3', "", r"unknown \[run\] keys \['epochs'\]"),
    ('data = "demo"', "", r"\[run\] needs model"),
    ('data = "demo"\nmodel = "pop"', "[optim]\nlr = 1\n", "unknown section"),
    ('data = "demo"\nmodel = "pop"\nsplit = "random"', "", "unknown split 'random'"),
    ('data = "demo"\nmodel = "pop"\nsplit = "temporal"\nvalid_users = 5', "", "leave-one-out split only"),
    ('data = "demo"\nmodel = "pop"\nprotocols = ["halfway"]', "", "unknown protocol 'halfway'"),
])
def test_bad_configs_fail_with_one_clear_line(tmp_path: Path, run: str, extra: str, message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        RunConfig.from_toml(_config(tmp_path, run, extra))
