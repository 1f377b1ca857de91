"""Hyper-parameter search with Optuna, through the one training loop (``attnrec tune``).

A study samples settings from the model's search space (:mod:`attnrec.search_space`) with the
seeded TPE sampler, trains each trial with :meth:`Recommender.fit` and scores it by its best
validation value of ``metric`` (full ranking): selection never sees the test split, which the
trial processes do not even receive. Every validated epoch is reported to the trial through an
epoch callback (:class:`PruneTrial`), so the pruner (median or successive halving) stops a poor
trial after any epoch. The study lives in an RDB storage (SQLite by default): a killed tuning
started again with the same storage and study name keeps its finished trials and retries the
one(s) it was running, with the same parameters. ``jobs`` > 1 runs that many worker processes
on the shared storage (one torch thread each); SQLite serialises their writes, and each waits
for the lock rather than failing.

After the trials, :func:`attnrec.experiments.tuning_output.finish` scores the best trial once on
the test split and writes ``best.toml``, ``summary.json`` and the plots.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import torch
from optuna.pruners import BasePruner
from optuna.storages import RDBStorage
from optuna.trial import TrialState

from attnrec.config import ConfigError, config_to_dict
from attnrec.data.schema import Interactions, Sequences
from attnrec.data.signals import Signal, adopt_signal, declared
from attnrec.data.split import EvalSet, Split
from attnrec.evaluation.metrics import METRICS
from attnrec.experiments.tuning_output import TuneOutcome, finish
from attnrec.models.registry import get_spec
from attnrec.recommend import Recommender
from attnrec.search_space import SearchSpace, sample, space_from_toml
from attnrec.training.callbacks import EpochCallback, StopTraining
from attnrec.training.result import EpochRecord
from attnrec.training.train_config import TrainConfig

log = logging.getLogger("attnrec.tuning")
PRUNERS: tuple[str, ...] = ("median", "halving", "none")
# Failures that end one trial (recorded as failed, the study goes on): a sampled combination the
# config refuses, a diverged loss, an out-of-memory. Anything else is a bug and ends the study.
TRIAL_ERRORS: tuple[type[Exception], ...] = (ValueError, FloatingPointError, RuntimeError)
# Settings the tuner sets itself per trial: the same in every trial whatever the user asked.
_RUNTIME_KEYS = ("time_budget", "threads")


@dataclass(frozen=True)
class TuneSettings:
    """One tuning: what to search, where the study lives and the limits.

    ``model_settings`` / ``train_settings`` are the user's fixed settings (``--config`` / ``--set``):
    they are not searched. ``trials`` counts finished trials in the study (a resumed study counts
    the ones it has); ``time_budget`` (seconds, 0 = none) bounds this session's trials in total and
    ``trial_budget`` (0 = the base config's ``time_budget``) each trial's training.
    """

    model: str
    out: Path
    storage: str
    study: str
    preset: str | None = None
    model_settings: Mapping[str, Any] = field(default_factory=dict)
    train_settings: Mapping[str, Any] = field(default_factory=dict)
    space_file: Path | None = None
    trials: int = 20
    time_budget: float = 0.0
    trial_budget: float = 0.0
    jobs: int = 1
    metric: str = "NDCG@10"
    pruner: str = "median"
    seed: int = 0
    keep_trials: bool = False
    verbose: bool = True

    def __post_init__(self) -> None:
        if self.trials < 1 or self.jobs < 1:
            raise ConfigError("trials and jobs must be at least 1")
        if self.time_budget < 0 or self.trial_budget < 0:
            raise ConfigError("time budgets must be >= 0 seconds (0 = no limit)")
        if self.metric not in METRICS:
            raise ConfigError(f"unknown metric {self.metric!r}; use one of {', '.join(METRICS)}")
        if self.pruner not in PRUNERS:
            raise ConfigError(f"unknown pruner {self.pruner!r}; use {', '.join(PRUNERS)}")
        monitor = self.train_settings.get("monitor")
        if monitor is not None and monitor != self.metric:
            raise ConfigError(
                f"train.monitor={monitor} differs from the metric tuned ({self.metric}); "
                "set the metric with --metric only"
            )


@dataclass(frozen=True)
class SearchPlan:
    """The resolved search: the space (model default, file entries, less the fixed keys) and base configs."""

    space: SearchSpace
    fixed: dict[str, list[str]]
    model_config: object
    train_config: TrainConfig


def plan_search(settings: TuneSettings) -> SearchPlan:
    """Check the settings and resolve the space; every error is a clear :class:`ConfigError`."""
    spec = get_spec(settings.model)
    base = Recommender(
        settings.model, dict(settings.model_settings), dict(settings.train_settings), settings.preset
    )
    classes = {"model": spec.config_cls, "train": TrainConfig}
    space = spec.search_space or SearchSpace()
    if settings.space_file is not None:
        space = space.merged(space_from_toml(settings.space_file, classes))
    fixed = {"model": sorted(settings.model_settings), "train": sorted(settings.train_settings)}
    space = space.without(fixed)
    where = str(settings.space_file) if settings.space_file else f"the {settings.model} search space"
    space.check(classes, where)
    space.check_values({"model": base.config, "train": base.train_config}, where)
    # e.g. n_negatives (sampled_ce only) once --set loss=ce: never sampled, so not reported as searched
    space = space.reachable(
        {"model": config_to_dict(base.config), "train": config_to_dict(base.train_config)}
    )
    if not len(space):
        hint = "declares no search space" if spec.search_space is None else "has nothing left to search"
        raise ConfigError(f"{settings.model} {hint}; give the ranges in a --space file")
    return SearchPlan(space, fixed, base.config, base.train_config)


class PruneTrial:
    """Epoch callback: report each validated epoch's ``metric`` to the Optuna trial; stop when it should be
    pruned."""

    def __init__(self, trial: optuna.trial.Trial, metric: str) -> None:
        self.trial, self.metric = trial, metric
        self.pruned_at: int | None = None  # the epoch after which the pruner stopped the trial

    def on_epoch(self, record: EpochRecord) -> None:
        valid = record.get("valid")
        if valid is None:  # not validated this epoch (eval_every > 1): nothing to report
            return
        self.trial.report(valid[self.metric], record["epoch"])
        if self.trial.should_prune():
            self.pruned_at = record["epoch"]
            raise StopTraining("pruned")


def open_storage(url: str) -> RDBStorage:
    """The study storage at ``url``; SQLite writers wait up to two minutes for the lock instead of failing."""
    engine = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    try:
        return RDBStorage(url, engine_kwargs=engine)
    except Exception as e:  # SQLAlchemy raises many types (bad URL, missing directory, not a database)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"--storage {url}: cannot open it ({first})") from None


def tune(
    settings: TuneSettings,
    data: Interactions,
    split: Split,
    *,
    pruner: BasePruner | None = None,
    callbacks: Sequence[EpochCallback] = (),
    on_trial: Callable[[int, int], None] | None = None,
) -> TuneOutcome:
    """Run (or resume) the study of ``settings`` on ``split`` and finish it (test, exports); see the module
    doc.

    ``pruner`` replaces the one named in the settings; ``callbacks`` see every epoch of every trial
    (they travel to the worker processes, so must pickle when ``jobs`` > 1). ``on_trial(done, planned)``
    is called in this process as this session's trials finish (e.g. a progress display).
    """
    t0 = time.time()
    _optuna_logging(settings.verbose)
    plan = plan_search(settings)
    storage = open_storage(settings.storage)
    study = _open_study(settings, storage, _fingerprint(settings, plan, data, split))
    retried = _recover_interrupted(study, storage)
    if retried:
        log.warning(
            "retrying %d trial(s) interrupted in an earlier session: %s",
            len(retried),
            ", ".join(map(str, retried)),
        )
    remaining = settings.trials - _counted(study)
    deadline = t0 + settings.time_budget if settings.time_budget else 0.0
    if remaining > 0:
        job = _Job(
            settings, plan, data, _withhold_test(split), tuple(callbacks), deadline, pruner, tuple(declared())
        )
        _run_workers(job, remaining, len(study.trials), on_trial or _no_progress)
    return finish(
        optuna.load_study(study_name=settings.study, storage=storage),
        settings.out,
        data,
        split,
        keep_trials=settings.keep_trials,
        started=t0,
        space=plan.space.to_dict(),
    )


# -- the study -------------------------------------------------------------------------------------
def _fingerprint(
    settings: TuneSettings, plan: SearchPlan, data: Interactions, split: Split
) -> dict[str, Any]:
    """What makes trials comparable: a study resumed with anything else is refused."""
    train = {k: v for k, v in config_to_dict(plan.train_config).items() if k not in _RUNTIME_KEYS}
    print_ = {
        "model": settings.model,
        "data": data.source.sha256 or data.source.name,
        "split": split.describe(),
        "metric": settings.metric,
        "model_config": config_to_dict(plan.model_config),
        "train_config": train,
        "space": plan.space.to_dict(),
    }
    normal: dict[str, Any] = json.loads(json.dumps(print_, default=str))  # as the storage returns it
    return normal


def _open_study(settings: TuneSettings, storage: RDBStorage, fingerprint: dict[str, Any]) -> optuna.Study:
    study = optuna.create_study(
        study_name=settings.study, storage=storage, direction="maximize", load_if_exists=True
    )
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise ConfigError(
            f"study {settings.study!r} in {settings.storage} minimises; name another with --study"
        )
    stored = study.user_attrs.get("attnrec")
    if stored is None:
        study.set_user_attr("attnrec", fingerprint)
    elif stored != fingerprint:
        differ = sorted(k for k in fingerprint.keys() | stored.keys() if fingerprint.get(k) != stored.get(k))
        raise ConfigError(
            f"study {settings.study!r} in {settings.storage} was started with other settings "
            f"({', '.join(differ)} differ); resume it with the same ones or name a new study with --study"
        )
    return study


def _recover_interrupted(study: optuna.Study, storage: RDBStorage) -> list[int]:
    """Trials a killed session left running (or that were interrupted) are failed and queued again, once.

    One tuning session per study at a time: a trial still marked running belongs to a dead process.
    """
    study_id = storage.get_study_id_from_name(study.study_name)
    trials = study.get_trials(deepcopy=False)
    queued = {t.user_attrs.get("retry_of") for t in trials}
    retried = []
    for t in trials:
        if t.state == TrialState.RUNNING:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
            storage.set_trial_user_attr(trial_id, "interrupted", True)
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
        elif not (t.state == TrialState.FAIL and t.user_attrs.get("interrupted")):
            continue
        if t.number not in queued and t.params:
            study.enqueue_trial(t.params, user_attrs={"retry_of": t.number})
            retried.append(t.number)
    return retried


def _counted(study: optuna.Study) -> int:
    """Finished trials that count towards ``trials``: all but the interrupted ones (they are retried)."""
    done = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(
        1 for t in study.get_trials(deepcopy=False) if t.state in done and not t.user_attrs.get("interrupted")
    )


def _withhold_test(split: Split) -> Split:
    """``split`` without its test cases: what trials train and select on."""
    empty = np.empty(0, dtype=np.int64)
    none = EvalSet(empty, Sequences(np.zeros(1, dtype=np.int64), empty, split.train.n_items), empty)
    return dataclasses.replace(split, test=none)


def _optuna_logging(verbose: bool) -> None:
    """Optuna's own lines (study created, trial finished with its value) only when verbose; warnings always.

    They go through attnrec's logger (as ``attnrec.optuna``) instead of Optuna's own stderr handler,
    so they come out where and as attnrec's lines do (the CLI's handler), not interleaved beside them.
    """
    optuna.logging.disable_default_handler()
    optuna.logging.set_verbosity(optuna.logging.INFO if verbose else optuna.logging.WARNING)
    source = logging.getLogger("optuna")
    if not any(isinstance(h, _ToAttnrec) for h in source.handlers):
        source.addHandler(_ToAttnrec())


class _ToAttnrec(logging.Handler):
    """Hands Optuna's log records to the ``attnrec.optuna`` logger (and so to attnrec's handlers)."""

    def emit(self, record: logging.LogRecord) -> None:
        target = logging.getLogger("attnrec.optuna")
        if target.isEnabledFor(record.levelno):
            target.handle(record)


def _no_progress(done: int, planned: int) -> None:
    """The default ``on_trial``: nothing."""


def _make_pruner(name: str) -> BasePruner:
    if name == "median":  # no pruning before 3 trials finished, nor on a first epoch alone (noise)
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=2)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    return optuna.pruners.NopPruner()


# -- the trials ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Job:
    """What each worker needs (pickled to the worker processes)."""

    settings: TuneSettings
    plan: SearchPlan
    data: Interactions
    split: Split  # test withheld
    callbacks: tuple[EpochCallback, ...]
    deadline: float  # time.time() after which no trial starts (0 = none)
    pruner: BasePruner | None
    signals: tuple[Signal, ...] = ()  # the declared signals: a spawned worker declares them again


def _run_workers(job: _Job, remaining: int, n_existing: int, on_trial: Callable[[int, int], None]) -> None:
    """``remaining`` trials shared by ``jobs`` workers (in this process when there is one)."""
    jobs = min(job.settings.jobs, remaining)
    shares = [remaining // jobs + (i < remaining % jobs) for i in range(jobs)]
    # Each worker's sampler gets its own seed, new in every session: the same seed would draw the same
    # random start-up points in every worker, and again after a resume.
    seeds = [
        int(np.random.SeedSequence([job.settings.seed, n_existing, i]).generate_state(1)[0])
        for i in range(jobs)
    ]
    if jobs == 1:
        done = iter(range(1, remaining + 1))
        _work(job, shares[0], seeds[0], lambda study, trial: on_trial(next(done, remaining), remaining))
        return
    ctx = multiprocessing.get_context(
        "spawn"
    )  # a fresh interpreter: no forked torch threads or DB connections
    procs = [
        ctx.Process(target=_work_quietly, args=(job, n, s), name=f"attnrec-tune-{i}")
        for i, (n, s) in enumerate(zip(shares, seeds, strict=True))
    ]
    storage = open_storage(job.settings.storage)
    before = _finished(storage, job.settings.study)
    for p in procs:
        p.start()
    try:  # the workers' finished trials are counted from the storage every second
        while any(p.is_alive() for p in procs):
            time.sleep(1.0)
            on_trial(min(_finished(storage, job.settings.study) - before, remaining), remaining)
    finally:
        for p in procs:  # Ctrl-C or an error here: the workers' running trials are retried on resume
            if p.is_alive():
                p.terminate()
                p.join()
    bad = [f"{p.name} (exit code {p.exitcode})" for p in procs if p.exitcode != 0]
    if bad:
        raise RuntimeError(f"tuning worker(s) failed: {', '.join(bad)}; see their messages above")


def _finished(storage: RDBStorage, study: str) -> int:
    """How many trials of ``study`` have finished (complete, pruned or failed)."""
    states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return len(optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False, states=states))


def _work_quietly(job: _Job, n_trials: int, seed: int) -> None:
    """A worker process: Ctrl-C ends it with exit code 130 (its trial is marked interrupted), no traceback."""
    torch.set_num_threads(1)
    for signal in job.signals:  # a fresh interpreter knows the built-in signals only
        adopt_signal(signal)
    try:
        _work(job, n_trials, seed)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _work(job: _Job, n_trials: int, seed: int, after_trial: Callable[..., None] | None = None) -> None:
    """Run ``n_trials`` trials of the study (fewer when the deadline comes first)."""
    s = job.settings
    _optuna_logging(s.verbose)  # a spawned worker starts with Optuna's defaults
    sampler = optuna.samplers.TPESampler(seed=seed, constant_liar=s.jobs > 1)  # liar: workers spread out
    study = optuna.load_study(
        study_name=s.study,
        storage=open_storage(s.storage),
        sampler=sampler,
        pruner=job.pruner or _make_pruner(s.pruner),
    )
    timeout = max(job.deadline - time.time(), 0.0) if job.deadline else None
    if timeout == 0.0:
        return
    study.optimize(
        lambda trial: _objective(job, trial),
        n_trials=n_trials,
        timeout=timeout,
        catch=TRIAL_ERRORS,
        callbacks=[after_trial] if after_trial is not None else None,
    )


def _objective(job: _Job, trial: optuna.trial.Trial) -> float:
    """Train one sampled configuration; its best validation value, or :class:`optuna.TrialPruned`."""
    s = job.settings
    fixed = {"model": config_to_dict(job.plan.model_config), "train": config_to_dict(job.plan.train_config)}
    drawn = sample(job.plan.space, trial, fixed)
    train = {**s.train_settings, **drawn["train"], "monitor": s.metric, "mode": "max"}
    budget = _trial_budget(s.trial_budget or job.plan.train_config.time_budget, job.deadline)
    if budget:
        train["time_budget"] = budget
    if s.jobs > 1:
        train["threads"] = 1
    pruning = PruneTrial(trial, s.metric)
    try:
        rec = Recommender(s.model, {**s.model_settings, **drawn["model"]}, train, s.preset)
        rec.fit(job.data, job.split, progress=False, callbacks=(pruning, *job.callbacks))
    except KeyboardInterrupt:
        trial.set_user_attr("interrupted", True)
        raise
    except TRIAL_ERRORS as e:
        trial.set_user_attr("error", f"{type(e).__name__}: {e}")
        raise
    tr = rec.train_result_
    assert tr is not None  # a neural model's fit records its training
    for key, value in (
        ("epochs", tr.epochs),
        ("best_epoch", tr.best_epoch),
        ("seconds", round(tr.seconds, 1)),
        ("stopped", tr.stopped),
    ):
        trial.set_user_attr(key, value)
    if pruning.pruned_at is not None:
        raise optuna.TrialPruned(f"pruned after epoch {pruning.pruned_at}")
    if not np.isfinite(tr.best_value):
        raise FloatingPointError(f"no finite validation {s.metric} (got {tr.best_value})")
    model_dir = rec.save(s.out / "trials" / str(trial.number))
    trial.set_user_attr("model_dir", str(model_dir.resolve()))
    trial.set_user_attr("model_config", config_to_dict(rec.config))
    trial.set_user_attr("train_config", config_to_dict(rec.train_config))
    return float(tr.best_value)


def _trial_budget(per_trial: float, deadline: float) -> float:
    """A trial's training seconds: ``per_trial`` (0 = none), cut to what is left of the total budget."""
    if not deadline:
        return per_trial
    left = max(deadline - time.time(), 1.0)
    return min(per_trial, left) if per_trial else left


__all__ = ["PRUNERS", "PruneTrial", "SearchPlan", "TuneSettings", "open_storage", "plan_search", "tune"]
