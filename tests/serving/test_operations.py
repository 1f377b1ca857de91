"""What operators read and rely on: the OpenAPI security schemes, strict integers and unique keys, the
cap on requests in flight, the new metrics, request IDs in JSON logs, and readiness that shows a
reload and flips to 503 on shutdown (in process; the real-socket behaviour is in test_shutdown.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommendation, Recommender
from attnrec.serving.app import FromDirectory, ServingConfig, create_app
from attnrec.serving.logs import JsonFormatter, request_id

KEY = "ops-client-key-0123456789"
ADMIN = "ops-admin-key-0123456789"


@pytest.fixture(scope="module")
def client(sasrec: Recommender) -> Iterator[TestClient]:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(gc_freeze=False))) as c:
        yield c


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/recommend", {"user": "u1", "k": 3.0}),
        ("/v1/similar-items", {"item": "i1", "k": 3.0}),
        ("/v1/explain-rec", {"user": "u1", "k": 3.0}),
        ("/v1/explain-rec", {"user": "u1", "top": 2.0}),
        ("/v1/recommend", {"user": "u1", "explain": {"top": 2.0}}),
    ],
)
def test_integers_written_with_a_fraction_are_refused(client: TestClient, path: str, body: Any) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text


def test_a_key_given_twice_is_refused(client: TestClient) -> None:
    for body in (b'{"user": "u1", "k": 1, "k": 100}', b'{"user": "u1", "explain": {"top": 1, "top": 2}}'):
        r = client.post("/v1/recommend", content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert "is given twice in one object" in r.json()["error"]["message"]


def _validator(spec: dict[str, Any], name: str) -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator({"$ref": f"#/components/schemas/{name}", **spec})


def test_cross_field_rules_are_in_the_schema(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for name in ("RecommendRequest", "ExplainRecRequest"):
        v = _validator(spec, name)
        assert v.is_valid({"user": "u1"}) and v.is_valid({"history": ["i1"], "timestamps": [1]})
        for bad in (
            {},
            {"user": None},
            {"user": "u1", "timestamps": [1]},
            {"user": "u1", "events": ["view"]},
        ):
            assert not v.is_valid(bad), (name, bad)
            assert client.post("/v1/recommend", json=bad).status_code == 422
    assert _validator(spec, "RecommendRequest").is_valid({"user": "u1", "timestamps": None})


def test_openapi_declares_the_key_schemes(sasrec: Recommender) -> None:
    cfg = ServingConfig(api_keys=frozenset({KEY}), admin_keys=frozenset({ADMIN}))
    spec = create_app({"sas": sasrec}, cfg).openapi()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["ApiKey"] == {**schemes["ApiKey"], "type": "apiKey", "in": "header", "name": "X-API-Key"}
    assert schemes["Bearer"]["scheme"] == "bearer"
    paths = spec["paths"]
    assert paths["/v1/recommend"]["post"]["security"] == [{"ApiKey": []}, {"Bearer": []}]
    assert paths["/v1/admin/reload"]["post"]["security"] == [{"ApiKey": []}, {"Bearer": []}]
    assert paths["/healthz"]["get"]["security"] == [] and paths["/metrics"]["get"]["security"]
    open_spec = create_app({"sas": sasrec}).openapi()  # no client key: the key is optional
    assert {} in open_spec["paths"]["/v1/recommend"]["post"]["security"]


def test_requests_over_the_in_flight_cap_get_503_with_retry_after(sasrec: Recommender) -> None:
    app = create_app({"sas": sasrec}, ServingConfig(max_in_flight=2, retry_after_s=3, gc_freeze=False))
    gate = threading.Event()

    async def main() -> list[httpx.Response]:
        async with app.router.lifespan_context(app):
            entry = app.state.entries["sas"]
            entry.loaded = dataclasses.replace(entry.loaded, obj=Gated(sasrec, gate))
            t = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=t, base_url="http://t", timeout=30) as c:
                held = [asyncio.create_task(c.post("/v1/recommend", json={"user": "u1"})) for _ in range(2)]
                await asyncio.sleep(0.3)
                over = await c.post("/v1/recommend", json={"user": "u1"})
                health = await c.get("/healthz")
                metrics = await c.get("/metrics")
                gate.set()
                return [over, health, metrics, *[await h for h in held]]

    over, health, metrics, *held = asyncio.run(main())
    assert over.status_code == 503 and over.headers["retry-after"] == "3", over.text
    assert over.json()["error"]["code"] == "overloaded"
    assert health.status_code == 200 and all(h.status_code == 200 for h in held)
    assert "attnrec_http_requests_in_flight 3.0" in metrics.text  # the two held and the scrape itself


class Gated:
    """Recommends like ``rec`` once ``gate`` is set."""

    def __init__(self, rec: Recommender, gate: Any) -> None:
        self.rec, self.gate = rec, gate

    def recommend_many(self, requests: list[Any]) -> list[Recommendation]:
        self.gate.wait(30)
        return self.rec.recommend_many(requests)


def test_metrics_show_process_inference_and_reload_outcome(sasrec_dir: Path) -> None:
    cfg = ServingConfig(admin_keys=frozenset({ADMIN}), gc_freeze=False)
    with TestClient(create_app({"m": FromDirectory.read(sasrec_dir)}, cfg)) as c:
        c.post("/v1/recommend", json={"user": "u1"})
        c.post("/v1/similar-items", json={"item": "i1"})
        c.post("/v1/admin/reload", json={"model": "m"}, headers={"X-API-Key": ADMIN})
        bad = c.post(
            "/v1/admin/reload",
            json={"model": "m", "path": str(sasrec_dir / "nope")},
            headers={"X-API-Key": ADMIN},
        )
        assert bad.status_code == 422
        text = c.get("/metrics", headers={"X-API-Key": ADMIN}).text
    for line in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "attnrec_http_requests_in_flight",
        'attnrec_inference_seconds_count{endpoint="/v1/recommend",model="m"}',
        'attnrec_inference_seconds_count{endpoint="/v1/similar-items",model="m"} 1.0',
        'attnrec_model_reloads_total{model="m"} 1.0',
        'attnrec_model_reload_failures_total{model="m"} 1.0',
        'attnrec_model_reload_last_success{model="m"} 0.0',
        'attnrec_model_reload_last_timestamp_seconds{model="m"}',
        "attnrec_reload_in_progress 0.0",
    ):
        assert line in text, line


def test_request_ids_are_echoed_and_logged_as_json(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    r = client.get("/healthz", headers={"X-Request-ID": "abc-123.x:y"})
    assert r.headers["x-request-id"] == "abc-123.x:y"
    for bad in ("has space", "x" * 200, "<script>"):
        r = client.get("/healthz", headers={"X-Request-ID": bad})
        assert r.headers["x-request-id"] != bad and len(r.headers["x-request-id"]) == 32
    assert client.post("/v1/recommend", json={}).headers["x-request-id"]  # errors carry one too
    token = request_id.set("req-7")
    try:
        record = logging.LogRecord(
            "attnrec.serving", logging.ERROR, __file__, 1, "reload %s refused", ("m",), None
        )
        line = json.loads(JsonFormatter().format(record))
    finally:
        request_id.reset(token)
    assert (
        line["request_id"] == "req-7" and line["message"] == "reload m refused" and line["level"] == "error"
    )
    assert line["time"].endswith("+00:00") and "T" in line["time"]


def test_access_lines_carry_the_request_id(sasrec: Recommender, caplog: pytest.LogCaptureFixture) -> None:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(access_log=True, gc_freeze=False))) as c:
        with caplog.at_level(logging.INFO, logger="attnrec.access"):
            c.post("/v1/recommend", json={"user": "u1"}, headers={"X-Request-ID": "trace-42"})
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records if r.name == "attnrec.access"]
    assert any(x["path"] == "/v1/recommend" and x["status"] == 200 and x["duration_ms"] > 0 for x in lines)


def test_readiness_shows_a_reload_and_flips_on_shutdown(sasrec: Recommender) -> None:
    app = create_app({"sas": sasrec}, ServingConfig(gc_freeze=False))

    async def main() -> list[httpx.Response]:
        t = httpx.ASGITransport(app=app)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=t, base_url="http://t") as c:
                ready = await c.get("/readyz")
                async with app.state.serving.reloading:
                    during = await c.get("/readyz")
                app.state.draining = True  # what `attnrec serve` sets on SIGTERM
                closing = await c.get("/readyz")
                head = await c.head("/readyz")
                return [ready, during, closing, head]

    ready, during, closing, head = asyncio.run(main())
    assert ready.status_code == 200 and ready.json()["reloading"] is False
    assert during.status_code == 200 and during.json()["reloading"] is True
    assert closing.status_code == 503 and closing.json()["status"] == "shutting down"
    assert head.status_code == 503
