"""Choosing the nightly fine-tune on the log's own last periods (attnrec.experiments.retrain_plan): the
periods, the candidates, that no fit reads an event of the period it is asked about, the choice within
the CPU limit, the retrain options it stands for, and bad input in one line (the command:
tests/cli/test_plan_retrain.py)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from attnrec.config import ConfigError
from attnrec.data.schema import DataError, Interactions
from attnrec.data.split import FINAL
from attnrec.experiments import retrain_plan
from attnrec.experiments.retrain_plan import FineTune, candidates_of, periods_of, plan_retrain
from attnrec.recommend import Recommender
from synthetic_logs import daily_cycle_frame

DAY = 86400
TINY = {"hidden": 8, "n_layers": 1, "n_heads": 1, "max_len": 10}
FAST = {"max_epochs": 5, "batch_size": 64, "seed": 1, "threads": 1}


@pytest.fixture(scope="module")
def log() -> Interactions:
    return Interactions.from_frame(daily_cycle_frame())


@pytest.fixture(scope="module")
def model(log: Interactions) -> Recommender:
    return Recommender("sasrec", TINY, FAST, auto=False).fit(log, FINAL, progress=False)


def test_the_periods_end_just_after_the_newest_event() -> None:
    times = np.array([0, 5 * DAY, 10 * DAY + 7])
    plan = periods_of(times, DAY, 3)
    assert plan.bounds[-1] == 10 * DAY + 8 and plan.bounds == tuple(
        plan.bounds[-1] - k * DAY for k in (3, 2, 1, 0)
    )
    assert plan.cut == plan.bounds[0] and plan.step == DAY
    with pytest.raises(DataError, match="leave no events before them to train on"):
        periods_of(times, 4 * DAY, 3)
    with pytest.raises(ConfigError, match="at least 2 periods"):
        periods_of(times, DAY, 1)
    with pytest.raises(ConfigError, match="at least one second"):
        periods_of(times, 0, 3)


def test_the_candidates_are_every_length_and_rows_choice_and_an_all_events_one() -> None:
    grid = candidates_of(12, epochs=(4, 1, 4), rows=("initial", "histories"))
    assert [(f.scope, f.epochs, f.rows) for f in grid] == [  # about cheapest first, each length once
        ("new", 1, "initial"),
        ("new", 1, "histories"),
        ("new", 4, "initial"),
        ("new", 4, "histories"),
        ("all", 12 // retrain_plan.ALL_SHARE, "initial"),
        ("all", 12 // retrain_plan.ALL_SHARE, "histories"),
    ]
    assert candidates_of(3, epochs=(1,), rows=("initial",))[-1].epochs == 1  # at least one epoch
    with pytest.raises(ConfigError, match="at least one epoch"):
        candidates_of(3, epochs=(0,))


def test_a_fine_tune_says_the_retrain_options_that_run_it() -> None:
    assert FineTune("new", 8, "initial").flags() == "--new-only --max-epochs 8 --new-item-rows initial"
    assert FineTune("all", 3, "histories").flags() == "--max-epochs 3 --new-item-rows histories"
    for bad, message in [
        ({"scope": "some"}, "scope is one of new, all"),
        ({"epochs": 0}, "at least one epoch"),
        ({"rows": "random"}, "new item rows are one of initial, histories"),
    ]:
        with pytest.raises(ConfigError, match=message):
            FineTune(**({"scope": "new", "epochs": 1, "rows": "initial"} | bad))


def test_no_fit_reads_an_event_of_the_period_it_answers(
    log: Interactions, model: Recommender, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scratch model learns from the events before the first period only; the fine-tune (and the
    refitted baseline) that answers period s, from the events before period s only."""
    seen: list[tuple[str, float, float | None]] = []
    fit = Recommender.fit

    def spy(self: Recommender, data: Any, *args: Any, **kwargs: Any) -> Recommender:
        seen.append((self.name, float(data.timestamp.max()), kwargs.get("new_since")))
        return fit(self, data, *args, **kwargs)

    monkeypatch.setattr(Recommender, "fit", spy)
    plan = plan_retrain(model, log, 2 * DAY, periods=3, epochs=(1,), rows=("initial",))
    bounds = plan.bounds
    assert seen[0][0] == "sasrec" and seen[0][1] < bounds[0] and seen[0][2] is None  # the scratch fit
    pop, new, every = seen[1:3], seen[3:5], seen[5:7]  # pop refitted, new events, all events: periods 1, 2
    assert [name for name, _, _ in pop] == ["pop", "pop"]
    for fits in (pop, new, every):
        assert [t < bounds[s] for s, (_, t, _) in zip((1, 2), fits, strict=True)] == [True, True]
    assert [since for _, _, since in new] == [bounds[0], bounds[1]]  # the period before's events train
    assert [since for _, _, since in every] == [None, None] and len(seen) == 7


def test_every_candidate_answers_the_same_events_and_the_choice_is_within_the_limit(
    model: Recommender,
) -> None:
    frame = daily_cycle_frame()  # the log as a DataFrame: read as fit reads one
    plan = plan_retrain(model, frame, 2 * DAY, periods=3, epochs=(1, 2), rows=("initial",), cpu_share=1.0)
    assert [c.fine_tune for c in plan.candidates] == candidates_of(5, (1, 2), ("initial",))
    assert len({c.cases for c in plan.candidates}) == 1 and plan.candidates[0].cases > 0
    within = [c for c in plan.candidates if c.within_limit]
    best = max(within, key=lambda c: (c.ndcg, -c.cpu_per_retrain))
    assert plan.chosen == best.fine_tune
    assert plan.cpu_limit == pytest.approx(plan.scratch_cpu) and plan.cpu_seconds >= plan.scratch_cpu
    record = plan.to_dict()
    assert record["flags"] == plan.chosen.flags() and json.loads(json.dumps(record)) == record
    # the yardsticks answered the same events: no retrain at all, and pop (recent only with repeats kept,
    # where it differs from pop)
    assert [r.name for r in plan.references] == ["no retrain", "pop"]
    assert all(0 <= r.ndcg <= r.hr <= 1 for r in plan.references)


def test_with_repeats_kept_recent_is_a_yardstick_too(model: Recommender) -> None:
    plan = plan_retrain(
        model, daily_cycle_frame(), 2 * DAY, periods=3, epochs=(1,), rows=("initial",), keep_repeats=True
    )
    assert [r.name for r in plan.references] == list(retrain_plan.REFERENCES)
    assert plan.counts["repeat"] == 0 and plan.keep_repeats  # a cycle log has no repeats to answer


def test_bad_input_is_one_line(log: Interactions, model: Recommender) -> None:
    with pytest.raises(DataError, match="the log has no timestamps"):
        plan_retrain(model, daily_cycle_frame().drop(columns="timestamp"), DAY)
    with pytest.raises(ConfigError, match="cpu_share is a share"):
        plan_retrain(model, log, DAY, cpu_share=0.0)
    pop = Recommender("pop").fit(log, progress=False)
    with pytest.raises(ConfigError, match="pop: a plan compares fine-tunes of a trained model"):
        plan_retrain(pop, log, DAY)


def test_a_period_without_events_trains_nothing(model: Recommender, monkeypatch: pytest.MonkeyPatch) -> None:
    """A quiet period (a shop closed for a day) leaves the model of the period before answering on, as a
    nightly loop with nothing new does; it once stopped the plan with "no event at or after" it."""
    frame = daily_cycle_frame()
    bounds = periods_of(frame["timestamp"].to_numpy(), 2 * DAY, 3).bounds
    quiet = frame[(frame["timestamp"] < bounds[0]) | (frame["timestamp"] >= bounds[1])]
    fits: list[float | None] = []
    fit = Recommender.fit

    def spy(self: Recommender, data: Any, *args: Any, **kwargs: Any) -> Recommender:
        if self.name == model.name:  # the pop yardstick is refitted at every period, quiet or not
            fits.append(kwargs.get("new_since"))
        return fit(self, data, *args, **kwargs)

    monkeypatch.setattr(Recommender, "fit", spy)
    plan = plan_retrain(model, quiet, 2 * DAY, periods=3, epochs=(1,), rows=("initial",))
    # the scratch fit, then per candidate the fine-tune of period 2 only (period 0 had no event)
    assert fits == [None, float(bounds[1]), None]
    assert all(c.cases > 0 for c in plan.candidates)


def test_a_spent_time_budget_starts_no_more_fine_tunes(model: Recommender) -> None:
    """On a large log the plan must end when asked: the candidates measured by then are chosen among, the
    others counted as skipped; the first is always measured."""
    plan = plan_retrain(
        model, daily_cycle_frame(), 2 * DAY, periods=3, epochs=(1, 2), rows=("initial",), time_budget=1e-9
    )
    assert len(plan.candidates) == 1 and plan.skipped == 2
    assert plan.chosen == plan.candidates[0].fine_tune == FineTune("new", 1, "initial")
    with pytest.raises(ConfigError, match="time_budget is seconds, at least 0"):
        plan_retrain(model, daily_cycle_frame(), DAY, time_budget=-1)


def test_a_model_without_next_item_targets_is_planned_on_all_events_only() -> None:
    """BPR-MF trains on (user, item) pairs: a new-events fine-tune of it is refused, and the plan once
    stopped there after its scratch fit; it now compares the all-events fine-tunes only."""
    frame = daily_cycle_frame()
    bprmf = Recommender("bprmf", {"dim": 8}, {"max_epochs": 2, "threads": 1}, auto=False).fit(frame, FINAL)
    plan = plan_retrain(bprmf, frame, 2 * DAY, periods=3, epochs=(1, 2))
    assert {c.fine_tune.scope for c in plan.candidates} == {"all"} and len(plan.candidates) == 2
