"""The replay mechanics (attnrec.experiments.replay) on a tiny log: which events are cases, request times
that never come from the target, frozen against live histories, seen items excluded from every ranking,
unknown targets as misses, repeats kept, and the choice within a CPU limit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnrec.experiments import replay
from replay_log import Recorder, tiny


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


def test_the_choice_is_the_best_within_the_cpu_limit() -> None:
    ndcg, cpu = [0.050, 0.060, 0.070], [1.0, 4.0, 16.0]
    assert replay.choose_within(ndcg, cpu, limit=100.0) == 2
    assert replay.choose_within(ndcg, cpu, limit=5.0) == 1  # the best costs too much
    assert replay.choose_within(ndcg, cpu, limit=0.5) == 0  # none within: the cheapest
    assert replay.choose_within([0.05, 0.05], [2.0, 1.0], limit=10.0) == 1  # a tie: the cheaper


def test_a_log_without_timestamps_cannot_be_replayed() -> None:
    from attnrec.data.build import from_columns

    with pytest.raises(ValueError, match="the log has no timestamps"):
        replay.Log.of(from_columns(["u", "u"], ["a", "b"]))
