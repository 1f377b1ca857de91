"""Every registered sequential model: its presets are valid settings, and the time budget is obeyed."""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import re
from pathlib import Path

import pytest

from attnrec import Recommender, list_models
from attnrec.config import config_from_dict
from attnrec.data.demo import make_demo
from attnrec.data.schema import Interactions
from attnrec.data.split import Split, leave_one_out
from attnrec.models.promises import PROMISES
from attnrec.models.registry import get_spec
from attnrec.training.train_config import TrainConfig

MODELS = list_models("sequential")
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "runs"
# run names as the promises cite them: a dataset prefix, then more dash-separated words (a glob * allowed)
RUN_NAME = re.compile(r"\b(?:ml-1m|ml-100k|ml-latest-small|beauty|amazon-toys|amazon-sports)(?:-[a-z0-9*]+)+")


@functools.cache
def tiny() -> tuple[Interactions, Split]:
    data = make_demo(n_users=60, n_items=40, seed=3, mean_length=12)
    return data, leave_one_out(data)


@pytest.mark.parametrize("name", MODELS)
def test_presets_are_valid_settings(name: str) -> None:
    spec = get_spec(name)
    assert spec.kind in ("torch", "estimator") and dataclasses.is_dataclass(spec.config_cls)
    for preset, parts in spec.presets.items():
        assert set(parts) <= {"model", "train"}, (name, preset)
        config_from_dict(spec.config_cls, dict(parts.get("model", {})))
        config_from_dict(TrainConfig, dict(parts.get("train", {})))
        Recommender(name, preset=preset)


@pytest.mark.parametrize("name", [m for m in MODELS if get_spec(m).kind == "torch"])
def test_time_budget_stops_training_after_the_epoch_that_exceeds_it(name: str) -> None:
    data, split = tiny()
    preset = "demo" if "demo" in get_spec(name).presets else None
    rec = Recommender(name, preset=preset, train={"max_epochs": 50, "time_budget": 1e-3, "threads": 1})
    rec.fit(data, split, progress=False)
    assert rec.train_result_ is not None
    assert rec.train_result_.epochs == 1 and "time budget" in rec.train_result_.stopped


def test_baselines_have_presets_for_the_papers_datasets_and_the_demo() -> None:
    for name in ("pop", "bprmf", "ncf", "fmc", "fpmc", "transrec", "gru4rec", "gru4rec-plus", "caser"):
        assert {"ml-1m", "beauty", "demo"} <= set(get_spec(name).presets), name


def test_every_preset_states_its_promise_and_no_promise_is_orphaned() -> None:
    for name in list_models():
        spec = get_spec(name)
        assert set(PROMISES.get(name, {})) == set(spec.presets), name
        for preset in spec.presets:
            assert len(spec.promise(preset)) > 40, (name, preset)  # a sentence, not a placeholder
    assert set(PROMISES) <= set(list_models())


def test_every_run_a_promise_cites_is_a_committed_result() -> None:
    # A promise backs its claim with a run name; a renamed or deleted result must not leave it dangling.
    runs = {p.stem for p in RESULTS.glob("*.json")}
    cited = {m for text in (p for d in PROMISES.values() for p in d.values()) for m in RUN_NAME.findall(text)}
    assert cited, "the pattern finds no run names: the test would pass vacuously"
    for name in cited:
        assert any(fnmatch.fnmatch(run, name) for run in runs), name
