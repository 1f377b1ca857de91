"""The replay benchmark's own parts (benchmarks/replay.py) on a tiny log: the cut and steps, recent-window
popularity, own logs, the targets read off the overall figures
and the committed tables (the mechanics it shares with the library:
tests/experiments/test_replay_mechanics.py)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from bench_scripts import BENCHMARKS, load

from replay_log import tiny

replay = load("replay", "replay_script")

DAY = 86400


def test_cut_and_steps() -> None:
    days = np.arange(0, 100) * DAY  # one event a day for 100 days
    plan = replay.plan_steps(days)
    assert plan.cut == 80 * DAY  # the 80% quantile: the last 20 days are replayed
    assert plan.step == 7 * DAY and plan.n_steps == 3  # a week: 3 steps cover days 80-99
    assert plan.bounds[0] == plan.cut and plan.bounds[-1] > days.max()
    sparse = replay.plan_steps(np.arange(0, 100) * 30 * DAY)  # one a month over eight years
    assert sparse.n_steps <= replay.MAX_STEPS and sparse.step >= 91 * DAY


def test_window_popularity() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan)
    ranks = replay.window_popularity_ranks(log, cases, window=20)
    # case 3 (user 1, target 6 @130, asked at 120): item 6 was never seen before 120 -> a miss
    assert ranks[3] == -1
    # case 4 (user 2, target 1 @125, asked at 120): events in [100, 120) are 3 @100, 5 @105, 3 @102, 4 @110;
    # seen items 1-5 with counts 1:0 2:0 3:2 4:1 5:1; history [3] excluded; 4 and 5 above, 2 ties: rank 3
    assert ranks[4] == 3


def test_window_popularity_ranks_a_kept_repeat_among_the_history() -> None:
    log, plan = tiny()
    cases = replay.replay_cases(log, plan, keep_repeats=True)
    # window popularity ranks the history's items too: case 2 (target 2 @120, asked at 110) knows items
    # 1 2 3 5, counted in [90, 110) as 3:2 5:1 1:0 2:0; 3 and 5 above it, 1 ties (against it): rank 3
    window = replay.window_popularity_ranks(log, cases, window=20)
    assert window[2] == 3


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
        "replay_plan_budget180",
        "replay_plan_budget240",
        "replay_plan_repeats_budget240",
        "replay_plan_seed1_budget180",
        "replay_plan_seed2_budget180",
        "replay_plan_seed1_budget240",
        "replay_plan_seed2_budget240",
        "replay_plan_repeats_seed1_budget240",
        "replay_plan_repeats_seed2_budget240",
    ],
)
def test_the_committed_tables_are_generated_from_their_json(stem: str) -> None:
    results = BENCHMARKS / "results"
    record = json.loads((results / f"{stem}.json").read_text())
    assert replay.markdown(record) == (results / f"{stem}.md").read_text()


def test_a_seeded_replay_says_its_seed_and_an_unseeded_one_says_nothing() -> None:
    record = json.loads((BENCHMARKS / "results" / "replay_plan_budget180.json").read_text())
    assert "training seed" not in replay.markdown(record)
    assert (
        "training seed 2 (of the initial model and the scratch retrains; warm starts inherit it)"
        in replay.markdown(record | {"seed": 2})
    )


def test_an_own_log_without_timestamps_is_refused_in_one_line(tmp_path: Any) -> None:
    own = tmp_path / "shop.csv"
    own.write_text("user,item\nu1,i1\nu1,i2\nu2,i1\n")
    args = replay.arguments().parse_args(["--budget", "1"])
    with pytest.raises(SystemExit, match="shop.csv: the log has no timestamps; a replay cuts it by time"):
        replay.Runner("shop", str(own), tmp_path / "state", float("inf"), args)
