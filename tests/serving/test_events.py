"""Events in over HTTP and live histories (issue: live user histories between retrains).

``POST /v1/events`` stores a batch (each event checked on its own), the next ``/v1/recommend`` for
that user reads it without a retrain and leaves the just-seen items out; ``user`` + ``history``
appends; ``DELETE /v1/users/{user}`` (admin) forgets a user; the history page shows the events; a
server without a store does not serve them; two apps (and two real server processes) on one Redis
share their users' events; and an acknowledged event survives ``kill -9`` of a real server (SQLite).
"""

from __future__ import annotations

import copy
import os
import signal
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from real_server import running_server

from redis_server import redis_server, require_redis

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommender
from attnrec.serving.app import ServingConfig, create_app
from attnrec.serving.auth import admin_allowed
from attnrec.serving.event_routes import router as events_router
from attnrec.store import RedisStore, SqliteStore

KEY = "k-0123456789abcdef-events"
T0 = 2_000_000_000  # after every training event: appended at the end of the history


@pytest.fixture
def sas(sasrec: Recommender) -> Recommender:
    return copy.deepcopy(sasrec)  # serving attaches the store to the object: keep the shared fixture clean


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "events.db")
    yield s
    s.close()


@pytest.fixture
def client(sas: Recommender, store: SqliteStore) -> Iterator[TestClient]:
    with TestClient(create_app({"sas": sas}, ServingConfig(store=store, unauthenticated_admin=True))) as c:
        yield c


def trained(rec: Recommender, user: str) -> list[str]:
    assert rec.users_ is not None and rec.items_ is not None and rec.histories_ is not None
    return rec.items_.to_external(rec.histories_[rec.users_.get(user)])


def top(client: TestClient, body: dict[str, Any]) -> list[str]:
    r = client.post("/v1/recommend", json=body)
    assert r.status_code == 200, r.text
    return [x["item"] for x in r.json()["items"]]


def test_new_events_change_the_next_answer_without_a_retrain(client: TestClient, sas: Recommender) -> None:
    before = top(client, {"user": "u3", "k": 10})
    seen = before[:3]  # the user just looked at the top three
    events = [{"user": "u3", "item": i, "timestamp": T0 + n, "event": "view"} for n, i in enumerate(seen)]
    r = client.post("/v1/events", json={"events": events})
    assert r.status_code == 200, r.text
    assert r.json() == {"accepted": 3, "errors": [], "ignored": [], "model": "sas"}
    after = top(client, {"user": "u3", "k": 10})
    assert not set(seen) & set(after)  # just-seen items are excluded
    assert after == top(client, {"history": trained(sas, "u3") + seen, "k": 10})  # the live history is scored
    assert after != before


def test_a_history_sent_with_a_user_is_appended(client: TestClient, sas: Recommender) -> None:
    sent = [i for i in sas.items_.to_list() if i not in trained(sas, "u5")][:2]  # type: ignore[union-attr]
    got = top(client, {"user": "u5", "history": sent, "k": 8})
    assert got == top(client, {"history": trained(sas, "u5") + sent, "k": 8})
    assert not set(trained(sas, "u5")) & set(got)
    assert top(client, {"user": "u5", "history": sent, "k": 8, "stored_history": False}) == top(
        client, {"history": sent, "k": 8}
    )


def test_each_event_is_checked_on_its_own(client: TestClient, store: SqliteStore) -> None:
    events: list[Any] = [
        {"user": "u1", "item": "i2", "timestamp": T0},
        {"user": "u1"},  # no item
        {"user": True, "item": "i2"},
        {"user": "u1", "item": "i3", "rating": -1},
        {"user": "u1", "item": "i3", "colour": "red"},
        {"user": "u1", "item": "never-seen-item", "timestamp": T0 + 1},
        {"user": 7, "item": "i9", "event": "cart", "rating": 4.5},  # an integer ID, no timestamp: now
    ]
    r = client.post("/v1/events", json={"events": events})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["accepted"] == 3
    assert [e["index"] for e in body["errors"]] == [1, 2, 3, 4]
    assert "item" in body["errors"][0]["message"] and "colour" in body["errors"][3]["message"]
    assert body["ignored"] == [
        {
            "index": 5,
            "item": "never-seen-item",
            "reason": "unknown item: stored for the next retrain, not scored",
        }
    ]
    frame = store.export()
    assert sorted(frame["item"]) == ["i2", "i9", "never-seen-item"]
    assert frame.loc[frame["user"] == "7", "event"].tolist() == ["cart"]


@pytest.mark.parametrize(
    "body",
    [{}, {"events": "nope"}, {"events": [1, 2]}, {"events": [{"user": "u", "item": "i"}], "extra": 1}, []],
)
def test_a_bad_body_is_a_422_in_the_error_shape(client: TestClient, body: Any) -> None:
    r = client.post("/v1/events", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["status"] == 422


def test_too_many_events_are_refused(client: TestClient) -> None:
    r = client.post("/v1/events", json={"events": [{"user": "u", "item": "i"}] * 10_001})
    assert r.status_code in (413, 422)  # the body limit (1 MiB) or the schema's cap, whichever binds first


def test_forgetting_a_user_deletes_its_events_and_training_history(
    client: TestClient, store: SqliteStore
) -> None:
    client.post("/v1/events", json={"events": [{"user": "u2", "item": "i1", "timestamp": T0}]})
    r = client.delete("/v1/users/u2")
    assert r.status_code == 200, r.text
    assert r.json()["deleted_events"] == 1 and store.forgotten() == ["u2"]
    body = client.post("/v1/recommend", json={"user": "u2", "k": 3}).json()
    assert body["method"] == "popularity" and body["fallback"] == "forgotten user 'u2': most popular items"
    assert client.get("/v1/users/u2/history").status_code == 404
    assert client.delete("/v1/users/u2/history").status_code == 405  # the history page's path: not a user


def test_the_history_page_shows_the_stored_events(client: TestClient, sas: Recommender) -> None:
    client.post("/v1/events", json={"events": [{"user": "u4", "item": "i7", "timestamp": T0}]})
    got = client.get("/v1/users/u4/history", params={"limit": 1000}).json()
    assert [x["item"] for x in got["items"]] == trained(sas, "u4") + ["i7"]
    assert client.get("/v1/users/brand-new/history").status_code == 404
    client.post("/v1/events", json={"events": [{"user": "brand-new", "item": "i1"}]})
    assert [x["item"] for x in client.get("/v1/users/brand-new/history").json()["items"]] == ["i1"]


def test_a_store_that_cannot_be_reached_is_a_503(client: TestClient, store: SqliteStore) -> None:
    store.close()
    for r in (
        client.post("/v1/events", json={"events": [{"user": "u1", "item": "i1"}]}),
        client.post("/v1/recommend", json={"user": "u1", "k": 3}),
    ):
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "store_unavailable"


def test_a_server_without_a_store_has_no_event_routes(sas: Recommender) -> None:
    with TestClient(create_app({"sas": sas})) as c:
        assert c.post("/v1/events", json={"events": []}).status_code == 404
        assert c.delete("/v1/users/u1").status_code in (404, 405)
        assert "/v1/events" not in c.get("/openapi.json").json()["paths"]


def test_events_need_a_key_and_forgetting_is_an_admin_route(sas: Recommender, store: SqliteStore) -> None:
    admin = "a-0123456789abcdef-events"
    cfg = ServingConfig(store=store, api_keys=frozenset({KEY}), admin_keys=frozenset({admin}))
    with TestClient(create_app({"sas": sas}, cfg)) as c:
        assert c.post("/v1/events", json={"events": []}).status_code == 401
        assert c.delete("/v1/users/u1").status_code == 401
        assert c.post("/v1/events", json={"events": []}, headers={"X-API-Key": KEY}).status_code == 200
        r = c.delete("/v1/users/u1", headers={"X-API-Key": KEY})  # a client key cannot forget a user
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_key_required"
        assert c.delete("/v1/users/u1", headers={"X-API-Key": admin}).status_code == 200
    with TestClient(create_app({"sas": sas}, ServingConfig(store=store))) as c:  # no keys: admin refused
        r = c.delete("/v1/users/u1")
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"
    forget = next(r for r in events_router.routes if isinstance(r, APIRoute) and r.name == "forget_user")
    assert "admin" in forget.tags and admin_allowed in [d.dependency for d in forget.dependencies]


def test_two_servers_on_one_redis_share_their_users_events(
    sas: Recommender, sasrec: Recommender, tmp_path: Path
) -> None:
    with redis_server(require_redis(os.environ), tmp_path) as url:
        ns = f"t{uuid.uuid4().hex[:8]}"
        one, two = RedisStore(url, namespace=ns), RedisStore(url, namespace=ns)
        other = copy.deepcopy(sasrec)
        with (
            TestClient(create_app({"sas": sas}, ServingConfig(store=one))) as a,
            TestClient(create_app({"sas": other}, ServingConfig(store=two))) as b,
        ):
            before = top(b, {"user": "u6", "k": 5})
            assert (
                a.post("/v1/events", json={"events": [{"user": "u6", "item": before[0]}]}).json()["accepted"]
                == 1
            )
            after = top(b, {"user": "u6", "k": 5})
            assert before[0] not in after and after == top(a, {"user": "u6", "k": 5})


def test_an_acknowledged_event_survives_kill_9_of_the_server(sasrec_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "events.db"
    args = ["--model", f"sas={sasrec_dir}", "--store", str(db)]
    with running_server(args) as (url, proc):
        r = httpx.post(f"{url}/v1/events", json={"events": [{"user": "u1", "item": "i9", "timestamp": T0}]})
        assert r.status_code == 200 and r.json()["accepted"] == 1
        os.kill(proc.pid, signal.SIGKILL)  # no shutdown, no flush: only what was durable survives
        proc.wait(10)
    with running_server(args) as (url, _):
        got = httpx.get(f"{url}/v1/users/u1/history", params={"limit": 1}).json()
        assert [x["item"] for x in got["items"]] == ["i9"]
        answer = httpx.post(f"{url}/v1/recommend", json={"user": "u1", "k": 10}).json()
        assert "i9" not in [x["item"] for x in answer["items"]]


def test_two_server_processes_share_one_redis_store(sasrec_dir: Path, tmp_path: Path) -> None:
    with redis_server(require_redis(os.environ), tmp_path) as store:
        args = ["--model", f"sas={sasrec_dir}", "--store", store]
        with running_server(args) as (one, _), running_server(args) as (two, _):
            before = [
                x["item"]
                for x in httpx.post(f"{two}/v1/recommend", json={"user": "u6", "k": 5}).json()["items"]
            ]
            sent = httpx.post(f"{one}/v1/events", json={"events": [{"user": "u6", "item": before[0]}]})
            assert sent.status_code == 200 and sent.json()["accepted"] == 1
            after = [
                x["item"]
                for x in httpx.post(f"{two}/v1/recommend", json={"user": "u6", "k": 5}).json()["items"]
            ]
            assert before[0] not in after  # the other process sees the event at once
            history = httpx.get(f"{two}/v1/users/u6/history", params={"limit": 1}).json()
            assert [x["item"] for x in history["items"]] == [before[0]]
