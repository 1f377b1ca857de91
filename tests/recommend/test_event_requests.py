"""recommend() with per-event context (issue #19): timestamps, events and ratings aligned with the history,
and the request's own time.

A time-aware model's scores follow the request time and the history's times; an ID-only model's do not and
the answer says it ignored them; unknown history items leave with their columns; lengths that do not match
and unknown event names are one-line errors; a known user without a history is scored with its stored
columns, also after save/load.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnrec.data.schema import Interactions
from attnrec.recommend import Recommender
from attnrec.recommend.explain_rec import explain_recommendation
from synthetic_logs import hourly_shop_log

TRAIN = {"max_epochs": 1, "batch_size": 64, "seed": 0, "threads": 1}
SMALL = {"hidden": 16, "max_len": 10, "n_layers": 1, "loss": "ce", "dropout": 0.0}


def shop_log() -> Interactions:
    return hourly_shop_log()


@pytest.fixture(scope="module")
def models() -> dict[str, Recommender]:
    data = shop_log()
    time_events = SMALL | {"time_features": "periodic", "request_time": True, "event_input": True}
    return {
        "time": Recommender("sasrec", time_events, TRAIN).fit(data, progress=False),
        "id": Recommender("sasrec", SMALL, TRAIN).fit(data, progress=False),
    }


HISTORY = ["i1", "i8", "i15"]
TIMES = [1_700_000_000, 1_700_010_000, 1_700_050_000]
EVENTS = ["view", "view", "buy"]


def scores(rec: Recommender, **request: object) -> dict[str, float]:
    answer = rec.recommend(k=30, exclude_seen=False, **request)  # type: ignore[arg-type]
    return dict(zip(answer.items, answer.scores, strict=True))


def test_request_time_and_events_change_a_time_models_scores_not_an_id_only_ones(
    models: dict[str, Recommender],
) -> None:
    base = {"history": HISTORY, "timestamps": TIMES, "events": EVENTS}
    for name, rec in models.items():
        early = scores(rec, **base, request_time=TIMES[-1] + 60)
        late = scores(rec, **base, request_time=TIMES[-1] + 5 * 3600)
        bought = scores(rec, **base | {"events": ["buy", "buy", "buy"]}, request_time=TIMES[-1] + 60)
        if name == "time":
            assert early != late and early != bought
            assert rec.recommend(**base, request_time=TIMES[-1] + 60).ignored_inputs == []
        else:
            assert early == late == bought == scores(rec, history=HISTORY)
            assert rec.recommend(**base, request_time=TIMES[-1]).ignored_inputs == [
                "timestamps",
                "events",
                "request_time",
            ]


def test_unknown_items_leave_with_their_columns(models: dict[str, Recommender]) -> None:
    rec = models["time"]
    with_unknown = scores(
        rec,
        history=["i1", "zz", "i8", "i15"],
        timestamps=[TIMES[0], 1_700_000_500, *TIMES[1:]],
        events=["view", "buy", "view", "buy"],
        request_time=TIMES[-1] + 60,
    )
    assert with_unknown == scores(
        rec, history=HISTORY, timestamps=TIMES, events=EVENTS, request_time=TIMES[-1] + 60
    )
    assert rec.recommend(history=["i1", "zz"], timestamps=[1, 2], events=["view", "buy"]).unknown_items == [
        "zz"
    ]


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"history": HISTORY, "timestamps": TIMES[:2]}, "timestamps has 2 values for a history of 3 items"),
        (
            {"history": HISTORY, "events": ["view", "order", "buy"]},
            r"unknown event 'order'; .*\['buy', 'view'\]",
        ),
        ({"history": HISTORY, "timestamps": [3, 2, 1]}, "timestamps must not decrease"),
        ({"history": HISTORY, "ratings": [1.0, float("nan"), 2.0]}, "ratings must be finite numbers"),
        (
            {"history": HISTORY, "timestamps": TIMES, "request_time": TIMES[0]},
            "before the history's last timestamp",
        ),
        ({"user": "u1", "timestamps": TIMES}, "send them with a history"),
    ],
)
def test_bad_per_event_fields_are_one_line_errors(
    models: dict[str, Recommender], request_: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as err:
        models["time"].recommend(**request_)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_a_time_model_without_timestamps_says_what_it_needs(models: dict[str, Recommender]) -> None:
    with pytest.raises(ValueError, match="per-event column 'timestamp'"):
        models["time"].recommend(history=HISTORY, events=EVENTS)


def test_a_known_user_is_scored_with_its_stored_columns_also_after_loading(
    models: dict[str, Recommender], tmp_path: Path
) -> None:
    rec = models["time"]
    data = shop_log()
    u = data.users.get("u3")
    seq = data.sequences()
    lo, hi = seq.offsets[u], seq.offsets[u + 1]
    stored = {
        "history": data.items.to_external(seq.items[lo:hi]),
        "timestamps": seq.column("timestamp")[lo:hi].tolist(),
        "events": [data.events.to_external([c])[0] for c in seq.column("event")[lo:hi]],
    }
    when = int(seq.column("timestamp")[hi - 1]) + 3600
    assert scores(rec, user="u3", request_time=when) == scores(rec, **stored, request_time=when)
    back = Recommender.load(rec.save(tmp_path / "m"))
    assert back.events_ is not None and back.events_.to_list() == ["buy", "view"]
    assert scores(back, user="u3", request_time=when) == scores(rec, user="u3", request_time=when)


def test_explanations_occlude_events_with_their_columns(models: dict[str, Recommender]) -> None:
    answer = models["time"].recommend(history=HISTORY, timestamps=TIMES, events=EVENTS, k=3, explain=True)
    assert answer.explanations is not None and all(e is not None for e in answer.explanations)


def test_explain_rec_of_a_known_user_occludes_its_stored_columns(models: dict[str, Recommender]) -> None:
    rec = models["time"]
    assert rec.users_ is not None
    user = rec.users_.to_list()[0]
    ex = explain_recommendation(rec, user=user, k=2)  # greedy occlusion: needs the stored times and events
    want = rec.recommend(user=user, k=2, explain=True)
    assert want.explanations is not None
    assert [[(e.item, e.value) for e in x.events] for x in ex.explanations] == [
        [(e.item, e.value) for e in x.events] for x in want.explanations if x is not None
    ]
