"""Evaluation scores each case at its target's time (issue #19): ``request_time`` is the target timestamp.

A scorer that reads the request time sees each case's own target time (in case order, whatever the
batching), the result records it, and a time-aware SASRec ranks a time-only pattern at the target's time
where it cannot without it; an ID-only model's metrics do not change.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.protocol import TARGET_TIME, Protocol, evaluate
from attnrec.models.sasrec import SASRec
from synthetic_logs import HOURLY_VARIANTS, hourly_sequences, train_hourly_sasrec


def _cases(n: int = 9) -> EvalSet:
    """``n`` users with histories of different lengths (so evaluation reorders them); target item
    ``u + 1``."""
    hist = Sequences.from_lists([[1] * (1 + (u * 5) % 7) for u in range(n)], n_items=n + 1)
    return EvalSet(
        np.arange(n), hist, np.arange(n) + 1, {"timestamp": 1000 + 10 * np.arange(n, dtype=np.int64)}
    )


def test_each_case_is_scored_at_its_own_target_time_and_the_result_says_so() -> None:
    cases = _cases()

    def clock(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        """Ranks item ``(t - 1000) / 10 + 1`` first at time ``t`` (the target exactly when t is the target's
        time)."""
        scores = torch.zeros(len(users), cases.histories.n_items + 1)
        if request_time is not None:
            scores[torch.arange(len(users)), torch.as_tensor((request_time - 1000) // 10 + 1)] = 1.0
        return scores

    timed = evaluate(clock, cases, Protocol(ks=(1,)), batch_size=2)
    assert timed.metrics["HR@1"] == 1.0  # every case got its own target's time, not a neighbour's
    assert timed.request_time == TARGET_TIME and "request time = target timestamp" in timed.describe()
    assert timed.to_dict()["request_time"] == TARGET_TIME
    untimed = evaluate(clock, dataclasses.replace(cases, target_columns={}), Protocol(ks=(1,)), batch_size=2)
    assert (
        untimed.metrics["HR@1"] == 0.0
        and untimed.request_time == ""
        and "request time" not in untimed.describe()
    )


def _hourly_cases(n_users: int, seed: int) -> tuple[Sequences, EvalSet]:
    items, ts = hourly_sequences(n_users, seed)
    seqs = Sequences(
        np.arange(0, items.size + 1, items.shape[1]), items.ravel(), 24, {"timestamp": ts.ravel()}
    )
    return seqs, EvalSet(np.arange(n_users), seqs.truncate_end(1), items[:, -1], {"timestamp": ts[:, -1]})


def test_a_request_time_model_is_evaluated_at_the_target_time_an_id_only_one_ignores_it() -> None:
    train, _ = _hourly_cases(300, seed=0)
    _, cases = _hourly_cases(200, seed=1)
    hits = {}
    for name, over in HOURLY_VARIANTS.items():
        model = train_hourly_sasrec(train, over)

        def scorer(
            users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None, m: SASRec = model
        ) -> torch.Tensor:
            return m.score(m.score_inputs(users, hist, request_time))

        proto = Protocol(ks=(6,), exclude_seen=False)
        hits[name] = (
            evaluate(scorer, cases, proto).metrics["HR@6"],
            evaluate(scorer, dataclasses.replace(cases, target_columns={}), proto).metrics["HR@6"],
        )
    assert hits["id-only"][0] == hits["id-only"][1]  # ID-only: the request time changes nothing
    # with the target's hour the next item's group is known; without it (gap 0) it is a guess
    assert hits["time"][0] > 0.9 > 0.5 > hits["time"][1], hits
