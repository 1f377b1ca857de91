"""The HTTP service in-process (FastAPI TestClient): every endpoint and every 4xx path."""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
    from fastapi.testclient import TestClient

from attnrec.data.schema import DataError
from attnrec.recommend import Recommender
from attnrec.serving.app import ServingConfig, create_app
from attnrec.serving.batcher import MicroBatcher


class FakeExplainer:
    """Stands in for attnrec.recommend.Explainer (same explain signature, DataError for unknown IDs)."""

    def explain(self, user: object, item: object, feature: str | None = None) -> dict[str, Any]:
        if str(user) != "u1":
            raise DataError(f"unknown user {user!r}; explanations need IDs seen in training")
        return {
            "user": str(user),
            "item": str(item),
            "rating": 4.5,
            "text": f"great {feature or 'story'}",
            "feature": feature,
        }


@pytest.fixture(scope="module")
def client(sasrec: Recommender) -> Iterator[TestClient]:
    cfg = ServingConfig(max_k=50, max_history=30, max_list=40, max_body_bytes=20_000)
    with TestClient(create_app({"sas": sasrec, "peter": FakeExplainer()}, cfg)) as c:
        yield c


def _error(r: Any, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["status"] == status and body["code"] == code and body["message"]
    return body  # type: ignore[no-any-return]


def _as_python(body: dict[str, Any]) -> tuple[list[str], list[float], list[str | None]]:
    return (
        [x["item"] for x in body["items"]],
        [x["score"] for x in body["items"]],
        [x["title"] for x in body["items"]],
    )


@pytest.mark.parametrize(
    "req",
    [
        {"user": "u1", "k": 5},
        {"user": 1, "k": 5},  # integer IDs are accepted: unknown user 1 -> popularity
        {"history": ["i3", "i4", "not-an-item"], "k": 7},
        {"user": "ghost", "k": 4},
        {"user": "ghost", "history": ["i9"], "k": 4},
        {"user": "u2", "k": 3, "include": ["i1", "i2", "i3", "i9", "zzz"]},
        {"user": "u5", "k": 6, "exclude": ["i10", "i11"], "exclude_seen": False},
        {"history": ["unknown-only"], "k": 2},
    ],
)
def test_recommend_equals_python_api(client: TestClient, sasrec: Recommender, req: dict[str, Any]) -> None:
    r = client.post("/v1/recommend", json=req)
    assert r.status_code == 200, r.text
    body = r.json()
    want = sasrec.recommend(**{k: (str(v) if k == "user" else v) for k, v in req.items()})
    items, scores, titles = _as_python(body)
    assert items == want.items and titles == want.titles
    assert scores == pytest.approx(want.scores, rel=1e-5, abs=1e-5)
    assert body["unknown_items"] == want.unknown_items and body["fallback"] == want.fallback
    assert body["method"] == want.method and body["model"] == "sas"


def test_recommend_reports_unknown_items_and_fallbacks(client: TestClient) -> None:
    body = client.post("/v1/recommend", json={"history": ["i1", "bogus", 77], "k": 3}).json()
    assert body["unknown_items"] == ["bogus", "77"] and body["method"] == "model" and body["fallback"] is None
    body = client.post("/v1/recommend", json={"user": "nobody", "k": 3}).json()
    assert body["method"] == "popularity" and "unknown user" in body["fallback"]
    body = client.post("/v1/recommend", json={"user": "nobody", "history": ["i1"], "k": 3}).json()
    assert body["method"] == "model" and "scored from the given history" in body["fallback"]


def test_similar_items_equals_python_api(client: TestClient, sasrec: Recommender) -> None:
    r = client.post("/v1/similar-items", json={"item": "i4", "k": 6})
    assert r.status_code == 200, r.text
    want = sasrec.similar_items("i4", 6)
    items, scores, _ = _as_python(r.json())
    assert items == want.items and scores == pytest.approx(want.scores, abs=1e-6)
    assert r.json()["method"] == "embedding-cosine" and r.json()["item"] == "i4"


def test_explain(client: TestClient) -> None:
    r = client.post("/v1/explain", json={"user": "u1", "item": "i3", "feature": "plot"})
    assert r.status_code == 200, r.text
    assert r.json()["explanation"]["text"] == "great plot" and r.json()["model"] == "peter"
    _error(client.post("/v1/explain", json={"user": "ghost", "item": "i3"}), 404, "unknown_id")
    _error(client.post("/v1/explain", json={"model": "sas", "user": "u1", "item": "i3"}), 501, "no_explainer")
    _error(client.post("/v1/recommend", json={"model": "peter", "user": "u1"}), 400, "unsupported")
    _error(client.post("/v1/similar-items", json={"model": "peter", "item": "i1"}), 400, "unsupported")


def test_explain_without_explainer_is_501(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec})) as c:
        err = _error(c.post("/v1/explain", json={"user": "u1", "item": "i3"}), 501, "no_explainer")
        assert "no explanation model is loaded" in err["message"]


def test_models_health_ready_docs(client: TestClient) -> None:
    body = client.get("/v1/models").json()
    sas = next(m for m in body["models"] if m["name"] == "sas")
    assert (
        sas["model"] == "sasrec" and sas["status"] == "ready" and sas["dataset"]["name"] == "ring-synthetic"
    )
    assert sas["n_items"] == 60 and sas["config"]["hidden"] == 16 and sas["backend"] == "torch"
    assert set(sas["capabilities"]) == {"recommend", "similar-items"}
    ev = sas["evaluations"][0]
    assert ev["protocol"]["candidates"] == "full" and "NDCG@10" in ev["metrics"] and ev["target"] == "test"
    assert sas["training"]["best_epoch"] >= 1
    assert body["limits"]["max_k"] == 50
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz").json()
    assert ready == {"status": "ready", "models": {"sas": "ready", "peter": "ready"}, "reloading": False}
    spec = client.get("/openapi.json").json()
    assert {"/v1/recommend", "/v1/similar-items", "/v1/explain", "/v1/models", "/healthz", "/readyz"} <= set(
        spec["paths"]
    )
    assert client.get("/docs").status_code == 200


@pytest.mark.parametrize(
    "req,loc",
    [
        ({"user": "u1", "k": 0}, "k"),
        ({"user": "u1", "k": "many"}, "k"),
        ({"user": "u1", "top_k": 3}, "top_k"),
        ({"k": 3}, "body"),
        ({"history": "i1,i2"}, "history"),
        ({"user": True}, "user"),
        ({"user": "u1", "exclude_seen": "perhaps"}, "exclude_seen"),
        ({"user": {"id": 1}}, "user"),
    ],
)
def test_recommend_validation_errors(client: TestClient, req: dict[str, Any], loc: str) -> None:
    err = _error(client.post("/v1/recommend", json=req), 422, "invalid_request")
    assert any(d["loc"].startswith(loc) for d in err["details"]), err


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/similar-items", {"item": ""}),
        ("/v1/similar-items", {"item": "   "}),
        ("/v1/recommend", {"user": ""}),
        ("/v1/explain", {"user": "u1", "item": " "}),
    ],
)
def test_a_blank_id_is_a_422_not_a_server_error(client: TestClient, path: str, body: dict[str, str]) -> None:
    # similar_items refuses a blank item by the library's ID rule; the HTTP schema now says so first
    # (it was a 500 from the unmapped ValueError)
    err = _error(client.post(path, json=body), 422, "invalid_request")
    assert "must not be empty" in str(err)


def test_limits_and_other_4xx(client: TestClient) -> None:
    err = _error(client.post("/v1/recommend", json={"user": "u1", "k": 51}), 422, "limit_exceeded")
    assert "max_k=50" in err["message"]
    err = _error(client.post("/v1/recommend", json={"history": ["i1"] * 31}), 422, "limit_exceeded")
    assert "history has 31 items" in err["message"]
    _error(client.post("/v1/recommend", json={"user": "u1", "include": ["i1"] * 41}), 422, "limit_exceeded")
    _error(client.post("/v1/recommend", json={"user": "u1", "exclude": ["i1"] * 41}), 422, "limit_exceeded")
    _error(client.post("/v1/similar-items", json={"item": "i1", "k": 51}), 422, "limit_exceeded")
    _error(
        client.post("/v1/recommend", json={"user": "u1", "exclude": ["x" * 1000] * 40}), 413, "body_too_large"
    )
    err = _error(
        client.post("/v1/recommend", content=b"{not json", headers={"content-type": "application/json"}),
        422,
        "invalid_request",
    )
    assert "malformed JSON" in err["message"]
    _error(client.post("/v1/recommend", json={"model": "nope", "user": "u1"}), 404, "unknown_model")
    err = _error(client.post("/v1/similar-items", json={"item": "nope"}), 404, "unknown_item")
    assert "nope" in err["message"]
    _error(client.post("/v1/similar-items", json={"k": 3}), 422, "invalid_request")
    _error(client.post("/v1/explain", json={"user": "u1"}), 422, "invalid_request")
    _error(client.get("/v1/recommend"), 405, "method_not_allowed")
    _error(client.get("/v2/anything"), 404, "not_found")


def test_directory_models_load_in_background(sasrec_dir: Path, sasrec: Recommender, tmp_path: Path) -> None:
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    cfg = ServingConfig(allow_unsigned=True)  # a directory without a manifest: its JSON is what fails
    with TestClient(create_app({"disk": sasrec_dir, "broken": bad}, cfg)) as c:
        assert c.get("/healthz").status_code == 200
        for _ in range(200):
            states = c.get("/readyz").json()["models"]
            if states["disk"] != "loading" and states["broken"] != "loading":
                break
            time.sleep(0.05)
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["models"] == {"disk": "ready", "broken": "failed"}
        body = c.post("/v1/recommend", json={"model": "disk", "user": "u4", "k": 5}).json()
        assert [x["item"] for x in body["items"]] == sasrec.recommend(user="u4", k=5).items
        err = _error(c.post("/v1/recommend", json={"model": "broken", "user": "u4"}), 503, "model_failed")
        assert "corrupted JSON" in err["message"]
        assert str(tmp_path) not in err["message"] and "<model dir>" in err["message"]  # no local paths
        models = {m["name"]: m for m in c.get("/v1/models").json()["models"]}
        assert models["broken"]["status"] == "failed" and models["disk"]["model"] == "sasrec"


def test_model_still_loading_is_503(sasrec_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import attnrec.serving.lifecycle as lifecycle

    release = threading.Event()
    real_load = lifecycle.load

    def slow_load(path: Any, device: str = "cpu", **kw: Any) -> Any:
        release.wait(30)
        return real_load(path, device, **kw)

    monkeypatch.setattr(lifecycle, "load", slow_load)
    with TestClient(create_app({"disk": sasrec_dir})) as c:
        assert c.get("/healthz").status_code == 200
        _error(c.post("/v1/recommend", json={"user": "u4"}), 503, "model_loading")
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["models"] == {"disk": "loading"}
        assert c.get("/v1/models").json()["models"][0]["status"] == "loading"
        release.set()
        for _ in range(200):
            if c.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        assert c.post("/v1/recommend", json={"user": "u4"}).status_code == 200


def test_micro_batcher_gathers_and_isolates_failures() -> None:
    calls: list[list[int]] = []

    def work(xs: list[int]) -> list[int]:
        calls.append(list(xs))
        time.sleep(0.02)
        if 13 in xs:
            raise ValueError("thirteen")
        return [x * 2 for x in xs]

    async def main() -> list[Any]:
        b: MicroBatcher[int, int] = MicroBatcher(work, ThreadPoolExecutor(1), max_batch=8, max_wait=0.0)
        b.start()
        out = await asyncio.gather(*(b.submit(x) for x in range(20)), return_exceptions=True)
        await b.stop()
        return out

    out = asyncio.run(main())
    assert [o for i, o in enumerate(out) if i != 13] == [2 * i for i in range(20) if i != 13]
    assert isinstance(out[13], ValueError)
    assert max(len(c) for c in calls) > 1  # requests queued while the worker was busy went together
    assert all(len(c) <= 8 for c in calls)


def test_batched_http_answers_equal_single(sasrec: Recommender) -> None:
    """Concurrent requests through the micro-batcher give the same answers as one by one."""
    import httpx

    app = create_app({"sas": sasrec}, ServingConfig(max_wait_ms=20))
    reqs = [{"user": f"u{i}", "k": 5} for i in range(16)] + [
        {"history": [f"i{i}", f"i{i + 1}"], "k": 4} for i in range(8)
    ]

    async def main() -> list[dict[str, Any]]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                rs = await asyncio.gather(*(c.post("/v1/recommend", json=r) for r in reqs))
            entry = app.state.entries["sas"]
            assert entry.batcher.batches < len(reqs)  # some requests were scored together
            return [r.json() for r in rs]

    for req, body in zip(reqs, asyncio.run(main()), strict=True):
        want = sasrec.recommend(**req)
        assert [x["item"] for x in body["items"]] == want.items


def test_inline_scoring_on_the_event_loop(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(inline=True))) as c:
        assert c.get("/v1/models").json()["limits"]["inline"] is True
        for req in ({"user": "u6", "k": 5}, {"history": ["i2", "i3"], "k": 4}):
            body = c.post("/v1/recommend", json=req).json()
            assert [x["item"] for x in body["items"]] == sasrec.recommend(**req).items  # type: ignore[arg-type]


def test_app_can_be_started_twice(sasrec: Recommender) -> None:
    app = create_app({"sas": sasrec})
    for _ in range(2):
        with TestClient(app) as c:
            assert c.post("/v1/recommend", json={"user": "u1", "k": 2}).status_code == 200
            assert c.post("/v1/similar-items", json={"item": "i1", "k": 2}).status_code == 200
