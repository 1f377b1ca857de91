"""Every committed run config reads and resolves: its preset, model and training settings build the model's config."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from attnrec import Recommender
from attnrec.experiments.configured import RunConfig, seed_runs

ROOT = Path(__file__).resolve().parents[2]
RUN_CONFIGS = sorted(p for p in (ROOT / "benchmarks" / "configs").rglob("*.toml")
                     if {"model", "base"} & set(tomllib.loads(p.read_text()).get("run", {})))


def test_the_run_configs_are_found() -> None:
    names = {p.relative_to(ROOT / "benchmarks" / "configs").as_posix() for p in RUN_CONFIGS}
    assert {"ml-1m/sasrec-ce-h128.toml", "gpu/ml-1m-hstu-large-ce-gpu2.toml", "taobao-sample/sasrec-ce.toml"} <= names


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.relative_to(ROOT / "benchmarks" / "configs").as_posix())
def test_a_committed_run_config_resolves_without_its_data(path: Path) -> None:
    cfg = RunConfig.from_toml(path)  # unknown keys, wrong types, bad splits and protocols fail here
    for run in seed_runs(cfg):  # a misspelt model or training setting, or a bad value, fails here
        rec = Recommender(run.model, run.model_settings, run.train_settings, preset=run.preset)
        assert rec.config is not None and rec.train_config is not None
