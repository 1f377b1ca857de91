"""Choose the nightly fine-tune on the log's own past.

A shop retrains its model every night or week (``attnrec retrain``): a warm start from the served model on
the new events only (``--new-only``) or on every event, for some number of epochs, with the new items'
rows started from scratch or from the histories they followed (``--new-item-rows``). Which of these
answers the next day's events best differs from log to log, and so does what it costs. The plan answers
it on the log itself, before anything is served, the way the nightly loop would have run:

1. **Periods.** The last ``periods`` spans of ``every`` seconds that end with the log's newest event.
2. **A scratch model.** The served model's recipe (its settings, its best epoch count, every event a
   training event) fitted on the events before the first period. Its CPU is what a full retrain costs.
3. **Candidates.** From that model each candidate fine-tune is carried through the periods: at the start
   of period ``s`` it warm-starts the model of the period before on that period's events (``new``) or on
   every event so far (``all``, for a fifth of the recipe's epochs), then answers every next event of
   period ``s`` as a server would (:mod:`attnrec.experiments.replay`: the user's events before it as
   the history, a request time that is never the event's own; a user's first event and, unless
   ``keep_repeats``, an item the user already has are no cases). A period without any event trains
   nothing: the model of the period before answers on, as a nightly loop with nothing new would.
4. **Choice.** The best NDCG@10 over the answered events among the candidates whose CPU per retrain is
   at most ``cpu_share`` of the scratch fit's (ties: the cheaper; none within it: the cheapest).

Beside the candidates the same events are answered by yardsticks (:data:`REFERENCES`): the scratch model
with no retrain at all (live histories only), the ``pop`` baseline refitted at every period start and,
with ``keep_repeats``, the ``recent`` one (without repeats it ranks the items outside the history as
``pop`` does). They say what retraining is worth on the log, and whether a model is (a shop whose users
come back to what they viewed may find ``recent`` ahead of every fine-tune).

Nothing after the log's end is read, and every candidate is measured on the same events. The first
period is answered by the scratch model alone, so it trains no candidate and is not counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from attnrec.config import ConfigError, config_to_dict
from attnrec.data.filters import rebuild
from attnrec.data.frames import FrameLike, as_interactions
from attnrec.data.schema import DataError, Interactions
from attnrec.data.split import FINAL
from attnrec.experiments.replay import (
    K,
    Log,
    Plan,
    choose_within,
    model_ranks,
    replay_cases,
    summary,
    to_model,
)
from attnrec.models.batches.builders import targets_since
from attnrec.recommend import Recommender
from attnrec.recommend.warm import NEW_ITEM_ROWS

log = logging.getLogger("attnrec.retrain_plan")

SCOPES = ("new", "all")  # fine-tune on the period's events, or on every event so far
EPOCHS = (1, 2, 4, 8, 16)  # the lengths of the new-events fine-tunes compared
ALL_SHARE = 5  # an all-events fine-tune trains 1/ALL_SHARE of the recipe's epochs (at least one)
CPU_SHARE = 0.25  # a candidate's CPU per retrain at most this share of a scratch fit's
PERIODS = 4


@dataclass(frozen=True)
class FineTune:
    """One way to warm-start the nightly model (the options of ``attnrec retrain`` it stands for)."""

    scope: str  # "new": the period's events only (--new-only); "all": every event so far
    epochs: int
    rows: str  # where a new item's rows start (fit's new_item_rows)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ConfigError(f"a fine-tune's scope is one of {', '.join(SCOPES)}, not {self.scope!r}")
        if self.epochs < 1:
            raise ConfigError(f"a fine-tune trains at least one epoch, not {self.epochs}")
        if self.rows not in NEW_ITEM_ROWS:
            raise ConfigError(f"new item rows are one of {', '.join(NEW_ITEM_ROWS)}, not {self.rows!r}")

    def flags(self) -> str:
        """The options of ``attnrec retrain`` that run this fine-tune."""
        words = ["--new-only"] if self.scope == "new" else []
        words += ["--max-epochs", str(self.epochs), "--new-item-rows", self.rows]
        return " ".join(words)


@dataclass(frozen=True)
class Candidate:
    """A fine-tune and what it did over the periods: HR@10 and NDCG@10 over every answered event, the
    mean CPU seconds of one retrain."""

    fine_tune: FineTune
    hr: float
    ndcg: float
    cases: int
    cpu_per_retrain: float
    within_limit: bool


@dataclass(frozen=True)
class Reference:
    """A yardstick answering the same events as the candidates: ``no retrain`` (the scratch model answers
    every period, from live histories), ``pop`` and (repeats kept) ``recent``, those baselines refitted at
    each period start; HR@10 and NDCG@10."""

    name: str
    hr: float
    ndcg: float


REFERENCES = ("no retrain", "pop", "recent")


@dataclass(frozen=True)
class RetrainPlan:
    """The chosen fine-tune, every candidate, and how they were measured."""

    chosen: FineTune
    candidates: tuple[Candidate, ...]
    bounds: tuple[int, ...]  # period s covers [bounds[s], bounds[s + 1]) in the log's seconds
    every: int
    keep_repeats: bool
    scratch_cpu: float  # the scratch fit's CPU seconds
    cpu_limit: float  # cpu_share x scratch_cpu
    cpu_seconds: float  # what the plan itself cost: its logs, the scratch fit, every fine-tune and answer
    counts: dict[str, int]  # the replayed events, first events, repeats and cases (all periods)
    references: tuple[Reference, ...] = ()  # what the candidates are measured against
    skipped: int = 0  # candidates not measured when the time budget ran out

    def to_dict(self) -> dict[str, Any]:
        """JSON values: every field, each candidate's fine-tune inline, and the chosen retrain options."""
        record = asdict(self) | {
            "candidates": [asdict(c) for c in self.candidates],
            "references": [asdict(r) for r in self.references],
            "bounds": list(self.bounds),
        }
        return record | {"flags": self.chosen.flags()}


def candidates_of(
    recipe_epochs: int, epochs: Sequence[int] = EPOCHS, rows: Sequence[str] = NEW_ITEM_ROWS
) -> list[FineTune]:
    """Every new-events fine-tune of ``epochs`` and the all-events one (1/:data:`ALL_SHARE` of the
    recipe's ``recipe_epochs``), each with every choice of ``rows``; the new-events ones shortest first,
    then the all-events ones (about cheapest first: what a time budget measures first)."""
    if not epochs or min(epochs) < 1 or not rows:
        raise ConfigError(
            "a plan compares fine-tunes of at least one epoch each, and at least one rows choice"
        )
    every = max(1, recipe_epochs // ALL_SHARE)
    lengths = [*(("new", n) for n in sorted(set(epochs))), ("all", every)]
    return [FineTune(scope, n, r) for scope, n in lengths for r in rows]


def periods_of(times: np.ndarray, every: int, periods: int) -> Plan:
    """The last ``periods`` spans of ``every`` seconds, the last one ending just after the newest time
    (a :class:`~attnrec.experiments.replay.Plan` whose cut is the first period's start)."""
    if every < 1:
        raise ConfigError(f"a period is at least one second, not {every}")
    if periods < 2:
        raise ConfigError(f"a plan needs at least 2 periods (the first trains no candidate), not {periods}")
    end = int(times.max()) + 1
    bounds = tuple(end - (periods - k) * every for k in range(periods + 1))
    if bounds[0] <= int(times.min()):
        days = (end - int(times.min())) / 86400
        raise DataError(
            f"the log spans {days:,.1f} days: {periods} periods of {every / 86400:,.2f} days leave no events "
            "before them to train on; give a shorter period or fewer periods"
        )
    return Plan(bounds[0], every, bounds)


def plan_retrain(
    model: Recommender,
    data: Interactions | FrameLike,
    every: int,
    *,
    periods: int = PERIODS,
    epochs: Sequence[int] = EPOCHS,
    rows: Sequence[str] = NEW_ITEM_ROWS,
    cpu_share: float = CPU_SHARE,
    keep_repeats: bool = False,
    time_budget: float = 0.0,
) -> RetrainPlan:
    """Replay the last ``periods`` periods of ``every`` seconds of ``data`` (a timestamped log or a
    DataFrame of one, the log ``model`` was trained on or its newest version) with each fine-tune of
    :func:`candidates_of` (``epochs`` and ``rows``), and choose among them (see the module docstring).

    ``time_budget`` (wall seconds, 0: none): no candidate starts once it is spent, and the choice is made
    among those measured (``RetrainPlan.skipped`` counts the others); the scratch fit and the first
    candidate always run."""
    started, wall = time.process_time(), time.monotonic()
    recipe = _recipe(model)
    if not 0 < cpu_share <= 1:
        raise ConfigError(f"cpu_share is a share of a scratch fit's CPU, in (0, 1], not {cpu_share}")
    if not time_budget >= 0:
        raise ConfigError(f"time_budget is seconds, at least 0, not {time_budget}")
    replay = _Periods(as_interactions(data), every, periods, keep_repeats)
    scratch_start = time.process_time()
    scratch = _scratch(model, recipe).fit(replay.logs[0], FINAL, progress=False)
    scratch_cpu = time.process_time() - scratch_start
    log.info("scratch fit on %s events: %.1f CPU seconds", f"{len(replay.logs[0]):,}", scratch_cpu)
    limit = cpu_share * scratch_cpu
    references = [Reference("no retrain", *replay.answered([scratch] * len(replay.cases)))]
    for name in REFERENCES[1:] if keep_repeats else REFERENCES[1:2]:
        refitted = [Recommender(name).fit(replay.logs[s], FINAL, progress=False) for s in replay.cases]
        references.append(Reference(name, *replay.answered(refitted)))
    measured: list[Candidate] = []
    grid = candidates_of(recipe["max_epochs"], epochs, rows)
    if targets_since(getattr(model.core, "builder", None), 0) is None:  # no next-item targets to limit
        log.warning("%s trains on no next-item targets: only all-events fine-tunes are compared", model.name)
        grid = [c for c in grid if c.scope == "all"]
    for fine_tune in grid:
        if measured and time_budget and time.monotonic() - wall > time_budget:
            log.warning("time budget spent: %d of %d fine-tunes measured", len(measured), len(grid))
            break
        models, cpu = replay.carried(scratch, model.name, fine_tune)
        hr, ndcg = replay.answered(models)
        per_retrain = float(np.mean(cpu)) if cpu else 0.0
        measured.append(Candidate(fine_tune, hr, ndcg, replay.n_cases, per_retrain, per_retrain <= limit))
        log.info("%s: NDCG@%d %.4f, %.1f CPU seconds a retrain", fine_tune.flags(), K, ndcg, per_retrain)
    best = choose_within([c.ndcg for c in measured], [c.cpu_per_retrain for c in measured], limit)
    return RetrainPlan(
        measured[best].fine_tune,
        tuple(measured),
        replay.plan.bounds,
        every,
        keep_repeats,
        scratch_cpu,
        limit,
        time.process_time() - started,
        replay.counts,
        tuple(references),
        len(grid) - len(measured),
    )


class _Periods:
    """A log cut into a plan's periods: the training log before each, the cases each later period answers,
    which periods are quiet; how models carried through them answer."""

    def __init__(self, data: Interactions, every: int, periods: int, keep_repeats: bool) -> None:
        if data.timestamp is None:
            raise DataError("the log has no timestamps: a plan replays its last periods by time")
        self.replayed = Log.of(data)
        self.plan = periods_of(self.replayed.time, every, periods)
        cases = replay_cases(self.replayed, self.plan, keep_repeats=keep_repeats)
        if not (cases.step > 0).any():
            raise DataError(
                f"no event to answer in the last {periods - 1} periods (a user's first event and repeats "
                "are no cases): give a longer period or more periods"
            )
        self.counts = cases.counts
        self.cases = {s: cases.take(cases.step == s) for s in range(1, self.plan.n_steps)}  # period 0: none
        self.n_cases = sum(len(c.pos) for c in self.cases.values())
        self.external = np.asarray(data.items.external, dtype=object)
        self.logs = [rebuild(data, data.timestamp < bound) for bound in self.plan.bounds[:-1]]
        of_event = np.searchsorted(self.plan.bounds, data.timestamp, side="right") - 1  # -1: before them
        self.quiet = [not (of_event == p).any() for p in range(self.plan.n_steps)]  # periods without events

    def answered(self, models: Sequence[Recommender]) -> tuple[float, float]:
        """HR@K and NDCG@K over the cases of periods 1.. answered by ``models`` (one a period)."""
        hits = gain = 0.0
        maps: dict[int, np.ndarray] = {}  # one model often answers several periods (no retrain, quiet ones)
        for cases, rec in zip(self.cases.values(), models, strict=True):
            g2m = maps.get(id(rec))
            if g2m is None:
                g2m = maps[id(rec)] = to_model(rec, self.external)
            figures = summary(model_ranks(rec, self.replayed, cases, "live", g2m))
            hits, gain = hits + figures["hits"], gain + figures["ndcg"]
        return hits / self.n_cases, gain / self.n_cases

    def carried(
        self, scratch: Recommender, name: str, fine_tune: FineTune
    ) -> tuple[list[Recommender], list[float]]:
        """The model answering each period 1.. when ``fine_tune`` warm-starts the one before at every period
        start, and the CPU seconds of each retrain (a period with nothing new leaves the nightly loop
        nothing to retrain on)."""
        previous, models, cpu = scratch, [], []
        for s in self.cases:
            if not self.quiet[s - 1]:
                start = time.process_time()
                previous = _fine_tuned(name, fine_tune, previous, self.logs[s], self.plan.bounds[s - 1])
                cpu.append(time.process_time() - start)
            models.append(previous)
        return models, cpu


def _recipe(model: Recommender) -> dict[str, Any]:
    """The training settings of ``model`` with its best epoch count as ``max_epochs`` (a fit on every event
    then trains as long as the model's validation chose)."""
    result = model.train_result_
    if model.spec.kind != "torch" or result is None or not result.epochs:
        raise ConfigError(
            f"{model.name}: a plan compares fine-tunes of a trained model, and this one has none"
        )
    return config_to_dict(model.train_config) | {"max_epochs": max(1, result.best_epoch or result.epochs)}


def _scratch(model: Recommender, recipe: dict[str, Any]) -> Recommender:
    """A new model of ``model``'s settings and training recipe (no validation, no early stop)."""
    return Recommender(model.name, config=config_to_dict(model.config), train=recipe, auto=False)


def _fine_tuned(
    name: str, fine_tune: FineTune, previous: Recommender, data: Interactions, period_start: int
) -> Recommender:
    """``previous`` warm-started on ``data`` as ``fine_tune`` says (``new``: the events from
    ``period_start`` on train, the history before them is their input)."""
    since = float(period_start) if fine_tune.scope == "new" else None
    warm = Recommender(name, train={"max_epochs": fine_tune.epochs}, auto=False)
    return warm.fit(
        data, FINAL, init_from=previous, progress=False, new_since=since, new_item_rows=fine_tune.rows
    )


__all__ = [
    "ALL_SHARE",
    "CPU_SHARE",
    "EPOCHS",
    "PERIODS",
    "SCOPES",
    "Candidate",
    "REFERENCES",
    "Reference",
    "FineTune",
    "RetrainPlan",
    "candidates_of",
    "periods_of",
    "plan_retrain",
]
