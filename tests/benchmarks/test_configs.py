"""Every committed run config reads and resolves: its preset, model and training settings build the model's config,
the one its committed result trained."""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path

import pytest

from attnrec import Recommender
from attnrec.experiments.configured import RunConfig, seed_runs

ROOT = Path(__file__).resolve().parents[2]
RUN_CONFIGS = sorted(
    p
    for p in (ROOT / "benchmarks" / "configs").rglob("*.toml")
    if {"model", "base"} & set(tomllib.loads(p.read_text()).get("run", {}))
)


def test_the_run_configs_are_found() -> None:
    names = {p.relative_to(ROOT / "benchmarks" / "configs").as_posix() for p in RUN_CONFIGS}
    assert {
        "ml-1m/sasrec-ce-h128.toml",
        "gpu/ml-1m-hstu-large-ce-gpu2.toml",
        "taobao-sample/sasrec-ce.toml",
    } <= names


@pytest.mark.parametrize(
    "path", RUN_CONFIGS, ids=lambda p: p.relative_to(ROOT / "benchmarks" / "configs").as_posix()
)
def test_a_committed_run_config_resolves_without_its_data(path: Path) -> None:
    cfg = RunConfig.from_toml(path)  # unknown keys, wrong types, bad splits and protocols fail here
    for run in seed_runs(cfg):  # a misspelt model or training setting, or a bad value, fails here
        rec = Recommender(run.model, run.model_settings, run.train_settings, preset=run.preset)
        assert rec.config is not None and rec.train_config is not None


# Fields the fit fills in from the data (`feature_context`: the event vocabulary's size), so a config
# without the data cannot know them.
FROM_THE_DATA = {"n_events"}
RESULTS = ROOT / "benchmarks" / "results" / "runs"


def _committed_runs() -> list[RunConfig]:
    return [
        run
        for path in RUN_CONFIGS
        for run in seed_runs(RunConfig.from_toml(path))
        if (RESULTS / f"{run.name}.json").exists()
    ]


@pytest.mark.parametrize("run", _committed_runs(), ids=lambda run: run.name)
def test_a_committed_result_is_still_what_its_config_builds(run: RunConfig) -> None:
    # A preset or default that changes must not make an old config describe a model its result never
    # trained: the config pins what the result ran. A field the result does not record came later, and
    # its default is the behaviour from before it existed.
    recorded = json.loads((RESULTS / f"{run.name}.json").read_text())["model_config"]
    config = Recommender(run.model, run.model_settings, run.train_settings, preset=run.preset).config
    assert config is not None
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    differ = {
        k: (recorded.get(k, defaults[k]), v)
        for k, v in dataclasses.asdict(config).items()
        if k not in FROM_THE_DATA and recorded.get(k, defaults[k]) != v
    }
    assert not differ, f"{run.name}: (recorded, built now) {differ}"
