"""The time-window protocol: several held-out items per case, and the metrics that count them.

Every figure below is worked out by hand in its comment; each test names the defect it would catch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnrec.data.build import from_columns
from attnrec.data.schema import DataError, Sequences
from attnrec.data.split import make_split, temporal_split
from attnrec.evaluation.metrics import TargetRanks, mrr, parse_families, ranking_metrics
from attnrec.evaluation.protocol import PROTOCOLS, Protocol, evaluate, protocol_by_name
from attnrec.evaluation.window import (
    WINDOW_START,
    TargetSets,
    parse_window,
    split_window_cases,
    target_positions,
    window_cases,
)

ALL_RANKING = ("HR", "NDCG", "MRR", "Recall", "Precision", "MAP")


def test_multi_target_metrics_by_hand() -> None:
    # case A: two targets placed 1st and 3rd; case B: one target placed 6th; k = 3
    t = TargetRanks(np.array([0, 2, 3]), np.array([0, 2, 5]))
    m = ranking_metrics(t, (3,), ALL_RANKING)
    assert m["HR@3"] == pytest.approx((1 + 0) / 2)
    assert m["Recall@3"] == pytest.approx((2 / 2 + 0) / 2)
    assert m["Precision@3"] == pytest.approx((2 / 3 + 0) / 2)
    # A: DCG 1/log2(2) + 1/log2(4) = 1.5 over the ideal of min(3, 2) = 2 targets: 1 + 1/log2(3)
    assert m["NDCG@3"] == pytest.approx((1.5 / (1 + 1 / math.log2(3)) + 0) / 2)
    # A: precision at each hit, 1/1 and 2/3, over its 2 targets; B: none in the top 3
    assert m["MAP@3"] == pytest.approx(((1 + 2 / 3) / 2 + 0) / 2)
    assert m["MRR"] == pytest.approx((1 + 1 / 6) / 2)


def test_ndcg_ideal_is_over_min_of_k_and_the_targets() -> None:
    # five targets filling the top 3: a perfect list at k = 3 (an ideal over all 5 targets would give < 1)
    t = TargetRanks(np.array([0, 5]), np.arange(5))
    assert ranking_metrics(t, (3,), ("NDCG",))["NDCG@3"] == pytest.approx(1.0)
    assert ranking_metrics(t, (3,), ("Recall",))["Recall@3"] == pytest.approx(3 / 5)


def test_one_target_per_case_the_new_metrics_degenerate_as_documented() -> None:
    ranks = np.array([0, 1, 4, 9, 50])
    m = ranking_metrics(ranks, (1, 5, 10), ALL_RANKING)
    for k in (1, 5, 10):
        assert m[f"Recall@{k}"] == m[f"HR@{k}"]
        assert m[f"Precision@{k}"] == pytest.approx(m[f"HR@{k}"] / k)
        assert m[f"MAP@{k}"] == pytest.approx(mrr(ranks, k))
    # the single-target metrics are the same whichever way the ranks come in
    assert ranking_metrics(TargetRanks.single(ranks), (1, 5, 10)) == ranking_metrics(ranks, (1, 5, 10))


def test_families_parse_in_declared_order_and_unknown_ones_are_named() -> None:
    assert parse_families("map,Recall, hr") == ("HR", "Recall", "MAP")
    with pytest.raises(ValueError, match="unknown metric 'f1'; use hr, ndcg"):
        parse_families("recall,f1")


def test_target_positions_count_non_targets_ahead_and_the_targets_above() -> None:
    # items 1..5 scored 0.9, 0.5, 0.7, 0.1, 0.5; targets 2 and 4
    scores = torch.tensor([[-torch.inf, 0.9, 0.5, 0.7, 0.1, 0.5]])
    # item 2 (0.5): non-targets 1, 3 and 5 (a tie: against the model) ahead -> position 3;
    # item 4 (0.1): the same three plus target 2 -> position 4
    pos = target_positions(scores, Sequences.from_lists([[4, 2]], n_items=5))
    assert pos.tolist() == [3, 4]


def _log() -> tuple[object, dict[str, int]]:
    """Users a, b, c; cut at t = 100, a week-long window would hold everything: use window 50."""
    rows = [
        ("a", "x", 10),
        ("a", "y", 20),
        ("a", "z", 110),
        ("a", "y", 120),
        ("a", "w", 130),
        ("a", "v", 160),
        ("b", "x", 30),
        ("b", "v", 140),
        ("c", "w", 105),  # no history before the cut: a cold user, no case
        ("d", "z", 40),  # nothing in the window: no case
    ]
    data = from_columns([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    return data, {x: int(data.items.get(x) or 0) for x in "vwxyz"}


def test_window_cases_hold_each_users_window_items_less_the_history() -> None:
    data, idx = _log()
    cases = window_cases(data, cut=100, window=50)  # [100, 150)
    users = list(data.users.to_external(cases.users))
    assert users == ["a", "b"]
    # a: z, y (seen before the cut: left out), w; v at 160 is past the window
    assert cases.targets[0].tolist() == [idx["z"], idx["w"]]
    assert cases.targets[1].tolist() == [idx["v"]]
    assert cases.histories[0].tolist() == [idx["x"], idx["y"]]
    kept = window_cases(data, cut=100, window=50, exclude_seen=False)
    assert kept.targets[0].tolist() == [idx["z"], idx["y"], idx["w"]]


def test_evaluate_ranks_every_window_item_at_the_cut_time_and_says_so() -> None:
    data, idx = _log()
    cases = window_cases(data, cut=100, window=50)
    seen: list[np.ndarray] = []
    order = [idx["z"], idx["v"], idx["x"], idx["w"], idx["y"]]  # the same list for everyone

    def fixed(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        assert request_time is not None
        seen.append(request_time)
        scores = torch.zeros(len(users), 6)
        scores[:, order] = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0])
        return scores

    proto = protocol_by_name("time-window", ks=(2,), window=50)
    res = evaluate(fixed, cases, proto, metrics=ALL_RANKING)
    # a (history x, y removed): list z, v, w -> targets z, w at positions 0 and 2
    # b (history x removed): list z, v, w, y -> target v at position 1
    assert res.metrics["Recall@2"] == pytest.approx((1 / 2 + 1) / 2)
    assert res.metrics["Precision@2"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert res.metrics["MAP@2"] == pytest.approx((1 / 2 + 1 / 2) / 2)
    assert res.metrics["MRR"] == pytest.approx((1 + 1 / 2) / 2)
    assert np.concatenate(seen).tolist() == [100, 100]
    assert res.request_time == WINDOW_START and res.extra["cut_time"] == 100
    assert (
        "every item of the 50s after the cut time, full ranking over all items, history excluded"
        in res.describe()
    )
    assert "request time = window start 1970-01-01 00:01:40 UTC" in res.describe()


def test_the_time_window_protocol_is_declared_once_and_checked() -> None:
    assert PROTOCOLS["time-window"] == Protocol(window=7 * 86_400.0)
    assert protocol_by_name("time-window", window=3600).window == 3600
    with pytest.raises(ValueError, match="applies to the time-window protocol only, not full"):
        protocol_by_name("full", window=3600)
    with pytest.raises(ValueError, match="ranked under full candidates"):
        Protocol(candidates="sampled", window=10)
    assert parse_window("7d") == 7 * 86_400 and parse_window("12h") == 43_200
    with pytest.raises(ValueError, match="give a positive length"):
        parse_window("soon")


def test_the_window_opens_at_the_temporal_splits_cut_and_refuses_other_splits() -> None:
    data, _ = _log()
    sp = temporal_split(data)
    cases = split_window_cases(data, sp, 1000.0)
    assert isinstance(cases, TargetSets) and cases.cut == sp.params["test_cutoff"]
    valid = split_window_cases(data, sp, 1000.0, target="valid")
    assert valid.cut == sp.params["valid_cutoff"] and valid.end == sp.params["test_cutoff"]
    with pytest.raises(DataError, match="the leave-one-out split has none"):
        split_window_cases(data, make_split(data), 1000.0)


def test_a_window_protocol_needs_window_cases_and_list_metrics_need_full_ranking() -> None:
    data, _ = _log()
    sp = make_split(data)

    def zeros(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        return torch.zeros(len(users), 6)

    with pytest.raises(ValueError, match="time-window protocol evaluates TargetSets"):
        evaluate(zeros, sp.test, PROTOCOLS["time-window"])
    with pytest.raises(ValueError, match="Coverage rank"):
        evaluate(zeros, sp.test, PROTOCOLS["sampled-uniform"], metrics=("HR", "Coverage"))


def test_to_frame_has_one_row_per_metric() -> None:
    data, _ = _log()
    cases = window_cases(data, cut=100, window=50)

    def zeros(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        return torch.arange(6.0).repeat(len(users), 1)

    res = evaluate(
        zeros, cases, protocol_by_name("time-window", ks=(1, 3)), metrics=("Recall", "MRR", "Coverage")
    )
    frame = res.to_frame()
    assert frame.index.tolist() == ["MRR", "Recall@1", "Recall@3", "Coverage@1", "Coverage@3"]
    assert frame.loc["Recall@3", "metric"] == "Recall" and frame.loc["Recall@3", "k"] == 3
    assert frame["k"].isna().tolist() == [True, False, False, False, False]
    assert frame.loc["Coverage@3", "value"] == res.metrics["Coverage@3"]
    assert set(frame["cases"]) == {"all"}


def test_evaluate_reads_metric_names_in_any_case_and_refuses_unknown_ones() -> None:
    data, _ = _log()
    cases = window_cases(data, cut=100, window=50)

    def ordered(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        return torch.arange(6.0).repeat(len(users), 1)

    proto = protocol_by_name("time-window", ks=(2,))
    assert list(evaluate(ordered, cases, proto, metrics=("recall", "MAP")).metrics) == ["Recall@2", "MAP@2"]
    with pytest.raises(ValueError, match="unknown metric 'f1'"):
        evaluate(ordered, cases, proto, metrics=("f1",))
