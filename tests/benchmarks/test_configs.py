"""Every committed run config reads and resolves: its preset, model and training settings build the model's
config, the one its committed result trained."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path

import pytest

from attnrec import Recommender
from attnrec.experiments.configured import RunConfig, _resolved_tables, seed_runs

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
# Fields whose default changed after results were committed without them: such a result ran the value of
# before (the row-major softmax kernel, nn.Dropout masks), not today's default.
DEFAULT_BEFORE = {"fast_ce": False, "fast_dropout": False}
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
    # its default is the behaviour from before it existed (or, where the default changed since, the old
    # one).
    recorded = json.loads((RESULTS / f"{run.name}.json").read_text())["model_config"]
    config = Recommender(run.model, run.model_settings, run.train_settings, preset=run.preset).config
    assert config is not None
    defaults = {f.name: f.default for f in dataclasses.fields(config)} | DEFAULT_BEFORE
    differ = {
        k: (recorded.get(k, defaults[k]), v)
        for k, v in dataclasses.asdict(config).items()
        if k not in FROM_THE_DATA and recorded.get(k, defaults[k]) != v
    }
    assert not differ, f"{run.name}: (recorded, built now) {differ}"


# A setting is stated once, as its key: a comment or the `notes` of a config that says "dropout 0.1" or
# "fast_ce on" beside `dropout = 0.1` / `fast_ce = true` (its own or its base's) is a second copy that
# drifts the day the key changes. Comments and notes say why a run differs, not what its keys hold.
def _spellings(value: object) -> list[str]:
    if isinstance(value, bool):
        return ["true", "on", "enabled"] if value else ["false", "off", "disabled"]
    if isinstance(value, int | float):
        texts = {repr(value), f"{value:g}", f"{value:,}"}
        if float(value).is_integer():
            texts |= {str(int(value)), f"{int(value):,}", f"{int(value)}.0"}
        return sorted(texts, key=len, reverse=True)
    if isinstance(value, str) and value:
        return [value]
    return []


def restated_keys(text: str, tables: dict[str, dict[str, object]]) -> list[str]:
    """The ``key value`` pairs of ``tables`` that ``text`` restates ("dropout 0.1", "patience=20", "fast_ce
    on")."""
    found = []
    for table in tables.values():
        for key, value in table.items():
            if key in {"name", "base", "notes", "data"}:
                continue
            names = "|".join(re.escape(n) for n in {key, key.replace("_", " "), key.replace("_", "-")})
            values = "|".join(re.escape(v) for v in _spellings(value))
            if values and re.search(
                rf"(?<![\w.-])(?:{names})`?\s*(?:=|:|\bof\b|\bto\b|\bis\b)?\s*[`\"']?(?:{values})(?![\w.])",
                text,
                flags=re.IGNORECASE,
            ):
                found.append(f"{key} = {value!r}")
    return found


def _comments(path: Path) -> str:
    """Every comment of a TOML file, whole-line and trailing (no config value holds a '#')."""
    return "\n".join(line.partition("#")[2] for line in path.read_text().splitlines() if "#" in line)


@pytest.mark.parametrize(
    "path", RUN_CONFIGS, ids=lambda p: p.relative_to(ROOT / "benchmarks" / "configs").as_posix()
)
def test_a_config_states_each_setting_once(path: Path) -> None:
    tables = _resolved_tables(path, ())
    said = {"comment": _comments(path), "notes": str(tables["run"].get("notes", ""))}
    restated = {where: restated_keys(text, tables) for where, text in said.items()}
    assert not any(restated.values()), f"its {restated} restate keys it sets: say why, not what"


@pytest.mark.parametrize(
    ("text", "restates"),
    [
        ("dropout 0.1, attn_dropout=0 (fused kernel)", ["dropout = 0.1", "attn_dropout = 0.0"]),
        ("with fast_ce on and patience 20", ["fast_ce = True", "patience = 20"]),
        ("validation on 2,048 users; valid_users 2,048", ["valid_users = 2048"]),
        ("the dropout of the paper; attn dropout after softmax; patience 200", []),
    ],
)
def test_the_restatement_check_finds_key_value_pairs_and_only_them(text: str, restates: list[str]) -> None:
    tables = {
        "run": {"valid_users": 2048, "name": "x"},
        "model": {"dropout": 0.1, "attn_dropout": 0.0, "fast_ce": True},
        "train": {"patience": 20},
    }
    assert restated_keys(text, tables) == restates
