"""``/metrics``: scraped and parsed as Prometheus text; counts by route template and status, latency
histograms, micro-batch sizes, model load times, one registry per app (never the global one)."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommender
from attnrec.serving.app import ServingConfig, create_app

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(c: TestClient | httpx.Response) -> Samples:
    r = c if isinstance(c, httpx.Response) else c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def requests(samples: Samples, endpoint: str, method: str, status: int) -> float:
    return value(samples, "attnrec_http_requests_total", endpoint=endpoint, method=method, status=str(status))


def test_requests_are_counted_by_route_template_and_status(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(max_k=20))) as c:
        for u in ("u1", "u2", "u3"):
            assert c.post("/v1/recommend", json={"user": u, "k": 3}).status_code == 200
        assert c.post("/v1/recommend", json={"user": "u1", "k": 21}).status_code == 422
        assert c.get("/v1/recommend").status_code == 405
        assert c.get("/v1/recommend/secret-looking-path-123").status_code == 404
        assert c.get("/random/a1b2c3").status_code == 404
        assert c.request("FROB", "/healthz").status_code == 405
        m = scrape(c)
        assert requests(m, "/v1/recommend", "POST", 200) == 3
        assert requests(m, "/v1/recommend", "POST", 422) == 1
        assert requests(m, "/v1/recommend", "GET", 405) == 1
        assert requests(m, "unmatched", "GET", 404) == 2  # raw paths never become labels
        assert requests(m, "/healthz", "other", 405) == 1  # nor do made-up methods
        assert not [k for k in m if "secret-looking" in str(k) or "a1b2c3" in str(k) or "FROB" in str(k)]
        hist = value(m, "attnrec_http_request_duration_seconds_count", endpoint="/v1/recommend")
        assert hist == 5
        assert value(m, "attnrec_http_request_duration_seconds_sum", endpoint="/v1/recommend") > 0
        assert (
            value(m, "attnrec_http_request_duration_seconds_bucket", endpoint="/v1/recommend", le="+Inf") == 5
        )
        assert value(m, "attnrec_model_load_seconds", model="sas") > 0
        assert value(m, "attnrec_model_loaded_timestamp_seconds", model="sas") > 1.6e9
        assert value(m, "attnrec_batch_size_sum", model="sas") == 3  # warm-up is not a served batch
        assert requests(scrape(c), "/metrics", "GET", 200) == 1  # the first scrape is counted by the second


def test_batch_sizes_record_micro_batches(sasrec: Recommender) -> None:
    app = create_app({"sas": sasrec}, ServingConfig(max_wait_ms=30))

    async def main() -> httpx.Response:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
                rs = await asyncio.gather(
                    *(c.post("/v1/recommend", json={"user": f"u{i}", "k": 2}) for i in range(12))
                )
                assert all(r.status_code == 200 for r in rs)
                return await c.get("/metrics")

    m = scrape(asyncio.run(main()))
    batches = value(m, "attnrec_batch_size_count", model="sas")
    assert value(m, "attnrec_batch_size_sum", model="sas") == 12 and 1 <= batches < 12
    assert value(m, "attnrec_batch_size_bucket", model="sas", le="1.0") < batches  # some batches held several


def test_each_app_has_its_own_registry(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec})) as a, TestClient(create_app({"sas": sasrec})) as b:
        a.post("/v1/recommend", json={"user": "u1"})
        a.post("/v1/recommend", json={"user": "u2"})
        assert requests(scrape(a), "/v1/recommend", "POST", 200) == 2
        assert requests(scrape(b), "/v1/recommend", "POST", 200) == 0
    assert not [n for n in REGISTRY._names_to_collectors if n.startswith("attnrec_")]


def test_failed_load_and_unauthorized_requests_are_visible(sasrec: Recommender, tmp_path: Path) -> None:
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    key = "metrics-test-key-0123456789"
    cfg = ServingConfig(api_keys=frozenset({key}), protect_metrics=False)
    with TestClient(create_app({"sas": sasrec, "broken": bad}, cfg)) as c:
        assert c.post("/v1/recommend", json={"user": "u1"}).status_code == 401
        assert c.post("/v1/recommend", json={"user": "u1"}, headers={"X-API-Key": key}).status_code == 200
        for _ in range(200):
            if c.get("/readyz").json()["models"]["broken"] != "loading":
                break
        m = scrape(c)
        assert (
            requests(m, "/v1/recommend", "POST", 401) == 1 and requests(m, "/v1/recommend", "POST", 200) == 1
        )
        assert ("attnrec_model_load_seconds", (("model", "broken"),)) not in m  # never loaded: no load time


@pytest.mark.parametrize("name", ["attnrec_model_reloads_total", "attnrec_model_reload_failures_total"])
def test_reload_counters_start_at_zero_per_model(sasrec: Recommender, name: str) -> None:
    with TestClient(create_app({"sas": sasrec, "other": sasrec})) as c:
        m = scrape(c)
        assert (name, (("model", "sas"),)) in m and (name, (("model", "other"),)) in m
        assert value(m, name, model="sas") == 0


def test_a_client_gone_before_the_answer_is_not_a_server_error(sasrec_dir: Path) -> None:
    """A body cut off by the client (no answer sent) is counted as ``disconnected``, never as a 500."""
    import asyncio

    app = create_app({"sas": sasrec_dir})

    async def run() -> list[dict[str, object]]:
        sent: list[dict[str, object]] = []
        messages = iter(
            [{"type": "http.request", "body": b'{"user": ', "more_body": True}, {"type": "http.disconnect"}]
        )

        async def receive() -> dict[str, object]:
            return next(messages)

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/recommend",
            "raw_path": b"/v1/recommend",
            "query_string": b"",
            "http_version": "1.1",
            "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
            "scheme": "http",
            "server": ("t", 80),
            "client": ("c", 1),
            "root_path": "",
            "app": app,
        }
        await app(scope, receive, send)  # type: ignore[arg-type]
        return sent

    with TestClient(app) as c:  # the lifespan loads the model
        assert asyncio.run(run()) == []
        text = c.get("/metrics").text
    assert 'endpoint="/v1/recommend",method="POST",status="disconnected"' in text
    assert 'status="500"' not in text


def test_every_declared_metric_is_exposed_with_its_labels_and_help(sasrec: Recommender) -> None:
    # The reference page lists METRICS; a scrape must show each of them, as declared, and nothing
    # of attnrec's that the declarations (and so the page) miss.
    from attnrec.serving.prometheus import METRICS

    with TestClient(create_app({"sas": sasrec}, ServingConfig())) as c:
        assert c.post("/v1/recommend", json={"user": "u1", "k": 3}).status_code == 200
        families = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    created = {f"{m.name}_created" for m in METRICS}  # the client's creation time of each series
    ours = {name for name in families if name.startswith("attnrec_") and name not in created}
    assert ours == {m.name for m in METRICS}
    for m in METRICS:
        family = families[m.name]
        assert family.type == m.kind.__name__.lower() and family.documentation == m.help
        for sample in family.samples:
            if sample.name in (m.exposed, f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count"):
                assert set(sample.labels) - {"le"} == set(m.labels), (m.name, sample.labels)
