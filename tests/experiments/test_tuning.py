"""attnrec.experiments.tuning: selection on validation only, one test score, resume, pruning, parallel
workers.

Tiny SASRec trials (hidden 8, one layer, one epoch) on the synthetic ring log: seconds each.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.pruners import BasePruner
from optuna.trial import TrialState

from attnrec.config import ConfigError, config_to_dict
from attnrec.data.schema import Interactions
from attnrec.data.split import Split, leave_one_out
from attnrec.experiments.tuning import PruneTrial, TuneSettings, open_storage, tune
from attnrec.recommend import Recommender
from attnrec.training.callbacks import StopTraining
from attnrec.training.result import EpochRecord

TINY_MODEL = {"hidden": 8, "max_len": 12, "n_layers": 1, "n_heads": 1}
TINY_TRAIN = {"max_epochs": 1, "batch_size": 64, "threads": 1}


def settings(tmp_path: Path, **kw: Any) -> TuneSettings:
    values: dict[str, Any] = {
        "model": "sasrec",
        "out": tmp_path / "out",
        "storage": f"sqlite:///{tmp_path / 't.db'}",
        "study": "s",
        "model_settings": TINY_MODEL,
        "train_settings": TINY_TRAIN,
        "trials": 2,
        "verbose": False,
    }
    return TuneSettings(**(values | kw))


def stored(s: TuneSettings) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=s.study, storage=s.storage).trials


@pytest.fixture(scope="module")
def split(ring: Interactions) -> Split:
    return leave_one_out(ring)


class CountEpochs:
    """Counts the epochs trained across trials; raises KeyboardInterrupt (Ctrl-C, a kill) at epoch
    ``stop_at``."""

    def __init__(self, stop_at: int = 0) -> None:
        self.stop_at, self.epochs = stop_at, 0

    def on_epoch(self, record: EpochRecord) -> None:
        self.epochs += 1
        if self.epochs == self.stop_at:
            raise KeyboardInterrupt


class AlwaysPrune(BasePruner):
    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        return True


def test_selection_sees_validation_only_and_the_best_trial_is_tested_once(
    tmp_path: Path,
    ring: Interactions,
    split: Split,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tested: list[tuple[dict[str, Any], str, int]] = []
    test_cases_seen_by_fit: list[int] = []
    evaluate, fit = Recommender.evaluate, Recommender.fit

    def spy_evaluate(self: Recommender, cases: Any, *args: Any, **kw: Any) -> Any:
        tested.append((config_to_dict(self.config), kw["target"], len(cases)))
        return evaluate(self, cases, *args, **kw)

    def spy_fit(self: Recommender, data: Interactions, sp: Split, **kw: Any) -> Any:
        test_cases_seen_by_fit.append(len(sp.test))
        return fit(self, data, sp, **kw)

    monkeypatch.setattr(Recommender, "evaluate", spy_evaluate)
    monkeypatch.setattr(Recommender, "fit", spy_fit)
    s = settings(tmp_path, trials=3)
    outcome = tune(s, ring, split)

    trials = stored(s)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert test_cases_seen_by_fit == [0, 0, 0]  # the trials never receive the test cases
    best = max(trials, key=lambda t: t.value or 0.0)
    assert outcome.best_trial == best.number and outcome.best_value == best.value
    # one test evaluation, of the best trial's model, on every test case
    assert tested == [(best.user_attrs["model_config"], "test", len(split.test))]
    assert (
        outcome.test is not None
        and outcome.test.target == "test"
        and outcome.test.protocol.candidates == "full"
    )
    # the fixed settings are not searched, and every trial ran with them
    assert not {f"model.{k}" for k in TINY_MODEL} & {p for t in trials for p in t.params}
    assert all(t.user_attrs["model_config"]["hidden"] == 8 for t in trials)
    # only the best model is kept; the exports are there
    assert sorted(p.name for p in (s.out / "trials").iterdir()) == [str(best.number)]
    summary = json.loads((s.out / "summary.json").read_text())
    assert summary["best"]["trial"] == best.number and summary["best"]["valid_value"] == best.value
    assert summary["trials"] == {"complete": 3, "pruned": 0, "failed": 0, "interrupted": 0, "total": 3}
    assert (
        summary["test"]["metrics"] == outcome.test.metrics
        and "full ranking" in summary["test"]["protocol_text"]
    )
    best_toml = tomllib.loads((s.out / "best.toml").read_text())
    assert best_toml["model"]["dropout"] == best.params["model.dropout"]
    assert best_toml["train"]["lr"] == best.params["train.lr"]
    assert (s.out / "optimization_history.png").stat().st_size > 0
    assert (s.out / "param_importances.png").stat().st_size > 0


def test_an_interrupted_study_resumes_without_redoing_finished_trials(
    tmp_path: Path,
    ring: Interactions,
    split: Split,
) -> None:
    s = settings(tmp_path, trials=3)
    with pytest.raises(KeyboardInterrupt):
        tune(s, ring, split, callbacks=[CountEpochs(stop_at=2)])  # Ctrl-C during trial 1
    before = stored(s)
    assert [t.state for t in before] == [TrialState.COMPLETE, TrialState.FAIL]
    assert before[1].user_attrs["interrupted"] is True

    counter = CountEpochs()
    outcome = tune(s, ring, split, callbacks=[counter])
    after = stored(s)
    assert counter.epochs == 2  # trial 1 retried plus one new trial; trial 0 is not trained again
    assert len(after) == 4
    assert after[0].datetime_complete == before[0].datetime_complete and after[0].value == before[0].value
    assert after[2].user_attrs["retry_of"] == 1 and after[2].params == before[1].params
    assert outcome.counts == {"complete": 3, "pruned": 0, "failed": 0, "interrupted": 1}
    # a third run has nothing left to do
    counter = CountEpochs()
    tune(s, ring, split, callbacks=[counter])
    assert counter.epochs == 0 and len(stored(s)) == 4


def test_a_trial_left_running_by_a_killed_process_is_retried(
    tmp_path: Path, ring: Interactions, split: Split
) -> None:
    s = settings(tmp_path, trials=1)
    tune(s, ring, split)
    study = optuna.load_study(study_name=s.study, storage=s.storage)
    orphan = study.ask()  # what a SIGKILLed worker leaves: a trial marked running forever
    dropout = orphan.suggest_float("model.dropout", 0.0, 0.5)

    outcome = tune(dataclasses.replace(s, trials=2), ring, split)
    trials = stored(s)
    assert trials[1].state == TrialState.FAIL and trials[1].user_attrs["interrupted"] is True
    assert trials[2].state == TrialState.COMPLETE and trials[2].params["model.dropout"] == dropout
    assert outcome.counts["complete"] == 2 and len(trials) == 3


def test_the_pruner_stops_a_trial_after_a_validated_epoch(
    tmp_path: Path, ring: Interactions, split: Split
) -> None:
    s = settings(tmp_path, trials=2, train_settings=TINY_TRAIN | {"max_epochs": 4})
    outcome = tune(s, ring, split, pruner=AlwaysPrune())
    trials = stored(s)
    assert [t.state for t in trials] == [TrialState.PRUNED] * 2
    assert [t.user_attrs["epochs"] for t in trials] == [1, 1]  # of 4 allowed
    assert [list(t.intermediate_values) for t in trials] == [[1], [1]]
    assert outcome.best_trial is None and outcome.test is None
    assert not (s.out / "trials").exists() and not (s.out / "best.toml").exists()
    assert any("no trial completed" in n for n in outcome.notes)


class FakeTrial:
    def __init__(self, prune: bool) -> None:
        self.reports: list[tuple[float, int]] = []
        self.prune = prune

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))

    def should_prune(self) -> bool:
        return self.prune


def test_prune_callback_reports_validated_epochs_only() -> None:
    trial = FakeTrial(prune=False)
    cb = PruneTrial(trial, "NDCG@10")  # type: ignore[arg-type]
    cb.on_epoch({"epoch": 1, "train_seconds": 0.1, "loss": 1.0})  # not validated (eval_every > 1)
    cb.on_epoch({"epoch": 2, "train_seconds": 0.1, "loss": 0.9, "valid": {"NDCG@10": 0.25, "HR@10": 0.5}})
    assert trial.reports == [(0.25, 2)] and cb.pruned_at is None
    cb = PruneTrial(FakeTrial(prune=True), "NDCG@10")  # type: ignore[arg-type]
    with pytest.raises(StopTraining, match="pruned"):
        cb.on_epoch({"epoch": 3, "train_seconds": 0.1, "valid": {"NDCG@10": 0.1}})
    assert cb.pruned_at == 3


def test_a_study_resumed_with_other_settings_is_refused(
    tmp_path: Path, ring: Interactions, split: Split
) -> None:
    s = settings(tmp_path, trials=1)
    tune(s, ring, split)
    other = dataclasses.replace(s, model_settings=TINY_MODEL | {"hidden": 16})
    with pytest.raises(
        ConfigError, match=r"study 's' .* was started with other settings \(model_config differ\)"
    ):
        tune(other, ring, split)


@pytest.mark.parametrize("url", ["sqlite:////no/such/dir/t.db", "nonsense://x"])
def test_a_storage_that_cannot_be_opened_is_a_clear_error(url: str) -> None:
    with pytest.raises(ConfigError, match=r"--storage .*: cannot open it"):
        open_storage(url)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"metric": "NDCG@20"}, "unknown metric 'NDCG@20'"),
        ({"pruner": "hyperband"}, "unknown pruner 'hyperband'"),
        ({"train_settings": {"monitor": "HR@10"}}, "train.monitor=HR@10 differs from the metric"),
        ({"model": "nope"}, "unknown model 'nope'"),
        ({"model": "pop"}, "pop declares no search space"),
    ],
)
def test_bad_settings_fail_before_any_trial(
    tmp_path: Path,
    ring: Interactions,
    split: Split,
    kw: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises((ConfigError, KeyError), match=message):
        tune(
            settings(
                tmp_path, **({"model_settings": {}, "train_settings": {}} if "model" in kw else {}) | kw
            ),
            ring,
            split,
        )
    assert not (tmp_path / "t.db").exists()


@pytest.mark.slow
def test_parallel_workers_share_the_storage(tmp_path: Path, ring: Interactions, split: Split) -> None:
    s = settings(tmp_path, trials=2, jobs=2)
    seen: list[tuple[int, int]] = []
    outcome = tune(s, ring, split, on_trial=lambda done, planned: seen.append((done, planned)))
    assert seen and seen[-1] == (2, 2) and all(b == 2 for _, b in seen)  # counted from the storage
    trials = stored(s)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert (
        len({json.dumps(t.params, sort_keys=True) for t in trials}) == 2
    )  # the workers draw different points
    assert all(t.user_attrs["train_config"]["threads"] == 1 for t in trials)
    assert outcome.test is not None
