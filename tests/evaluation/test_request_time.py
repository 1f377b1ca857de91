"""The request time evaluation scores each case at (issue #19; honest default of issue #43).

On a timestamped log a case is a request made when a server would make it: at the user's previous event's
time (the newest timestamp of its history), not at the target's own timestamp, which no server knows before
the click. The target's timestamp is a named upper bound (``request_time="target"``, protocol
``full-target-time``) labelled as one in the protocol text and the JSON. A scorer that reads the request time
sees each case's own time (in case order, whatever the batching); validation during training follows the
same rule as the test; a time-aware SASRec gains from the target's time only under the upper bound; an ID-only
model's metrics do not change.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attnrec.data.schema import Sequences
from attnrec.data.split import EvalSet, leave_one_out
from attnrec.evaluation.protocol import (
    PREVIOUS_TIME,
    PROTOCOLS,
    TARGET_TIME,
    Protocol,
    evaluate,
    protocol_by_name,
)
from attnrec.models.sasrec import SASRec
from attnrec.recommend import Recommender
from synthetic_logs import HOURLY_VARIANTS, hourly_sequences, hourly_shop_log, train_hourly_sasrec


def _cases(n: int = 9) -> EvalSet:
    """``n`` users with histories of different lengths (so evaluation reorders them); user ``u``'s history
    ends at time ``1000 + 10 u``, its target (item ``u + 1``) comes at ``5000 + 10 u``."""
    lists = [[1] * (1 + (u * 5) % 7) for u in range(n)]
    times = np.concatenate([1000 + 10 * u - np.arange(len(h))[::-1] for u, h in enumerate(lists)])
    hist = Sequences.from_lists(lists, n_items=n + 1)
    hist = dataclasses.replace(hist, columns={"timestamp": times.astype(np.int64)})
    return EvalSet(
        np.arange(n), hist, np.arange(n) + 1, {"timestamp": 5000 + 10 * np.arange(n, dtype=np.int64)}
    )


def _clock(n_items: int, origin: int):  # type: ignore[no-untyped-def]
    """A scorer that ranks item ``(t - origin) / 10 + 1`` first at request time ``t``."""

    def score(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        scores = torch.zeros(len(users), n_items + 1)
        if request_time is not None:
            at = torch.as_tensor((request_time - origin) // 10 + 1).clamp(0, n_items)
            scores[torch.arange(len(users)), at] = 1.0
        return scores

    return score


def test_by_default_each_case_is_scored_at_its_previous_events_time_and_the_result_says_so() -> None:
    cases = _cases()
    n_items = cases.histories.n_items
    honest = evaluate(_clock(n_items, 1000), cases, Protocol(ks=(1,)), batch_size=2)
    assert honest.metrics["HR@1"] == 1.0  # every case got its own history's newest time, not a neighbour's
    assert evaluate(_clock(n_items, 5000), cases, Protocol(ks=(1,)), batch_size=2).metrics["HR@1"] == 0.0
    assert honest.request_time == PREVIOUS_TIME == "previous event's timestamp"
    assert "request time = previous event's timestamp" in honest.describe()
    assert honest.to_dict()["request_time"] == PREVIOUS_TIME
    assert honest.to_dict()["protocol"]["request_time"] == "previous"
    untimed_hist = dataclasses.replace(cases.histories, columns={})
    untimed = evaluate(
        _clock(n_items, 1000), dataclasses.replace(cases, histories=untimed_hist), Protocol(ks=(1,))
    )
    assert (
        untimed.metrics["HR@1"] == 0.0
        and untimed.request_time == ""
        and "request time" not in untimed.describe()
    )


def test_the_targets_own_timestamp_is_a_named_upper_bound_labelled_as_one() -> None:
    cases = _cases()
    bound = protocol_by_name("full-target-time", ks=(1,))
    assert bound == Protocol(ks=(1,), request_time="target") and PROTOCOLS["full"].request_time == "previous"
    upper = evaluate(_clock(cases.histories.n_items, 5000), cases, bound, batch_size=2)
    assert upper.metrics["HR@1"] == 1.0
    assert upper.request_time == TARGET_TIME == "upper bound: the target's own timestamp"
    text = upper.describe()
    assert text.count("request time = upper bound: the target's own timestamp") == 1, text
    assert "upper bound" in bound.describe() and "upper bound" not in PROTOCOLS["full"].describe()
    assert upper.to_dict()["protocol"]["request_time"] == "target"
    with pytest.raises(ValueError, match="request_time must be one of previous, target"):
        Protocol(request_time="next")
    with pytest.raises(ValueError, match="cut time"):
        Protocol(window=86400.0, request_time="target")


def test_validation_during_training_uses_the_same_request_time_rule_as_the_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = hourly_shop_log(n_users=12)
    split = leave_one_out(data)
    seen: list[np.ndarray] = []
    score = Recommender.score_histories

    def recording(
        self: Recommender, users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor:
        seen.append(np.asarray(request_time))
        return score(self, users, hist, request_time)

    monkeypatch.setattr(Recommender, "score_histories", recording)
    config = {
        "hidden": 8,
        "max_len": 6,
        "n_layers": 1,
        "loss": "ce",
        "time_features": "periodic",
        "request_time": True,
    }
    train = {"max_epochs": 1, "batch_size": 64, "seed": 0, "threads": 1}
    valid = split.valid
    ends = valid.histories.column("timestamp")[valid.histories.offsets[1:] - 1]
    for protocol, expected in (
        (PROTOCOLS["full"], ends),
        (PROTOCOLS["full-target-time"], valid.target_columns["timestamp"]),
    ):
        seen.clear()
        Recommender("sasrec", config, train).fit(data, split, valid_protocol=protocol, progress=False)
        assert sorted(np.concatenate(seen).tolist()) == sorted(expected.tolist()), protocol.describe()
    assert not np.array_equal(np.sort(ends), np.sort(valid.target_columns["timestamp"]))


def _hourly_cases(n_users: int, seed: int) -> tuple[Sequences, EvalSet]:
    items, ts = hourly_sequences(n_users, seed)
    seqs = Sequences(
        np.arange(0, items.size + 1, items.shape[1]), items.ravel(), 24, {"timestamp": ts.ravel()}
    )
    return seqs, EvalSet(np.arange(n_users), seqs.truncate_end(1), items[:, -1], {"timestamp": ts[:, -1]})


def test_a_time_model_gains_from_the_targets_time_only_under_the_upper_bound_an_id_only_one_ignores_it() -> (
    None
):
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
            evaluate(scorer, cases, dataclasses.replace(proto, request_time="target")).metrics["HR@6"],
            evaluate(scorer, cases, proto).metrics["HR@6"],
        )
    assert hits["id-only"][0] == hits["id-only"][1]  # ID-only: the request time changes nothing
    # with the target's hour the next item's group is known; at the previous event's time (gap 0) it is a
    # guess
    assert hits["time"][0] > 0.9 > 0.5 > hits["time"][1], hits
