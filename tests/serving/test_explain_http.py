"""Per-item explanations over HTTP: ``/v1/recommend``'s ``explain`` and ``/v1/explain-rec``'s
``method``/``item``.

Answers equal the Python API's; refusals use the service's error shape (422 for a bad method, 404
for an unknown item, 501 for a model that cannot explain, POP here).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from attnrec.data.schema import Interactions
from attnrec.recommend import Recommender
from attnrec.recommend.explain_rec import explain_recommendation
from attnrec.serving.app import ServingConfig, create_app

VERB = "watched"


@pytest.fixture(scope="module")
def client(sasrec: Recommender, log: Interactions) -> Iterator[TestClient]:
    pop = Recommender("pop").fit(log, progress=False)
    cfg = ServingConfig(max_k=30, max_history=30, gc_freeze=False, reason_verb=VERB)
    with TestClient(create_app({"sas": sasrec, "pop": pop}, cfg)) as c:
        yield c


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["status"] == status and err["code"] == code, err
    return err  # type: ignore[no-any-return]


def test_recommend_without_explain_is_unchanged(client: TestClient, sasrec: Recommender) -> None:
    body = client.post("/v1/recommend", json={"user": "u3", "k": 5}).json()
    assert [x["item"] for x in body["items"]] == sasrec.recommend(user="u3", k=5).items
    assert all(x["explanation"] is None for x in body["items"])
    off = client.post("/v1/recommend", json={"user": "u3", "k": 5, "explain": False}).json()
    assert off == body


@pytest.mark.parametrize(
    "explain", [True, {"method": "occlusion", "top": 2}, {"method": "integrated_gradients"}]
)
def test_recommend_with_explain_equals_the_python_api(
    client: TestClient, sasrec: Recommender, explain: Any
) -> None:
    req = {"history": ["i4", "i5", "nope", "i6", "i7"], "k": 4}
    body = client.post("/v1/recommend", json={**req, "explain": explain})
    assert body.status_code == 200, body.text
    items = body.json()["items"]
    method = explain["method"] if isinstance(explain, dict) else "greedy"
    top = explain.get("top", 3) if isinstance(explain, dict) else 3
    want = sasrec.recommend(history=req["history"], k=4, explain=method, reason_verb=VERB)
    assert [x["item"] for x in items] == want.items and want.explanations is not None
    for x, w in zip(items, want.explanations, strict=True):
        assert w is not None
        got = x["explanation"]
        assert got["method"] == method and got["shared"] is False and got["reason"] == w.reason
        assert got["reason"] is None or got["reason"].startswith(f"Because you {VERB} ")
        assert [(b["item"], b["back"]) for b in got["because"]] == [(e.item, e.back) for e in w.events[:top]]
        assert np.allclose(
            [b["weight"] for b in got["because"]], [e.value for e in w.events[:top]], atol=1e-5
        )


def test_explain_rec_per_item_method_and_one_item(client: TestClient, sasrec: Recommender) -> None:
    body = client.post("/v1/explain-rec", json={"user": "u2", "k": 3, "top": 2, "method": "occlusion"}).json()
    want = explain_recommendation(sasrec, user="u2", k=3, top=2, method="occlusion", reason_verb=VERB)
    assert body["method"] == "occlusion" and body["shared"] is False and body["predicting"] is None
    assert [x["item"] for x in body["items"]] == want.recommendation.items
    for x, w in zip(body["items"], want.explanations, strict=True):
        assert x["reason"] == w.reason and [b["item"] for b in x["because"]] == [e.item for e in w.events]
    assert client.post("/v1/explain-rec", json={"user": "u2", "method": "rollout"}).json()["shared"] is True
    far = sasrec.recommend(user="u2", k=30).items[-1]  # ranked 30th: outside any default top-k
    one = client.post("/v1/explain-rec", json={"user": "u2", "method": "occlusion", "item": far}).json()
    w1 = explain_recommendation(sasrec, user="u2", method="occlusion", item=far, reason_verb=VERB)
    assert [x["item"] for x in one["items"]] == [far] and one["items"][0]["reason"] == w1.explanations[
        0
    ].reason
    assert np.isclose(one["items"][0]["score"], w1.recommendation.scores[0], atol=1e-5)


@pytest.mark.parametrize(
    ("path", "req", "status", "code", "message"),
    [
        ("/v1/recommend", {"user": "u1", "explain": {"method": "shapley"}}, 422, "invalid_request", "method"),
        ("/v1/recommend", {"user": "u1", "explain": {"top": 0}}, 422, "invalid_request", "top"),
        ("/v1/recommend", {"user": "u1", "explain": "yes"}, 422, "invalid_request", "explain"),
        (
            "/v1/recommend",
            {"user": "u1", "model": "pop", "explain": True},
            501,
            "cannot_explain",
            "(pop) scores items without reading the history",
        ),
        ("/v1/explain-rec", {"user": "u1", "method": "shapley"}, 422, "invalid_request", "method"),
        (
            "/v1/explain-rec",
            {"user": "u1", "method": "occlusion", "item": "no-such"},
            404,
            "unknown_item",
            "unknown item 'no-such'",
        ),
        (
            "/v1/explain-rec",
            {"user": "u1", "method": "occlusion", "model": "pop"},
            501,
            "cannot_explain",
            "(pop) scores items without reading the history",
        ),
    ],
)
def test_refusals(
    client: TestClient, path: str, req: dict[str, Any], status: int, code: str, message: str
) -> None:
    err = _error(client.post(path, json=req), status, code)
    assert message in err["message"] or any(message in d["loc"] for d in err["details"]), err


def test_one_item_histories_say_why_they_have_no_events(client: TestClient) -> None:
    items = client.post("/v1/recommend", json={"history": ["i4"], "k": 2, "explain": True}).json()["items"]
    assert all(
        x["explanation"]["because"] == [] and "at least two" in x["explanation"]["note"] for x in items
    )


def test_openapi_documents_explain(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "explain" in schemas["RecommendRequest"]["properties"]
    assert schemas["ExplainOptions"]["properties"]["method"]["enum"] == [
        "attention",
        "rollout",
        "occlusion",
        "greedy",
        "integrated_gradients",
    ]
    assert {"method", "item"} <= set(schemas["ExplainRecRequest"]["properties"])
    assert "501" in spec["paths"]["/v1/recommend"]["post"]["responses"]
