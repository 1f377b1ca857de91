"""The replay benchmark's mechanics (benchmarks/replay.py) on a tiny log written here: the cut and steps,
which events are cases, request times that never come from the target, frozen against live histories,
seen items excluded from every ranking, unknown targets as misses, recent-window popularity, and the
targets read off the overall figures."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from bench_scripts import BENCHMARKS, load

from attnrec.data.schema import IdMap, Sequences

replay = load("replay", "replay_script")

DAY = 86400


def tiny() -> Any:
    """Three users, items 1-6, the cut at 100 with two steps of 20 seconds.

    user 0: item 1 @0, 2 @10 | 3 @100, 4 @110, 2 @120 (a repeat)
    user 1: item 2 @5 | 5 @105, 6 @130
    user 2: | 3 @102 (its first event), 1 @125
    """
    user = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2])
    item = np.array([1, 2, 3, 4, 2, 2, 5, 6, 3, 1])
    time = np.array([0, 10, 100, 110, 120, 5, 105, 130, 102, 125])
    return replay.Log(user, item, time, 6), replay.Plan(100, 20, (100, 120, 140))


def test_cut_and_steps() -> None:
    days = np.arange(0, 100) * DAY  # one event a day for 100 days
    plan = replay.plan_steps(days)
    assert plan.cut == 80 * DAY  # the 80% quantile: the last 20 days are replayed
    assert plan.step == 7 * DAY and plan.n_steps == 3  # a week: 3 steps cover days 80-99
    assert plan.bounds[0] == plan.cut and plan.bounds[-1] > days.max()
    sparse = replay.plan_steps(np.arange(0, 100) * 30 * DAY)  # one a month over eight years
    assert sparse.n_steps <= replay.MAX_STEPS and sparse.step >= 91 * DAY


def test_cases_request_times_and_left_out_events() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan)
    # user 2's event @102 is its first ever, user 0's item 2 @120 a repeat: neither is a case
    assert cases.counts == {"replayed": 7, "first": 1, "repeat": 1, "cases": 5}
    assert log.time[cases.pos].tolist() == [100, 110, 105, 130, 125]
    assert cases.step.tolist() == [0, 0, 0, 1, 1]
    # the previous event's time; the step start (120) only when later than it and before the target;
    # the event exactly at the cut (@100) is asked at its user's previous event (@10), not at 100
    assert cases.request_time.tolist() == [10, 100, 100, 120, 120]
    assert (cases.request_time < log.time[cases.pos]).all()


def test_frozen_and_live_histories() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan)
    live = [cases.live(log, c).tolist() for c in range(5)]
    frozen = [cases.frozen(log, c).tolist() for c in range(5)]
    assert live == [[1, 2], [1, 2, 3], [2], [2, 5], [3]]  # every event of the user before the target
    assert frozen == [[1, 2], [1, 2], [2], [2], []]  # the user's events before the cut only


def test_ranks_exclude_seen_items_and_count_ties_against_the_target() -> None:
    scores = torch.tensor([[9.0, 5.0, 4.0, 4.0, 1.0], [9.0, 5.0, 4.0, 3.0, 2.0]])
    targets = torch.tensor([3, 0])
    ranks = replay.pessimistic_ranks(scores, targets, [np.array([1]), np.array([], dtype=np.int64)])
    # row 0: item 1 is seen (excluded), column 0 is padding, item 2 ties with the target: rank 1
    assert ranks.tolist() == [1, -1]  # a target unknown to the model (0) is a miss
    assert replay.summary(np.array([0, 9, 10, -1])) == pytest.approx(
        {"hits": 2.0, "ndcg": 1.0 + 1.0 / np.log2(11.0)}
    )


class Recorder:
    """A model stub that scores item ``i`` as ``i`` (``sign`` -1: as ``-i``) and records what it was asked."""

    def __init__(self, known: list[str], sign: float = 1.0) -> None:
        self.sign = sign
        self.items_ = IdMap.from_values(known, offset=1)
        self.popularity_ = np.arange(len(known) + 1)
        self.asked: list[tuple[list[int], int]] = []

    def score_histories(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray
    ) -> torch.Tensor:
        for u in range(histories.n_users):
            self.asked.append((histories[u].tolist(), int(request_time[u])))
        n = int(histories.n_items)
        return self.sign * torch.arange(n + 1, dtype=torch.float32).expand(histories.n_users, -1).clone()


def test_frozen_model_reads_the_histories_it_is_given() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan)
    external = np.array(["1", "2", "3", "4", "5", "6"], dtype=object)
    frozen_rec = Recorder(["1", "2", "3", "4", "5"])  # item 6 is new after the cut
    g2m = replay.to_model(frozen_rec, external)
    ranks_a = replay.model_ranks(frozen_rec, log, cases, "frozen", g2m)
    assert [h for h, _ in frozen_rec.asked] == [[1, 2], [1, 2], [2], [2], [1]]  # user 2: a placeholder
    live_rec = Recorder(["1", "2", "3", "4", "5"])
    ranks_b = replay.model_ranks(live_rec, log, cases, "live", g2m)
    assert [h for h, _ in live_rec.asked] == [[1, 2], [1, 2, 3], [2], [2, 5], [3]]
    assert [t for _, t in live_rec.asked] == cases.request_time.tolist()
    # scores rank 5 > 4 > 3 > 2 > 1; the history's items are removed before ranking
    # case 0 (target 3, history 1 2): 5 and 4 above it; case 2 (target 5): first
    # case 3 (target 6): unknown to the model, a miss under both
    # case 4 (target 1, user 2): live history [3] leaves 5 4 2 above it; frozen (empty) answers with
    # popularity (item i scores i here too), 5 4 3 2 above it
    assert ranks_b.tolist() == [2, 1, 0, -1, 3]
    assert ranks_a.tolist() == [2, 1, 0, -1, 4]


def test_kept_repeats_are_cases_answered_with_nothing_excluded() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan, keep_repeats=True)
    # user 0's item 2 @120 (a repeat) is now a case; user 2's first event still is not
    assert cases.counts == {"replayed": 7, "first": 1, "repeat": 1, "cases": 6}
    assert log.time[cases.pos].tolist() == [100, 110, 120, 105, 130, 125] and not cases.exclude_seen
    assert not cases.take(cases.step == 1).exclude_seen
    external = np.array(["1", "2", "3", "4", "5", "6"], dtype=object)
    rec = Recorder(["1", "2", "3", "4", "5", "6"])  # item i scores i: 6 > 5 > ... > 1
    ranks = replay.model_ranks(rec, log, cases, "live", replay.to_model(rec, external))
    # nothing is excluded: the repeat target 2 has 6 5 4 3 above it, target 4 has 6 5 above it
    assert ranks.tolist() == [3, 2, 4, 1, 0, 5]
    # window popularity ranks the history's items too: case 2 (target 2 @120, asked at 110) knows items
    # 1 2 3 5, counted in [90, 110) as 3:2 5:1 1:0 2:0; 3 and 5 above it, 1 ties (against it): rank 3
    window = replay.window_popularity_ranks(log, cases, window=20)
    assert window[2] == 3


def test_window_popularity() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan)
    ranks = replay.window_popularity_ranks(log, cases, window=20)
    # case 3 (user 1, target 6 @130, asked at 120): item 6 was never seen before 120 -> a miss
    assert ranks[3] == -1
    # case 4 (user 2, target 1 @125, asked at 120): events in [100, 120) are 3 @100, 5 @105, 3 @102, 4 @110;
    # seen items 1-5 with counts 1:0 2:0 3:2 4:1 5:1; history [3] excluded; 4 and 5 above, 2 ties: rank 3
    assert ranks[4] == 3


def test_targets() -> None:
    def figures(ndcg: float, cpu: float = 0.0) -> dict[str, Any]:
        return {"NDCG@10": ndcg, "retrain_cpu_seconds": cpu}

    overall = {
        "frozen-frozen": figures(0.02),
        "frozen-live": figures(0.08),
        "warm-live": figures(0.099, 20.0),
        "scratch-live": figures(0.100, 100.0),
        "pop-window": figures(0.03),
        "recent": figures(0.12),
    }
    t = replay.targets(overall)
    assert t["b_beats_a"] and t["c_within_2pct_at_25pct_cpu"] and t["best"] == "scratch-live"
    assert t["best_beats_pop_window"] and not t["best_beats_recent"]
    overall["warm-live"] = figures(0.099, 30.0)  # 30% of the scratch CPU
    assert not replay.targets(overall)["c_within_2pct_at_25pct_cpu"]


def test_the_development_replay_ends_at_the_cut_and_reads_nothing_after_it() -> None:
    log, plan = tiny()
    dev = replay.development_plan(replay.Plan(100, 20, (100, 120, 140)), log.before(100).time, n_steps=4)
    # the log starts at 0: four steps of 20 end at the cut; its cases are events before 100 only
    assert dev.bounds == (20, 40, 60, 80, 100) and dev.step == plan.step
    before = log.before(plan.cut)
    assert before.time.max() < plan.cut and len(before.user) == 3
    assert replay.replay_cases(before, dev).counts["replayed"] == 0  # nothing in [20, 100) here
    # a log that starts late gets fewer steps, never fewer than two
    late = replay.development_plan(replay.Plan(100, 20, (100, 120)), np.array([50, 99]), n_steps=4)
    assert late.bounds == (60, 80, 100)
    with pytest.raises(ValueError, match="starts too late"):
        replay.development_plan(replay.Plan(100, 20, (100, 120)), np.array([70, 99]), n_steps=4)


def test_the_fine_tune_is_the_best_within_the_cpu_limit() -> None:
    def c(scope: str, epochs: int, ndcg: float, cpu: float) -> dict[str, Any]:
        return {"scope": scope, "epochs": epochs, "NDCG@10": ndcg, "cpu_per_step": cpu}

    candidates = [c("new", 1, 0.050, 1.0), c("new", 4, 0.060, 4.0), c("all", 3, 0.070, 16.0)]
    assert replay.choose_fine_tune(candidates, cpu_limit=100.0)["scope"] == "all"
    assert replay.choose_fine_tune(candidates, cpu_limit=5.0)["epochs"] == 4  # all events cost too much
    assert replay.choose_fine_tune(candidates, cpu_limit=0.5)["epochs"] == 1  # none within: the cheapest
    tied = [c("new", 2, 0.05, 2.0), c("new", 1, 0.05, 1.0)]
    assert replay.choose_fine_tune(tied, cpu_limit=10.0)["epochs"] == 1  # a tie: the cheaper


def test_own_logs_are_named_once_and_checked(tmp_path: Any) -> None:
    own = tmp_path / "shop.csv"
    own.write_text("user,item,timestamp\n")
    paths = replay.sources(["ml-100k"], [f"shop={own}"])
    assert list(paths) == ["ml-100k", "shop"] and paths["shop"] == str(own)
    assert paths["ml-100k"].endswith("ml-100k/u.data")
    for spec, message in [
        ("shop", "expected NAME=PATH"),
        (f"../x={own}", "expected NAME=PATH"),
        (f"ciao={own}", "the name 'ciao' is taken"),
        (f"shop={tmp_path / 'missing.csv'}", "does not exist"),
    ]:
        with pytest.raises(ValueError, match=message):
            replay.sources([], [spec])


def test_seen_items_are_excluded_from_the_model_answers() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan)
    external = np.array(["1", "2", "3", "4", "5", "6"], dtype=object)
    rec = Recorder(["1", "2", "3", "4", "5", "6"], sign=-1.0)  # item 1 first, then 2, 3 ...
    g2m = replay.to_model(rec, external)
    live = replay.model_ranks(rec, log, cases, "live", g2m)
    frozen = replay.model_ranks(rec, log, cases, "frozen", g2m)
    # case 1 (user 0, target 4): items 1 2 3 score above it; the live history (1 2 3) removes all three,
    # the frozen one (1 2) leaves item 3 above it
    assert live[1] == 0 and frozen[1] == 1
    # case 3 (user 1, target 6): above it 1 2 3 4 5; live history 2 5 removed -> 3, frozen (2) -> 4
    assert live[3] == 3 and frozen[3] == 4


@pytest.mark.parametrize(
    "stem",
    [
        "replay",
        "replay_budget180",
        "replay_warmnew",
        "replay_warmnew_budget180",
        "replay_warmnew_budget240",
        "replay_warmall_budget240",
        "replay_warmval_budget180",
        "replay_warmval_budget240",
        "replay_warmdev_initrows_budget180",
        "replay_warmdev_initrows_budget240",
        "replay_warmdev_repeats_initrows_budget240",
        "replay_warmdev_seeded_budget180",
        "replay_warmdev_seeded_budget240",
        "replay_warmdev_repeats_seeded_budget240",
        "replay_warmdev_budget180",
        "replay_warmdev_budget240",
        "replay_warmdev_repeats_budget240",
    ],
)
def test_the_committed_tables_are_generated_from_their_json(stem: str) -> None:
    results = BENCHMARKS / "results"
    record = json.loads((results / f"{stem}.json").read_text())
    assert replay.markdown(record) == (results / f"{stem}.md").read_text()


def test_an_own_log_without_timestamps_is_refused_in_one_line(tmp_path: Any) -> None:
    own = tmp_path / "shop.csv"
    own.write_text("user,item\nu1,i1\nu1,i2\nu2,i1\n")
    args = replay.argparse.Namespace(
        budget=1.0,
        warm_share=5,
        warm_mode="new",
        warm_epochs=1,
        scratch_recipe="initial",
        new_item_rows="initial",
    )
    with pytest.raises(SystemExit, match="shop.csv: the log has no timestamps; a replay cuts it by time"):
        replay.Runner("shop", str(own), tmp_path / "state", float("inf"), args)
