"""The per-event fields of ``POST /v1/recommend`` (issue #19): ``timestamps``, ``events``, ``ratings`` aligned
with ``history``, and ``request_time``; validated like the other fields (422 in the error shape), documented
in the OpenAPI schema, read by a time-aware model and reported as ignored by an ID-only one. With ``explain``,
each ``because`` entry carries its event type and time, and the reason says them (issue #22)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommender
from attnrec.recommend.reasons import reason
from attnrec.serving.app import ServingConfig, create_app
from synthetic_logs import hourly_shop_log

HISTORY = ["i1", "i8", "i15"]
TIMES = [1_700_000_000, 1_700_010_000, 1_700_050_000]
VERBS = {"view": "looked at", "buy": "picked up {item} at the till"}


@pytest.fixture(scope="module")
def timed() -> Recommender:
    config = {
        "hidden": 16,
        "max_len": 10,
        "n_layers": 1,
        "loss": "ce",
        "time_features": "periodic",
        "request_time": True,
        "event_input": True,
    }
    return Recommender("sasrec", config, {"max_epochs": 1, "batch_size": 64, "seed": 0}).fit(
        hourly_shop_log(), progress=False
    )


@pytest.fixture(scope="module")
def client(sasrec: Recommender, timed: Recommender) -> Iterator[TestClient]:
    app = create_app(
        {"timed": timed, "ids": sasrec}, ServingConfig(gc_freeze=False, max_history=50, event_verbs=VERBS)
    )
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _error(r: Any, message: str) -> None:
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and message in err["message"], err


def test_a_time_model_reads_the_fields(client: TestClient) -> None:
    body = {
        "model": "timed",
        "history": HISTORY,
        "timestamps": TIMES,
        "events": ["view", "view", "buy"],
        "k": 5,
    }
    soon = client.post("/v1/recommend", json=body | {"request_time": TIMES[-1] + 60})
    later = client.post("/v1/recommend", json=body | {"request_time": TIMES[-1] + 5 * 3600})
    assert soon.status_code == later.status_code == 200, soon.text
    assert soon.json()["ignored_inputs"] == [] and soon.json()["items"] != later.json()["items"]


def test_an_id_only_model_ignores_them_and_says_so(client: TestClient) -> None:
    plain = client.post("/v1/recommend", json={"model": "ids", "history": ["i1", "i2"], "k": 5}).json()
    r = client.post(
        "/v1/recommend",
        json={
            "model": "ids",
            "history": ["i1", "i2"],
            "k": 5,
            "timestamps": [1, 2],
            "ratings": [4.0, 5],
            "request_time": 3,
        },
    )
    assert r.status_code == 200 and r.json()["ignored_inputs"] == ["timestamps", "ratings", "request_time"]
    assert r.json()["items"] == plain["items"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"timestamps": TIMES[:2]}, "`timestamps` has 2 values for a history of 3 items"),
        ({"events": ["view"]}, "`events` has 1 values for a history of 3 items"),
        ({"timestamps": ["noon", 1, 2]}, "timestamps.0"),
        ({"timestamps": [1.5, 2, 3]}, "timestamps.0"),
        ({"ratings": [-1, 2, 3]}, "ratings.0"),
        ({"request_time": True}, "request_time"),
        (
            {"events": ["view", "order", "buy"]},
            "unknown event 'order'",
        ),  # the model's vocabulary: 422, not 500
        ({"timestamps": [3, 2, 1]}, "timestamps must not decrease"),
    ],
)
def test_bad_fields_are_422(client: TestClient, extra: dict[str, Any], message: str) -> None:
    _error(client.post("/v1/recommend", json={"model": "timed", "history": HISTORY} | extra), message)


def test_fields_without_a_history_and_a_missing_column_are_422(client: TestClient) -> None:
    _error(
        client.post("/v1/recommend", json={"model": "timed", "user": "u1", "timestamps": [1]}),
        "send it with a history",
    )
    _error(
        client.post("/v1/recommend", json={"model": "timed", "history": HISTORY, "events": ["view"] * 3}),
        "per-event column 'timestamp'",
    )


def test_openapi_documents_the_fields(client: TestClient) -> None:
    body = client.get("/openapi.json").json()["components"]["schemas"]["RecommendRequest"]["properties"]
    assert {"timestamps", "events", "ratings", "request_time"} <= set(body)
    assert (
        body["timestamps"]["anyOf"][0]["maxItems"] == 50
        and "unix seconds" in body["timestamps"]["description"]
    )
    assert body["ratings"]["anyOf"][0]["items"]["minimum"] == 0
    response = client.get("/openapi.json").json()["components"]["schemas"]["RecommendResponse"]["properties"]
    assert "ignored_inputs" in response


def test_explained_because_entries_carry_event_and_time(client: TestClient, timed: Recommender) -> None:
    events, now = ["view", "view", "buy"], TIMES[-1] + 2 * 86_400
    req = {"history": HISTORY, "timestamps": TIMES, "events": events, "request_time": now, "k": 4}
    r = client.post(
        "/v1/recommend", json=req | {"model": "timed", "explain": {"method": "occlusion", "top": 3}}
    )
    assert r.status_code == 200, r.text
    want = timed.recommend(**req, explain="occlusion", event_verbs=VERBS)  # type: ignore[arg-type]
    assert want.explanations is not None
    said = dict(zip(HISTORY, zip(events, TIMES, strict=True), strict=True))  # item -> (event, timestamp)
    for x, w in zip(r.json()["items"], want.explanations, strict=True):
        got = x["explanation"]
        assert w is not None and len(got["because"]) == 3
        assert [(b["event"], b["timestamp"]) for b in got["because"]] == [
            said[b["item"]] for b in got["because"]
        ]
        assert got["reason"] == w.reason == reason(w.events, event_verbs=VERBS, now=now)
        assert got["reason"] is None or got["reason"].startswith(
            ("Because you looked at ", "Because you picked up ")
        )


def test_because_entries_have_null_event_and_time_without_the_fields(client: TestClient) -> None:
    r = client.post(
        "/v1/recommend", json={"model": "ids", "history": ["i1", "i2", "i3"], "k": 2, "explain": True}
    )
    assert r.status_code == 200, r.text
    assert all(
        b["event"] is None and b["timestamp"] is None
        for x in r.json()["items"]
        for b in x["explanation"]["because"]
    )
    spec = client.get("/openapi.json").json()["components"]["schemas"]["Attribution"]["properties"]
    assert "type" in spec["event"]["description"] and "unix seconds" in spec["timestamp"]["description"]


def test_the_servers_event_verbs_are_checked() -> None:
    with pytest.raises(ValueError, match="event verb 'pv'='saw {it}'"):
        ServingConfig(event_verbs={"pv": "saw {it}"})
    assert ServingConfig(event_verbs={" pv ": " saw "}).event_verbs == {"pv": "saw"}


def test_explain_rec_takes_an_ad_hoc_historys_events_and_times(
    client: TestClient, timed: Recommender
) -> None:
    events, now = ["view", "buy", "view"], TIMES[-1] + 3 * 86_400
    req = {"history": HISTORY, "timestamps": TIMES, "events": events, "request_time": now, "k": 3}
    r = client.post("/v1/explain-rec", json=req | {"model": "timed", "method": "occlusion", "top": 3})
    assert r.status_code == 200, r.text
    want = timed.recommend(**req, explain="occlusion", event_verbs=VERBS)  # type: ignore[arg-type]
    assert want.explanations is not None and r.json()["ignored_inputs"] == []
    assert [x["item"] for x in r.json()["items"]] == want.items  # scored with the sent times and events
    said = dict(zip(HISTORY, zip(events, TIMES, strict=True), strict=True))
    for x, w in zip(r.json()["items"], want.explanations, strict=True):
        assert w is not None
        assert [(b["event"], b["timestamp"]) for b in x["because"]] == [said[b["item"]] for b in x["because"]]
        assert x["reason"] == w.reason and [b["weight"] for b in x["because"]] == pytest.approx(
            [e.value for e in w.events[:3]]
        )
    # the explained score depends on the request's time, as the recommendation does
    one = {"model": "timed", "method": "occlusion", "item": want.items[0]} | req
    soon = client.post("/v1/explain-rec", json=one | {"request_time": TIMES[-1] + 60}).json()
    assert soon["items"][0]["score"] != r.json()["items"][0]["score"]


def test_explain_rec_checks_the_fields_like_recommend(client: TestClient) -> None:
    base = {"model": "timed", "history": HISTORY}
    _error(
        client.post("/v1/explain-rec", json=base | {"timestamps": TIMES[:2]}),
        "`timestamps` has 2 values for a history of 3 items",
    )
    _error(
        client.post("/v1/explain-rec", json=base | {"timestamps": TIMES, "events": ["view", "order", "buy"]}),
        "unknown event 'order'",
    )
    _error(
        client.post("/v1/explain-rec", json={"model": "timed", "user": "u1", "events": ["view"]}),
        "send it with a history",
    )
    plain = client.post(
        "/v1/explain-rec", json={"model": "ids", "history": ["i1", "i2"], "k": 2, "timestamps": [1, 2]}
    )
    assert plain.status_code == 200 and plain.json()["ignored_inputs"] == ["timestamps"]
    spec = client.get("/openapi.json").json()["components"]["schemas"]["ExplainRecRequest"]["properties"]
    assert spec["events"]["anyOf"][0]["maxItems"] == 50 and "request_time" in spec
