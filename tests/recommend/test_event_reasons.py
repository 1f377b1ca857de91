"""Event- and time-aware reasons (issue #22): "Because you added *Lego Set* to your cart yesterday and viewed
*Puzzle* 3 days ago".

Hand-written events give exact reason strings (shared and different verbs, ``{item}`` templates, the fallback
for an unknown event type, relative times at their boundaries); a SASRec trained with time and event inputs
returns explanations whose events carry the request's (or the stored history's) event names and timestamps,
and reasons built from them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnrec.recommend import Recommender
from attnrec.recommend.event_requests import stored_columns
from attnrec.recommend.explain_rec import explain_recommendation
from attnrec.recommend.reasons import (
    DEFAULT_EVENT_VERBS,
    ExplainedEvent,
    check_event_verbs,
    check_verb,
    event_template,
    reason,
    relative_time,
)
from synthetic_logs import hourly_shop_log

DAY = 86_400.0
NOW = 1_700_000_000.0


def ev(
    item: str,
    event: str | None = None,
    days_ago: float | None = None,
    value: float = 1.0,
    title: str | None = None,
) -> ExplainedEvent:
    """A hand-written event titled after its item (``item`` itself: "*Lego Set*")."""
    when = None if days_ago is None else NOW - days_ago * DAY
    return ExplainedEvent(item, item if title is None else title, 0, value, event, when)


# -- the words -------------------------------------------------------------------------------------
def test_the_issue_example() -> None:
    events = [ev("Lego Set", "cart", 1.5), ev("Puzzle", "pv", 3)]
    assert (
        reason(events, now=NOW)
        == "Because you added *Lego Set* to your cart yesterday and viewed *Puzzle* 3 days ago"
    )


def test_without_event_types_and_times_the_reason_is_unchanged() -> None:
    events = [ev("A"), ev("b", title=""), ev("C"), ev("D", value=-1)]
    assert reason(events, "watched", n=5) == "Because you watched *A*, item b and *C*"
    assert (
        reason(events, event_verbs={"pv": "looked at"}, now=NOW)
        == "Because you interacted with *A* and item b"
    )


def test_items_with_the_same_verb_share_it_and_different_verbs_are_spelled_each() -> None:
    assert reason([ev("A", "pv"), ev("B", "pv")]) == "Because you viewed *A* and *B*"
    assert reason([ev("A", "buy"), ev("B", "clicks")]) == "Because you bought *A* and clicked *B*"
    # grouped by verb in the order of each verb's strongest item
    assert (
        reason([ev("A", "pv"), ev("B", "cart"), ev("C", "pv")], n=3)
        == "Because you viewed *A* and *C* and added *B* to your cart"
    )
    assert reason([ev("A", "carts"), ev("B", "carts")]) == "Because you added *A* and *B* to your cart"
    assert (
        reason([ev("A", "orders"), ev("B", "fav"), ev("C", "buy")], n=3)
        == "Because you ordered *A*, saved *B* and bought *C*"
    )


def test_event_verbs_override_the_defaults_and_templates_place_the_item() -> None:
    verbs = {"pv": "looked at", "buy": "put {item} in your basket"}
    assert (
        reason([ev("A", "pv"), ev("B", "buy")], event_verbs=verbs)
        == "Because you looked at *A* and put *B* in your basket"
    )
    assert (
        reason([ev("A", "cart")], event_verbs=verbs) == "Because you added *A* to your cart"
    )  # default kept
    assert (
        reason([ev("A", "view")], event_verbs={"view": "{item} caught your eye when you"})
        == "Because you *A* caught your eye when you"
    )  # the template decides, however it reads


def test_an_unknown_event_type_keeps_the_verb_and_names_the_type() -> None:
    assert (
        reason([ev("A", "view"), ev("B", "view")], "looked at") == "Because you looked at *A* and *B* (view)"
    )
    assert (
        reason([ev("A", "view", 2), ev("B", "pv", 3)], now=NOW)
        == "Because you interacted with *A* (view) 2 days ago and viewed *B* 3 days ago"
    )
    assert event_template("share", "interacted with") == "interacted with {item} (share)"
    assert event_template(None, "watched") == "watched {item}"


@pytest.mark.parametrize(
    ("days", "words"),
    [
        (0.0, "today"),
        (0.5, "today"),
        (-1.0, "today"),
        (1.0, "yesterday"),
        (1.5, "yesterday"),
        (2.0, "2 days ago"),
        (3.0, "3 days ago"),
        (13.9, "13 days ago"),
        (14.0, "2 weeks ago"),
        (20.0, "2 weeks ago"),
        (59.0, "8 weeks ago"),
        (60.0, "2 months ago"),
        (90.0, "3 months ago"),
        (729.0, "24 months ago"),
        (730.0, "2 years ago"),
        (3000.0, "8 years ago"),
    ],
)
def test_relative_times_at_their_boundaries(days: float, words: str) -> None:
    assert relative_time(days * DAY) == words


def test_times_follow_each_item_or_the_whole_phrase() -> None:
    assert (
        reason([ev("A", "pv", 0.5), ev("B", "pv", 20)], now=NOW)
        == "Because you viewed *A* today and *B* 2 weeks ago"
    )
    assert (
        reason([ev("A", "pv", 90), ev("B", "pv", 90.5)], now=NOW)
        == "Because you viewed *A* and *B* 3 months ago"
    )
    assert (
        reason([ev("A", "cart", 1.5), ev("B", "cart", 3)], now=NOW)
        == "Because you added *A* to your cart yesterday and added *B* to your cart 3 days ago"
    )
    assert reason([ev("A", None, 3)], "watched", now=NOW) == "Because you watched *A* 3 days ago"


def test_now_defaults_to_the_newest_event_given() -> None:
    events = [ev("A", "pv", 3), ev("B", "pv", 1, value=-0.5)]  # B raised nothing but is the newest
    assert reason(events) == "Because you viewed *A* 2 days ago"


def test_event_verbs_are_checked_in_one_line() -> None:
    assert check_event_verbs({" cart ": " popped {item} in the cart "}) == {
        "cart": "popped {item} in the cart"
    }
    for bad in (
        {"": "viewed"},
        {"pv": " "},
        {"pv": "saw\x07it"},
        {"pv": "saw {thing}"},
        {"pv": "{item} {item}"},
        {"pv": "x" * 61},
    ):
        with pytest.raises(ValueError, match="event verb") as err:
            check_event_verbs(bad)
        assert "\n" not in str(err.value)
    assert set(DEFAULT_EVENT_VERBS) == {"pv", "cart", "fav", "buy", "clicks", "carts", "orders"}


def test_one_verb_rule_for_the_cli_the_service_and_python() -> None:
    from attnrec.cli._item_explanations import check_verb as cli_check_verb
    from attnrec.serving.serving_config import ServingConfig

    assert (
        check_verb(" watched ") == "watched" and ServingConfig(reason_verb=" rated ").reason_verb == "rated"
    )
    assert check_verb("x" * 60) == "x" * 60
    for bad in (" ", "saw\x07", "x" * 61):
        for check, name in (
            (check_verb, "reason verb"),
            (cli_check_verb, "--reason-verb"),
            (lambda v: ServingConfig(reason_verb=v), "reason_verb"),
        ):
            with pytest.raises(ValueError, match=name) as err:
                check(bad)
            assert "\n" not in str(err.value) and "at most 60" in str(err.value)


# -- from a model trained with time and event inputs ------------------------------------------------
HISTORY = ["i1", "i8", "i15", "i3", "i20"]
TIMES = [NOW - 40 * DAY, NOW - 20 * DAY, NOW - 3 * DAY, NOW - 1.5 * DAY, NOW - 0.2 * DAY]
EVENTS = ["view", "view", "buy", "view", "buy"]
VERBS = {"view": "viewed"}


@pytest.fixture(scope="module")
def timed() -> Recommender:
    config = {
        "hidden": 16,
        "max_len": 10,
        "n_layers": 1,
        "loss": "ce",
        "dropout": 0.0,
        "time_features": "periodic",
        "request_time": True,
        "event_input": True,
    }
    return Recommender("sasrec", config, {"max_epochs": 1, "batch_size": 64, "seed": 0, "threads": 1}).fit(
        hourly_shop_log(), progress=False
    )


def test_explanations_carry_the_requests_event_names_and_times(timed: Recommender) -> None:
    answer = timed.recommend(
        history=HISTORY,
        timestamps=TIMES,
        events=EVENTS,
        request_time=NOW,
        k=4,
        explain="occlusion",
        event_verbs=VERBS,
    )
    assert answer.explanations is not None
    said = 0
    for ex in answer.explanations:
        assert ex is not None and len(ex.events) == len(HISTORY)
        for e in ex.events:
            pos = len(HISTORY) - 1 - e.back
            assert (e.item, e.event, e.timestamp) == (HISTORY[pos], EVENTS[pos], TIMES[pos])
        assert ex.reason == reason(ex.events, event_verbs=VERBS, now=NOW)
        said += ex.reason is not None
        if ex.reason is not None:  # the words come from the events: a verb and a time per named item
            top = [e for e in ex.events if e.value > 0][:2]
            assert ex.reason.startswith(f"Because you {'viewed' if top[0].event == 'view' else 'bought'} ")
            assert relative_time(NOW - (top[0].timestamp or 0)) in ex.reason
        d = ex.to_dict(top=2)
        assert json.loads(json.dumps(d))["events"][0]["event"] in {"view", "buy"}
        assert d["events"][0]["timestamp"] in TIMES
    assert said, "no recommended item had a history event that raised its score"


def test_now_is_the_request_time_else_the_newest_event(timed: Recommender) -> None:
    later = timed.recommend(
        history=HISTORY,
        timestamps=TIMES,
        events=EVENTS,
        request_time=NOW + 30 * DAY,
        k=4,
        explain="occlusion",
    )
    default = timed.recommend(history=HISTORY, timestamps=TIMES, events=EVENTS, k=4, explain="occlusion")
    assert later.explanations is not None and default.explanations is not None
    for a, b in zip(later.explanations, default.explanations, strict=True):
        assert a is not None and b is not None
        assert a.reason == reason(a.events, now=NOW + 30 * DAY)
        assert b.reason == reason(b.events, now=TIMES[-1])


def test_a_known_users_stored_events_and_times_are_named(timed: Recommender) -> None:
    assert timed.users_ is not None and timed.histories_ is not None and timed.events_ is not None
    uid = timed.users_.get("u3")
    assert uid is not None
    cols = stored_columns(timed.histories_, int(uid))
    n = len(cols["timestamp"])
    ex = explain_recommendation(timed, user="u3", k=2, method="occlusion", event_verbs=VERBS)
    for x in ex.explanations:
        assert x.events
        for e in x.events:
            pos = n - 1 - e.back
            assert e.timestamp == float(cols["timestamp"][pos])
            assert e.event == timed.events_.to_external(np.array([cols["event"][pos]]))[0]
        assert x.reason == reason(x.events, event_verbs=VERBS, now=float(cols["timestamp"].max()))


def test_a_request_without_event_fields_has_none(timed: Recommender) -> None:
    ids = Recommender(
        "sasrec",
        {"hidden": 16, "max_len": 10, "n_layers": 1, "loss": "ce"},
        {"max_epochs": 1, "batch_size": 64, "seed": 0, "threads": 1},
    ).fit(hourly_shop_log(), progress=False)
    answer = ids.recommend(history=HISTORY, k=2, explain="occlusion")
    assert answer.explanations is not None
    for ex in answer.explanations:
        assert ex is not None and all(e.event is None and e.timestamp is None for e in ex.events)
        assert ex.reason is None or ex.reason.startswith("Because you interacted with ")
