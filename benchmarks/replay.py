"""Between retrains: replay a timestamped log after a cut, answering each next event as a server would.

    # one core, resumable: a rerun skips every unit its state directory holds
    taskset -c 0 python benchmarks/replay.py --state-dir ../replay-state --time-budget 6000
    python benchmarks/replay.py --state-dir ../replay-state --render   # rewrite replay.{json,md} only
    # your own timestamped log (any file attnrec reads), with the fine-tune length chosen on it
    python benchmarks/replay.py --state-dir ../mine --data shop=log.parquet --warm-mode new-dev --out mine

Writes ``benchmarks/results/replay.json`` and a generated ``replay.md`` (the narrative is
``replay-notes.md``, written by hand).

Protocol, per log:

* **Cut.** The log is cut at the 80% quantile of its timestamps: the model is trained on every event
  before the cut, the events at or after it (about 20%) are replayed.
* **Steps.** The replayed span is divided into steps of one length, the shortest of 6 hours, 12 hours,
  a day, a week, two weeks, 30, 91, 182 or 365 days that gives at most :data:`MAX_STEPS` steps (a day
  or a week on a dense log; a sparse log spread over years gets half-year steps, so about 4-6 steps).
* **Cases.** Every replayed event of a user is a case, answered by the model of its step with the
  information a server has at that moment: the history is the user's events before it (live) or the
  user's events before the cut (frozen), and the request time is the time of the user's previous event,
  or the step's start when that is later and before the target; never the target's own timestamp. A
  user's first event ever (no history to answer from) and an event whose item the user already has (a
  repeat, which seen-item exclusion removes from every answer) are not cases; their shares are reported.
  With ``--repeats keep`` (for shop logs, where users come back to what they viewed) a repeat is a case
  and no answer excludes the history: every strategy ranks every item it knows.
* **Answer.** Full ranking over the items the answering model knows (for popularity: every item seen
  before the request), the items of the history used for the answer excluded. Ties count against the
  model. A target the answering model does not know is a miss (its share is reported). A history with
  no known item is answered with the model's training popularity.
* **Strategies.** (a) ``frozen-frozen``: the model trained at the cut, histories as at the cut (the
  server before live histories); (b) ``frozen-live``: the same model, live histories; (c)
  ``warm-live``: at every later step start the previous step's model is warm-started, live histories.
  ``--warm-mode new`` (the default) fine-tunes it on the previous step's events only
  (``fit(..., "none", init_from=previous, new_since=previous step start)``: the users with an event in
  that step train on it, their earlier history as the input) for ``--warm-epochs`` epochs (default 1:
  one pass over the new events, as an online update makes; the same number on every log and step);
  ``--warm-mode all`` trains it on all events so far for ``1/--warm-share`` of the epochs the initial
  model chose. ``--warm-mode new-validated`` chooses the number of epochs per step: a first fine-tune
  on the previous step's events (``fit(..., "leave-one-out", init_from=previous, new_since=...)``)
  holds out the last event of each user with an event in that step, validates on those users only and
  stops early (at most :data:`VALIDATED_MAX_EPOCHS` epochs, the library's default patience); a second
  fine-tune from the same previous model then trains its best epoch count on all of the step's events,
  the held-out ones included (``split "none"``), and is the step's model. Its CPU counts both fits.
  ``--warm-mode plan`` fine-tunes as ``attnrec plan-retrain`` chooses once per log on the events before
  the cut (:func:`attnrec.experiments.retrain_plan.plan_retrain` with the initial model, its
  :data:`DEV_STEPS` periods of the step length, fine-tunes of :data:`DEV_EPOCHS` epochs on the new
  events or a fifth of the initial model's on all events, each with the new item rows of
  :data:`DEV_ROWS`, within :data:`DEV_CPU_SHARE` of a scratch fit's CPU): it never reads an event after
  the cut. The plan's own CPU is reported beside the figures, not in (c)'s retraining CPU: it is spent
  once, not at every step. (Records of ``new-dev``, this script's own earlier development replay, still
  render.)
  (d) ``scratch-live``: at every later step start a new model is trained from scratch on all
  events so far (final fit, the initial model's training settings and as many epochs as it chose; with
  ``--scratch-recipe defaults`` the library's default training settings instead, e.g. batch size 128
  where the initial model had 32), live histories; ``pop-window``: the most frequent items of the step
  length before the request; ``recent``: the library's ``recent`` baseline refitted at every step start,
  live histories (with the history excluded it ranks the other items by their count up to the step
  start).
* **Model.** SASRec with the settings the library chooses from the training log (``auto``), trained
  with leave-one-out validation and early stopping under a time budget; one torch thread.
* **Figures.** HR@10 and NDCG@10 per step and over all cases (mean over cases), and the training CPU
  seconds (``time.process_time``) of each strategy: the initial model is shared by all of them;
  retraining CPU is the sum over the later steps.

Every (log, strategy, step) unit is a JSON file in the state directory, written when done and
skipped when present; models are saved there too, so a cut-off run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnrec.experiments.replay import (
    Cases,
    Log,
    Plan,
    model_ranks,
    replay_cases,
    summary,
    to_model,
)
from provenance import ROOT, git_sha  # benchmarks/provenance.py, beside this script

SHARED = next(
    (p for p in (ROOT.parent / "shared" / "data", Path("/work/shared/data")) if p.exists()),
    ROOT.parent / "shared" / "data",
)
RESULTS = ROOT / "benchmarks" / "results"
FILES = {  # smallest first
    "ml-100k": "ml-100k/u.data",
    "ml-latest-small": "ml-latest-small/ratings.csv.gz",
    "movietweetings-100k": "movietweetings-100k/ratings.dat.gz",
    "taobao-sample": "taobao-sample/UserBehavior_head_814users.csv.gz",
    "ciao": "ciao/ratings.csv.gz",
}
CUT_QUANTILE = 0.8
MAX_STEPS = 6
HOUR, DAY = 3600, 86400
STEP_CHOICES = (6 * HOUR, 12 * HOUR, DAY, 7 * DAY, 14 * DAY, 30 * DAY, 91 * DAY, 182 * DAY, 365 * DAY)
WARM_SHARE = 5  # --warm-mode all trains 1/WARM_SHARE of the initial model's epochs (at least one)
WARM_MODES = ("new", "all", "new-validated", "plan")
WARM_EPOCHS = 1  # --warm-mode new: passes over the new events per fine-tune
VALIDATED_MAX_EPOCHS = 20  # --warm-mode new-validated: the most epochs its validated fine-tune may train
DEV_STEPS = 4  # --warm-mode plan: periods replayed before the cut
DEV_EPOCHS = (1, 2, 4, 8, 16)  # --warm-mode plan: the new-events fine-tune lengths it compares
DEV_ROWS = ("initial", "histories")  # --warm-mode plan: where new items' rows start (fit's new_item_rows)
DEV_CPU_SHARE = 0.25  # --warm-mode plan: a candidate's CPU per retrain at most this share of a scratch fit's
SCRATCH_RECIPES = ("initial", "defaults")
COPIED = ("step", "cases", "unknown_targets", "hits", "ndcg", "model", "histories")
STRATEGIES = ("frozen-frozen", "frozen-live", "warm-live", "scratch-live", "pop-window", "recent")
LABELS = {
    "frozen-frozen": "(a) frozen model, frozen histories",
    "frozen-live": "(b) frozen model, live histories",
    "warm-live": "(c) warm-start retrain per step, live",
    "scratch-live": "(d) scratch retrain per step, live",
    "pop-window": "popularity of the last step length",
    "recent": "`recent` baseline, live",
}


# -- the replay mechanics --------------------------------------------------------------------------
def plan_steps(times: np.ndarray, quantile: float = CUT_QUANTILE, max_steps: int = MAX_STEPS) -> Plan:
    """The cut at the ``quantile`` of ``times`` and the shortest step of :data:`STEP_CHOICES` that divides
    the rest into at most ``max_steps`` steps."""
    cut = int(np.quantile(times, quantile, method="higher"))
    span = int(times.max()) - cut + 1
    step = next((s for s in STEP_CHOICES if math.ceil(span / s) <= max_steps), STEP_CHOICES[-1])
    n = math.ceil(span / step)
    return Plan(cut, step, tuple(cut + k * step for k in range(n + 1)))


def window_popularity_ranks(log: Log, cases: Cases, window: int) -> np.ndarray:
    """Ranks of each case's target among the items seen before its request, scored by their count in
    ``[request - window, request)``; history excluded (unless the cases keep repeats), ties against the
    target, unseen targets -1."""
    order = np.argsort(log.time, kind="stable")
    times, items = log.time[order], log.item[order]
    counts = np.zeros(log.n_items + 1, dtype=np.int64)
    known = np.zeros(log.n_items + 1, dtype=bool)
    ranks = np.full(len(cases.pos), -1, dtype=np.int64)
    added = removed = 0
    for c in np.argsort(cases.request_time, kind="stable"):
        t = cases.request_time[c]
        while added < len(times) and times[added] < t:
            counts[items[added]] += 1
            known[items[added]] = True
            added += 1
        while removed < added and times[removed] < t - window:
            counts[items[removed]] -= 1
            removed += 1
        target = cases.target[c]
        if not known[target]:
            continue
        own = counts[target]
        above = int(np.count_nonzero(known & (counts >= own))) - 1
        if cases.exclude_seen:
            history = np.unique(cases.live(log, c))
            above -= int(np.count_nonzero(known[history] & (counts[history] >= own)))
        ranks[c] = above
    return ranks


# -- running it ------------------------------------------------------------------------------------
class OutOfTime(Exception):
    """The run's time budget is spent; a rerun resumes."""


class Runner:
    def __init__(self, name: str, path: str, state: Path, deadline: float, args: argparse.Namespace) -> None:
        from attnrec.cli._common import load_data

        self.name, self.dir, self.budget, self.deadline = name, state / name, args.budget, deadline
        self.warm_share, self.warm_mode, self.warm_epochs = args.warm_share, args.warm_mode, args.warm_epochs
        self.scratch_recipe, self.seed = args.scratch_recipe, args.seed
        self.new_item_rows = args.new_item_rows
        self.data = load_data(path)
        if self.data.timestamp is None:
            raise SystemExit(f"{path}: the log has no timestamps; a replay cuts it by time")
        self.log = Log.of(self.data)
        self.plan = plan_steps(self.log.time)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cases = replay_cases(self.log, self.plan, keep_repeats=args.repeats == "keep")
        self.chosen: dict[str, Any] | None = None  # --warm-mode plan: the fine-tune the plan chose
        self.external = np.asarray(self.data.items.external, dtype=object)

    def unit(self, key: str, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        path = self.dir / f"{key}.json"
        if path.exists():
            return dict(json.loads(path.read_text()))
        if time.monotonic() > self.deadline:
            raise OutOfTime(key)
        record = make()
        record |= {"log": self.name, "unit": key, "git_sha": git_sha(), "finished": _now()}
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(
            f"{self.name} {key}: " + ", ".join(f"{k} {v}" for k, v in record.items() if _short(v)), flush=True
        )
        return record

    def before(self, bound: int) -> Any:
        """The log's events before ``bound``, as a fit reads them (fresh contiguous IDs)."""
        from attnrec.data.filters import rebuild

        assert self.data.timestamp is not None
        return rebuild(self.data, self.data.timestamp < bound)

    def train(
        self,
        key: str,
        bound: int,
        kind: str,
        previous: Path | None = None,
        since: int | None = None,
        epochs: int | None = None,
        scope: str | None = None,
        rows: str | None = None,
    ) -> dict[str, Any]:
        from attnrec.config import config_to_dict
        from attnrec.recommend import Recommender

        def make() -> dict[str, Any]:
            data = self.before(bound)
            validated, probe_cpu = None, 0.0
            cpu = time.process_time()
            wall = time.perf_counter()
            if kind == "initial":
                train = {"threads": 1, "time_budget": self.budget, "seed": self.seed}
                rec = Recommender("sasrec", train=train, auto=True)
                rec.fit(data, "leave-one-out", progress=False)
            else:
                initial = json.loads((self.dir / "initial.json").read_text())
                chosen = max(1, int(initial["epochs_chosen"]))

                def fine_tune(split: str, n: int, new_since: int | None) -> Any:
                    out = Recommender("sasrec", train={"threads": 1, "max_epochs": n}, auto=False)
                    new_rows = rows or self.new_item_rows
                    out.fit(
                        data,
                        split,
                        init_from=previous,
                        progress=False,
                        new_since=new_since,
                        new_item_rows=new_rows,
                    )
                    return out

                if kind == "warm" and self.warm_mode == "new-validated":
                    # the number of epochs validated on the new users' last events, then the final fit
                    probe = fine_tune("leave-one-out", VALIDATED_MAX_EPOCHS, since)
                    assert probe.train_result_ is not None
                    validated, probe_cpu = probe.train_result_, time.process_time() - cpu
                    rec = fine_tune("none", max(1, validated.best_epoch), since)
                elif kind == "warm":
                    every = (scope or ("all" if self.warm_mode == "all" else "new")) == "all"
                    n = max(1, chosen // self.warm_share) if every else epochs or self.warm_epochs
                    rec = fine_tune("none", n, None if every else since)
                else:
                    base = Recommender.load(self.dir / "models" / "initial", device="cpu")
                    train = {
                        "threads": 1,
                        "max_epochs": chosen,
                        "time_budget": self.budget,
                        "seed": self.seed,
                    }
                    if self.scratch_recipe == "initial":  # the initial model's batch size, rate, ...
                        train = config_to_dict(base.train_config) | train
                    rec = Recommender("sasrec", config=base.config, train=train, auto=False)
                    rec.fit(data, "none", progress=False)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            rec.save(self.dir / "models" / key)
            tr = rec.train_result_
            assert tr is not None
            record: dict[str, Any] = {}
            if validated is not None:
                record["validation"] = {
                    "epochs": validated.epochs,
                    "best_epoch": validated.best_epoch,
                    "best_value": validated.best_value,
                    "stopped": validated.stopped,
                    "cases": self.validated_users(bound, since),
                    "cpu_seconds": round(probe_cpu, 2),
                }
            return record | {
                "kind": kind,
                "warm_mode": self.warm_mode if kind == "warm" else None,
                "new_since": since if kind == "warm" and self.warm_mode != "all" and scope != "all" else None,
                **({"new_item_rows": rows or self.new_item_rows} if kind == "warm" else {}),
                "batch_size": rec.train_config.batch_size,
                "train_events": len(data),
                "train_items": data.n_items,
                "cpu_seconds": round(cpu, 2),
                "wall_seconds": round(wall, 2),
                "epochs": tr.epochs,
                "best_epoch": tr.best_epoch,
                "epochs_chosen": tr.best_epoch or tr.epochs,
                "stopped": tr.stopped,
                "settings": {
                    k: v
                    for k, v in vars(rec.config).items()
                    if k in ("hidden", "n_layers", "max_len", "loss", "dropout", "n_negatives")
                },
            }

        return self.unit(key, make)

    def validated_users(self, bound: int, since: int | None) -> int:
        """How many users the validated fine-tune validates: those with an event before ``bound`` whose
        last one is at or after ``since``."""
        before = self.log.time < bound
        users, times = self.log.user[before], self.log.time[before]
        size = np.bincount(users, minlength=self.data.n_users)
        last = np.full(self.data.n_users, np.iinfo(np.int64).min)
        np.maximum.at(last, users, times)
        return int(((last >= (since or 0)) & (size >= 2)).sum())

    def evaluate(
        self, key: str, step: int, rank: Callable[[Cases], np.ndarray], extra: dict[str, Any]
    ) -> dict[str, Any]:
        def make() -> dict[str, Any]:
            cases = self.cases.take(self.cases.step == step)
            cpu = time.process_time()
            ranks = rank(cases)
            return {
                "step": step,
                "cases": len(cases.pos),
                "unknown_targets": int((ranks < 0).sum()),
                **summary(ranks),
                "eval_cpu_seconds": round(time.process_time() - cpu, 2),
                **extra,
            }

        return self.unit(key, make)

    def model_eval(
        self, key: str, step: int, model: str, histories: str, extra: dict[str, Any]
    ) -> dict[str, Any]:
        from attnrec.recommend import Recommender

        def rank(cases: Cases) -> np.ndarray:
            rec = Recommender.load(self.dir / "models" / model, device="cpu")
            return model_ranks(rec, self.log, cases, histories, to_model(rec, self.external))

        return self.evaluate(key, step, rank, extra | {"model": model, "histories": histories})

    def plan_choice(self) -> dict[str, Any]:
        """``--warm-mode plan``: the fine-tune ``attnrec plan-retrain`` chooses with the initial model on the
        events before the cut; its unit holds the whole plan."""
        from attnrec.experiments.retrain_plan import plan_retrain
        from attnrec.recommend import Recommender

        def make() -> dict[str, Any]:
            initial = Recommender.load(self.dir / "models" / "initial", device="cpu")
            chosen = plan_retrain(
                initial,
                self.before(self.plan.cut),
                self.plan.step,
                periods=DEV_STEPS,
                epochs=DEV_EPOCHS,
                rows=DEV_ROWS,
                cpu_share=DEV_CPU_SHARE,
                keep_repeats=not self.cases.exclude_seen,
            )
            fine_tune = chosen.chosen
            return {"scope": fine_tune.scope, "epochs": fine_tune.epochs, "rows": fine_tune.rows} | {
                "plan": chosen.to_dict()
            }

        return self.unit("plan-choice", make)

    def run(self) -> None:
        from attnrec.recommend import Recommender

        plan = self.plan
        self.unit(
            "plan",
            lambda: {
                "cut": plan.cut,
                "step_seconds": plan.step,
                "bounds": list(plan.bounds),
                "events": len(self.log.user),
                "users": self.data.n_users,
                "items": self.data.n_items,
                "replay": self.cases.counts,
                **({"repeats": "keep"} if not self.cases.exclude_seen else {}),
                "sha256": self.data.source.sha256,
            },
        )
        self.train("initial", plan.cut, "initial")
        if self.warm_mode == "plan":
            self.chosen = self.plan_choice()
        for s in range(plan.n_steps):
            self.model_eval(f"frozen-frozen-{s}", s, "initial", "frozen", {})
            self.model_eval(f"frozen-live-{s}", s, "initial", "live", {})
            self.evaluate(
                f"pop-window-{s}",
                s,
                lambda cases: window_popularity_ranks(self.log, cases, plan.step),
                {"window_seconds": plan.step},
            )

            def recent(cases: Cases, bound: int = plan.bounds[s]) -> np.ndarray:
                rec = Recommender("recent").fit(self.before(bound), "none", progress=False)
                return model_ranks(rec, self.log, cases, "live", to_model(rec, self.external))

            self.evaluate(f"recent-{s}", s, recent, {})
            for strategy, kind in (("warm-live", "warm"), ("scratch-live", "scratch")):
                if s == 0:  # the first step's model is the initial one: the same answers as (b)
                    same = self.unit("frozen-live-0", dict)
                    copied = {k: same[k] for k in COPIED} | {"train_cpu_seconds": 0.0}
                    self.unit(f"{strategy}-0", copied.copy)
                    continue
                model = f"{kind}-{s}"
                previous = self.dir / "models" / ("initial" if s == 1 else f"{kind}-{s - 1}")
                fine_tune = self.chosen or {}
                trained = self.train(
                    model,
                    plan.bounds[s],
                    kind,
                    previous,
                    plan.bounds[s - 1],
                    fine_tune.get("epochs"),
                    fine_tune.get("scope"),
                    fine_tune.get("rows"),
                )
                self.model_eval(
                    f"{strategy}-{s}",
                    s,
                    model,
                    "live",
                    {"train_cpu_seconds": trained["cpu_seconds"], "epochs": trained["epochs"]},
                )


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def _short(v: object) -> bool:
    return isinstance(v, int | float | str) and len(str(v)) < 40


# -- results ---------------------------------------------------------------------------------------
def collect(state: Path) -> dict[str, Any]:
    """The record of every log the state directory holds: plan, trainings, units, overall figures and
    the targets (judged only when every unit of the log is done)."""
    logs: dict[str, Any] = {}
    own = (
        sorted(p.name for p in state.iterdir() if p.is_dir() and p.name not in FILES)
        if state.is_dir()
        else []
    )
    for name in [*FILES, *own]:
        folder = state / name
        if not (folder / "plan.json").exists():
            continue
        units = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
        plan = units.pop("plan")
        n_steps = len(plan["bounds"]) - 1
        trainings = {k: units.pop(k) for k in list(units) if "kind" in units[k]}
        overall: dict[str, Any] = {}
        for strategy in STRATEGIES:
            done = [units[f"{strategy}-{s}"] for s in range(n_steps) if f"{strategy}-{s}" in units]
            cases = sum(u["cases"] for u in done)
            overall[strategy] = {
                "steps_done": len(done),
                "cases": cases,
                "HR@10": sum(u["hits"] for u in done) / cases if cases else None,
                "NDCG@10": sum(u["ndcg"] for u in done) / cases if cases else None,
                "unknown_share": sum(u["unknown_targets"] for u in done) / cases if cases else None,
                "retrain_cpu_seconds": sum(u.get("train_cpu_seconds", 0.0) for u in done),
                "per_step": [
                    {
                        "step": u["step"],
                        "cases": u["cases"],
                        "HR@10": u["hits"] / u["cases"] if u["cases"] else None,
                        "NDCG@10": u["ndcg"] / u["cases"] if u["cases"] else None,
                    }
                    for u in done
                ],
            }
        complete = all(o["steps_done"] == n_steps for o in overall.values())
        choice, planned = folder / "dev" / "choice.json", folder / "plan-choice.json"
        logs[name] = {
            "plan": plan,
            "development": json.loads(choice.read_text()) if choice.exists() else None,
            **({"plan_choice": json.loads(planned.read_text())["plan"]} if planned.exists() else {}),
            "trainings": trainings,
            "overall": overall,
            "complete": complete,
            "targets": targets(overall) if complete else None,
        }
    return logs


def targets(overall: dict[str, Any]) -> dict[str, Any]:
    """The issue's three targets on one log's overall figures."""
    nd = {k: v["NDCG@10"] for k, v in overall.items()}
    cpu_c, cpu_d = overall["warm-live"]["retrain_cpu_seconds"], overall["scratch-live"]["retrain_cpu_seconds"]
    models = ("frozen-frozen", "frozen-live", "warm-live", "scratch-live")
    best = max(models, key=lambda k: nd[k])
    return {
        "b_beats_a": nd["frozen-live"] > nd["frozen-frozen"],
        "c_over_d_ndcg": nd["warm-live"] / nd["scratch-live"] if nd["scratch-live"] else None,
        "c_over_d_cpu": cpu_c / cpu_d if cpu_d else None,
        "c_within_2pct_at_25pct_cpu": bool(
            nd["scratch-live"] and nd["warm-live"] >= 0.98 * nd["scratch-live"] and cpu_c <= 0.25 * cpu_d
        ),
        "best": best,
        "best_beats_pop_window": nd[best] > nd["pop-window"],
        "best_beats_recent": nd[best] > nd["recent"],
    }


def _date(t: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))


def _step_text(seconds: int) -> str:
    return f"{seconds // DAY} days" if seconds >= DAY else f"{seconds // HOUR} hours"


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _yes(v: bool) -> str:
    return "yes" if v else "no"


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def markdown(record: dict[str, Any]) -> str:
    """The tables of a record (generated; the narrative is replay-notes.md)."""
    keep = record.get("repeats") == "keep"
    which = (
        "(repeats of the user's own items included)"
        if keep
        else "that is not a repeat of the user's own items"
    )
    lines = [
        "<!-- generated by `python benchmarks/replay.py --render` from replay.json; do not edit -->",
        "# Replay: frozen, live, warm-started and retrained models between retrains",
        "",
        f"Protocol (see `benchmarks/replay.py`): each log is cut at the {CUT_QUANTILE:.0%} quantile of its "
        f"timestamps; the rest is replayed in at most {MAX_STEPS} steps. Each replayed event with a history "
        f"{which} is answered at the time of the user's previous event "
        "(or the step start, if later), never at its own timestamp; full ranking over the items the "
        f"answering model knows, {'nothing excluded' if keep else 'the history used excluded'}, ties against "
        "the model; a target the model does not know is a miss. SASRec with the library's data-chosen "
        "settings, one torch thread, "
        + (
            f"training seed {record['seed']} (of the initial model and the scratch retrains; warm starts "
            "inherit it), "
            if "seed" in record
            else ""
        )
        + f"{record['budget']:.0f} s training budget; {_warm_text(record)} CPU: "
        "`time.process_time` of the fits. "
        f"Machine: {record['machine']['cpu']}, {record['machine']['cores_used']} core(s), torch "
        f"{record['machine']['torch']}.",
        "",
    ]
    for name, log in record["logs"].items():
        plan, ov = log["plan"], log["overall"]
        n_steps = len(plan["bounds"]) - 1
        rp = plan["replay"]
        kept = plan.get("repeats") == "keep"
        left = "left out," if kept else "and"
        init = log["trainings"].get("initial")
        lines += [
            f"## {name}",
            "",
            f"{plan['events']:,} events, {plan['users']:,} users, {plan['items']:,} items; cut "
            f"{_date(plan['cut'])} UTC, {n_steps} steps of {_step_text(plan['step_seconds'])}; "
            f"{rp['replayed']:,} events replayed: {rp['cases']:,} cases; {rp['first']:,} first events of a "
            f"user {left} {rp['repeat']:,} repeats {'kept' if kept else 'left out'} "
            f"({rp['repeat'] / max(rp['replayed'], 1):.1%})."
            + ("" if log["complete"] else " **Partial: not every unit has run yet.**"),
        ]
        if init:
            lines.append(
                f"Initial model: {init['train_events']:,} events, settings {init['settings']}, "
                f"{init['epochs']} epochs (best {init['best_epoch']}, {init['stopped']}), "
                f"{init['cpu_seconds']:.0f} CPU s."
            )
        lines += [
            "",
            "| strategy | HR@10 | NDCG@10 | "
            + " | ".join(f"NDCG@10 step {s}" for s in range(n_steps))
            + " | unknown targets | retraining CPU s |",
            "|---|---|---|" + "---|" * n_steps + "---|---|",
        ]
        for strategy in STRATEGIES:
            o = ov[strategy]
            steps = {p["step"]: p for p in o["per_step"]}
            cells = [_f(steps[s]["NDCG@10"]) if s in steps else "not run" for s in range(n_steps)]
            cpu = o["retrain_cpu_seconds"] if strategy in ("warm-live", "scratch-live") else None
            lines.append(
                f"| {LABELS[strategy]} | {_f(o['HR@10'])} | {_f(o['NDCG@10'])} | "
                + " | ".join(cells)
                + f" | {_share(o['unknown_share'])} | "
                + ("-" if cpu is None else f"{cpu:.0f}")
                + " |"
            )
        validated = {
            int(k.rsplit("-", 1)[1]): v["validation"]
            for k, v in log["trainings"].items()
            if "validation" in v
        }
        chosen = [
            f"step {s}: best {v['best_epoch']} of {v['epochs']} on {v['cases']:,} users"
            + (f", {v['cpu_seconds']:.1f} CPU s" if "cpu_seconds" in v else "")
            for s, v in sorted(validated.items())
        ]
        if chosen:
            lines += ["", "Validated fine-tune epochs (c): " + "; ".join(chosen) + "."]
        dev, planned = log.get("development"), log.get("plan_choice")
        if planned:
            first, n_dev = planned["bounds"][1], len(planned["bounds"]) - 1
            cases = planned["candidates"][0]["cases"]
            lines += [
                "",
                f"Fine-tune of (c), chosen by `attnrec plan-retrain` on the {n_dev} periods before the cut "
                f"(each candidate answers the {cases:,} cases from {_date(first)} UTC on; CPU limit "
                f"{planned['cpu_limit']:.1f} s a retrain, a quarter of the scratch fit's "
                f"{planned['scratch_cpu']:.1f} s): **{_fine_tune_text(planned['chosen'])}**; NDCG@10: "
                + ", ".join(
                    f"{_fine_tune_text(c['fine_tune'])} {_f(c['ndcg'])} ({c['cpu_per_retrain']:.1f} CPU s a "
                    "retrain)"
                    for c in planned["candidates"]
                )
                + f". The plan cost {planned['cpu_seconds']:.0f} CPU s once (its scratch model, fine-tunes "
                "and answers), not counted in the retraining CPU.",
            ]
        elif dev and "scope" in dev:
            n_dev = len(dev["bounds"]) - 1
            lines += [
                "",
                f"Fine-tune of (c), chosen on the development replay ({n_dev} steps from {_date(dev['cut'])} "
                f"UTC to the cut, {dev['cases']:,} cases; CPU limit {dev['cpu_limit_per_step']:.1f} s a "
                f"step, a quarter of the estimated scratch fit): **{_fine_tune_text(dev)}**; development "
                "NDCG@10: "
                + ", ".join(
                    f"{_fine_tune_text(c)} {_f(c['NDCG@10'])} ({c['cpu_per_step']:.1f} CPU s a step)"
                    for c in dev["candidates"]
                )
                + f". The choice cost {dev['development_cpu_seconds']:.0f} CPU s once (its model, fine-tunes "
                "and answers), not counted in the retraining CPU.",
            ]
        elif dev:  # chosen among new-events fine-tunes only
            n_dev = len(dev["bounds"]) - 1
            lines += [
                "",
                f"Fine-tune length of (c), chosen on the development replay ({n_dev} steps from "
                f"{_date(dev['cut'])} UTC to the cut, {dev['cases']:,} cases; CPU limit "
                f"{dev['cpu_limit_per_step']:.1f} s a step, a quarter of the estimated scratch fit): "
                f"**{dev['epochs']} epoch(s)**; development NDCG@10 per length: "
                + ", ".join(
                    f"{c['epochs']}: {_f(c['NDCG@10'])} ({c['cpu_per_step']:.1f} CPU s a step)"
                    for c in dev["candidates"]
                )
                + f". The choice cost {dev['development_cpu_seconds']:.0f} CPU s once (its model, fine-tunes "
                "and answers), not counted in the retraining CPU.",
            ]
        t = log["targets"]
        if t:
            lines += [
                "",
                f"Targets: (b) > (a) on NDCG@10: **{_yes(t['b_beats_a'])}**; (c) within 2% of (d) at <= 25% "
                f"of its retraining CPU: **{_yes(t['c_within_2pct_at_25pct_cpu'])}** (NDCG ratio "
                f"{_f(t['c_over_d_ndcg'])}, CPU ratio {_f(t['c_over_d_cpu'])}); best strategy "
                f"{LABELS[t['best']]} beats window popularity: **{_yes(t['best_beats_pop_window'])}**, "
                f"beats `recent`: **{_yes(t['best_beats_recent'])}**.",
            ]
        lines.append("")
    return "\n".join(lines)


def _fine_tune_text(c: dict[str, Any]) -> str:
    where = "new events" if c["scope"] == "new" else "all events"
    rows = {"initial": ", initial rows", "histories": ", seeded rows"}.get(c.get("rows", ""), "")
    return f"{where}, {c['epochs']} epoch{'s' if c['epochs'] != 1 else ''}{rows}"


def _warm_text(record: dict[str, Any]) -> str:
    """What the warm start and the scratch retrain trained on, as the record's settings say (a record
    written before ``--warm-mode`` trained on all events, the scratch retrain with the default settings)."""
    share = (
        f"the warm start trains 1/{record['warm_share']} of the initial model's epochs on all events so far"
    )
    if "warm_mode" not in record:
        return f"{share}, the scratch retrain all of them."
    warm = {
        "new": f"the warm start fine-tunes on the previous step's events only (`new_since`) for "
        f"{record['warm_epochs']} epoch(s)",
        "new-dev": "the warm start fine-tunes on the previous step's events only (`new_since`) for the "
        "number of epochs chosen once per log on a development replay of the steps before the cut"
        + (
            " (or on all events so far for a fifth of the initial model's epochs, when it chose that)"
            if any("scope" in (log.get("development") or {}) for log in record["logs"].values())
            else ""
        ),
        "plan": "the warm start fine-tunes as `attnrec plan-retrain` chose once per log on the periods "
        "before the cut: on the previous step's events only (`new_since`) for the number of epochs it "
        "chose, or on all events so far for a fifth of the initial model's epochs",
        "new-validated": "the warm start fine-tunes on the previous step's events only (`new_since`) for the "
        "number of epochs a fine-tune validated on the last event of each user with new events chose (at "
        f"most {VALIDATED_MAX_EPOCHS}; early stopping), then refits that many on all of them "
        "(CPU: both fits)",
    }.get(record["warm_mode"], share)
    recipe = "the initial model's" if record["scratch_recipe"] == "initial" else "the default"
    rows = {
        "histories": "A new item's row starts from the model's query vectors over the histories it followed.",
        "initial": "A new item's row starts from the model's initialisation.",
    }.get(record.get("new_item_rows", ""))
    logs = list(record["logs"].values())
    if any("rows" in (log.get("development") or {}) or log.get("plan_choice") for log in logs):
        rows = (
            "A new item's row starts from the model's initialisation (initial rows) or from its query "
            "vectors over the histories the item followed (seeded rows), as "
            + (
                "the plan chose."
                if any(log.get("plan_choice") for log in logs)
                else "the development replay chose."
            )
        )
    scratch = f"the scratch retrain trains all of them on all events, with {recipe} training settings."
    return f"{warm}; {scratch}" + (f" {rows}" if rows else "")


def render(state: Path, args: argparse.Namespace) -> None:
    record = {
        "command": "taskset -c 0 python benchmarks/replay.py --state-dir STATE"
        + f" --budget {args.budget:g} --warm-share {args.warm_share}"
        + f" --warm-mode {args.warm_mode} --warm-epochs {args.warm_epochs}"
        + f" --scratch-recipe {args.scratch_recipe}"
        + (" --repeats keep" if args.repeats == "keep" else "")
        + f" --new-item-rows {args.new_item_rows}"
        + (f" --seed {args.seed}" if args.seed else "")
        + ("" if args.out == "replay" else f" --out {args.out}")
        + (f" --logs {' '.join(args.logs)}" if args.out != "replay" and args.logs else "")
        + "".join(f" --data {spec}" for spec in args.data),
        "budget": args.budget,
        "warm_share": args.warm_share,
        "warm_mode": args.warm_mode,
        "warm_epochs": args.warm_epochs,
        **({"repeats": "keep"} if args.repeats == "keep" else {}),
        "new_item_rows": args.new_item_rows,
        "scratch_recipe": args.scratch_recipe,
        **({"seed": args.seed} if args.seed else {}),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores_used": len(os.sched_getaffinity(0)),
            "torch": torch.__version__,
        },
        "logs": collect(state),
    }
    (RESULTS / f"{args.out}.json").write_text(json.dumps(record, indent=1) + "\n")
    (RESULTS / f"{args.out}.md").write_text(markdown(record))
    print(f"wrote {RESULTS / args.out}.md")


def sources(logs: Sequence[str], data: Sequence[str]) -> dict[str, str]:
    """Name -> path of every log to replay: the shared ones named, then each ``NAME=PATH`` of ``--data``
    (a name is a state-directory folder: letters, digits, ``.``, ``_``, ``-``; not a shared log's)."""
    paths = {name: str(SHARED / FILES[name]) for name in logs}
    for spec in data:
        name, sep, path = spec.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or not path:
            raise ValueError(f"--data {spec!r}: expected NAME=PATH, NAME of letters, digits, '.', '_', '-'")
        if name in FILES or name in paths:
            raise ValueError(f"--data {spec!r}: the name {name!r} is taken")
        if not Path(path).exists():
            raise ValueError(f"--data {spec!r}: {path} does not exist")
        paths[name] = path
    return paths


def arguments() -> argparse.ArgumentParser:
    """The command line of this script (the bootstrap reads a state directory with its defaults)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", type=Path, default=ROOT.parent / "replay-state")
    parser.add_argument("--logs", nargs="*", choices=list(FILES), help="shared logs (default: all five)")
    parser.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="replay your own timestamped log (any file attnrec reads) under NAME; repeatable",
    )
    parser.add_argument("--budget", type=float, default=90.0, help="training budget per fit, wall seconds")
    parser.add_argument("--warm-share", type=int, default=WARM_SHARE, help="with --warm-mode all")
    parser.add_argument(
        "--warm-mode",
        choices=WARM_MODES,
        default="new",
        help="fine-tune on: new events (fixed epochs), all, new events with validated epochs",
    )
    parser.add_argument("--warm-epochs", type=int, default=WARM_EPOCHS, help="with --warm-mode new")
    parser.add_argument(
        "--scratch-recipe", choices=SCRATCH_RECIPES, default="initial", help="the scratch retrain's settings"
    )
    parser.add_argument(
        "--repeats",
        choices=("exclude", "keep"),
        default="exclude",
        help="repeats of a user's own items: left out, the history excluded from answers; or kept as cases",
    )
    parser.add_argument(
        "--new-item-rows",
        choices=("initial", "histories"),
        default="initial",
        help="where a warm start's new item rows start (fit's new_item_rows; --warm-mode new-dev tries both)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="training seed of the initial model and the scratch retrains; the warm starts and the plan "
        "inherit it from the model they start from",
    )
    parser.add_argument("--time-budget", type=float, default=0.0, help="stop starting units after this")
    parser.add_argument("--render", action="store_true", help="only rewrite the results from the state")
    parser.add_argument("--out", default="replay", help="results file stem under benchmarks/results")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = arguments()
    args = parser.parse_args(argv)
    if args.logs is None:
        args.logs = [] if args.data else list(FILES)
    try:
        paths = sources(args.logs, args.data)
    except ValueError as e:
        parser.error(str(e))
    if not args.render:
        torch.set_num_threads(1)
        deadline = time.monotonic() + (args.time_budget or math.inf)
        try:
            for name, path in paths.items():
                Runner(name, path, args.state_dir, deadline, args).run()
                render(args.state_dir, args)
        except OutOfTime as stop:
            print(f"time budget spent before {stop}; rerun to resume")
    render(args.state_dir, args)


if __name__ == "__main__":
    main()
