"""The web page's endpoints (issue 21, part 4): item search, a user's stored history, recommendations
with their reasons (``/v1/explain-rec``), and the page itself (``/ui``): answers equal to the Python
API, bad input a 4xx in the one error shape, API keys enforced, strict headers on the page."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
    from fastapi.testclient import TestClient

from attnrec.data.schema import Interactions
from attnrec.recommend import Recommender
from attnrec.recommend.explain_rec import explain_recommendation
from attnrec.serving.app import ServingConfig, create_app
from attnrec.serving.page import CSP

KEY = "k-0123456789abcdef-browse"
UI_DIR = Path(__file__).resolve().parents[2] / "src" / "attnrec" / "serving" / "ui"


class FakeExplainer:
    def explain(self, user: object, item: object, feature: str | None = None) -> dict[str, Any]:
        return {"text": f"{user} {item} {feature}"}


@pytest.fixture(scope="module")
def pop(log: Interactions) -> Recommender:
    return Recommender("pop").fit(log, progress=False)  # closed form: no attention


@pytest.fixture(scope="module")
def client(sasrec: Recommender, pop: Recommender) -> Iterator[TestClient]:
    cfg = ServingConfig(max_k=20, max_history=30, gc_freeze=False)
    with TestClient(create_app({"sas": sasrec, "pop": pop, "peter": FakeExplainer()}, cfg)) as c:
        yield c


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The one error shape, with ``status`` and ``code``."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert err["status"] == status and err["code"] == code, err
    assert set(err) == {"status", "code", "message", "details"}
    return err  # type: ignore[no-any-return]


def _by_popularity(rec: Recommender) -> list[str]:
    """Every item, most popular first (ties in catalog order): the order search results come in."""
    assert rec.items_ is not None and rec.popularity_ is not None
    order = sorted(range(1, len(rec.items_) + 1), key=lambda i: (-float(rec.popularity_[i]), i))
    return rec.items_.to_external(order)


# -- GET /v1/items -------------------------------------------------------------------------------
def test_search_by_title_is_case_insensitive_most_popular_first(
    client: TestClient, sasrec: Recommender
) -> None:
    r = client.get("/v1/items", params={"q": "NUMBER 1", "limit": 100})
    assert r.status_code == 200, r.text
    want = [i for i in _by_popularity(sasrec) if "number 1" in (sasrec.titles_.get(i) or "").lower()]
    assert len(want) > 3  # Item number 10, 12, ...: the case is a real search
    body = r.json()
    assert [x["item"] for x in body["items"]] == want and body["more"] is False
    assert all(x["title"] == sasrec.titles_[x["item"]] for x in body["items"])
    assert body["model"] == "sas" and body["query"] == "NUMBER 1"


def test_search_by_id_puts_the_exact_item_first(client: TestClient, sasrec: Recommender) -> None:
    body = client.get("/v1/items", params={"q": "i3"}).json()
    assert body["items"] == [{"item": "i3", "title": None}]  # odd items have no title; no title says "i3"
    body = client.get("/v1/items", params={"q": "i4", "limit": 5}).json()
    assert body["items"][0] == {"item": "i4", "title": "Item number 4"}
    assert client.get("/v1/items", params={"q": "I3"}).json()["items"] == []  # IDs are exact


def test_search_without_a_query_lists_the_most_popular(client: TestClient, sasrec: Recommender) -> None:
    body = client.get("/v1/items", params={"limit": 4}).json()
    assert [x["item"] for x in body["items"]] == _by_popularity(sasrec)[:4] and body["more"] is True
    limited = client.get("/v1/items", params={"q": "number", "limit": 2}).json()
    assert len(limited["items"]) == 2 and limited["more"] is True
    assert client.get("/v1/items", params={"q": "no such title"}).json() == {
        "model": "sas",
        "query": "no such title",
        "items": [],
        "more": False,
    }


def test_search_an_explainers_items_and_refuse_objects_without_a_catalog(client: TestClient) -> None:
    err = _error(client.get("/v1/items", params={"model": "peter", "q": "x"}), 400, "unsupported")
    assert "no item catalog" in err["message"]
    _error(client.get("/v1/items", params={"model": "nope"}), 404, "unknown_model")


@pytest.mark.parametrize(
    ("query", "loc"),
    [
        ("limit=0", "query.limit"),
        ("limit=101", "query.limit"),
        ("limit=many", "query.limit"),
        ("q=a%01b", "query.q"),
        (f"q={'x' * 257}", "query.q"),
        ("q=x&sort=title", "query.sort"),
        ("q=a&q=b", "query.q"),
    ],
)
def test_search_refuses_bad_queries(client: TestClient, query: str, loc: str) -> None:
    err = _error(client.get(f"/v1/items?{query}"), 422, "invalid_request")
    assert [d["loc"] for d in err["details"]] == [loc], err


# -- GET /v1/users/{user}/history ----------------------------------------------------------------
def test_history_is_the_stored_one_most_recent_last(client: TestClient, sasrec: Recommender) -> None:
    assert sasrec.users_ is not None and sasrec.histories_ is not None and sasrec.items_ is not None
    stored = sasrec.items_.to_external(sasrec.histories_[sasrec.users_.get("u3")])
    body = client.get("/v1/users/u3/history", params={"limit": 1000}).json()
    assert body["user"] == "u3" and body["model"] == "sas" and body["length"] == len(stored)
    assert [x["item"] for x in body["items"]] == stored
    assert all(x["title"] == sasrec.titles_.get(x["item"]) for x in body["items"])
    assert all(x["signals"] is None for x in body["items"])  # the model reads no declared signal
    last = client.get("/v1/users/u3/history", params={"limit": 2}).json()
    assert [x["item"] for x in last["items"]] == stored[-2:] and last["length"] == len(stored)


def test_history_of_an_unknown_user_is_404(client: TestClient) -> None:
    err = _error(client.get("/v1/users/nobody/history"), 404, "unknown_user")
    assert "unknown user 'nobody'" in err["message"]
    _error(client.get("/v1/users/a%2Fb/history"), 404, "unknown_user")  # an ID with a slash is still one ID


@pytest.mark.parametrize(
    ("url", "status", "code"),
    [
        ("/v1/users/u3/history?limit=0", 422, "invalid_request"),
        ("/v1/users/u3/history?limit=1001", 422, "invalid_request"),
        ("/v1/users/u3/history?mode=all", 422, "invalid_request"),
        ("/v1/users/u%01/history", 422, "invalid_request"),
        ("/v1/users/u3/history?model=peter", 400, "unsupported"),
        ("/v1/users/u3/history?model=gone", 404, "unknown_model"),
    ],
)
def test_history_refuses_bad_requests(client: TestClient, url: str, status: int, code: str) -> None:
    _error(client.get(url), status, code)


# -- POST /v1/explain-rec ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "req",
    [
        {"user": "u1", "k": 5, "top": 3},
        {"history": ["i4", "i5", "nope", "i6"], "k": 4},
        {"user": "u2", "history": ["i10", "i11"], "k": 3, "top": 1},
    ],
)
def test_explain_rec_equals_the_python_explanation(
    client: TestClient, sasrec: Recommender, req: dict[str, Any]
) -> None:
    r = client.post("/v1/explain-rec", json={"model": "sas", "method": "attention", **req})
    assert r.status_code == 200, r.text
    body = r.json()
    want = explain_recommendation(
        sasrec,
        user=req.get("user"),
        history=req.get("history"),
        k=req["k"],
        top=req.get("top", 10),
        method="attention",
    )
    rec = want.recommendation
    assert body["method"] == "attention" and body["shared"] is True
    assert [x["item"] for x in body["items"]] == rec.items
    assert [x["title"] for x in body["items"]] == rec.titles
    assert np.allclose([x["score"] for x in body["items"]], rec.scores, atol=1e-5)
    because = [(a.item, a.title) for a in want.attended]
    assert len(because) == min(req.get("top", 10), want.window)
    for x in body["items"]:  # one shared list, strongest first
        assert [(b["item"], b["title"]) for b in x["because"]] == because
        assert np.allclose([b["weight"] for b in x["because"]], [a.weight for a in want.attended], atol=1e-6)
        weights = [b["weight"] for b in x["because"]]
        assert weights == sorted(weights, reverse=True)
    assert body["unknown_items"] == rec.unknown_items and body["fallback"] == rec.fallback
    assert body["predicting"] == want.predicting and body["window"] == want.window


def test_explain_rec_without_known_items_falls_back_like_recommend(client: TestClient) -> None:
    req = {"history": ["nope", "nada"], "k": 3}
    body = client.post("/v1/explain-rec", json=req).json()
    plain = client.post("/v1/recommend", json=req).json()
    assert [x["item"] for x in body["items"]] == [x["item"] for x in plain["items"]]  # the most popular
    assert all(x["because"] == [] for x in body["items"]) and body["predicting"] is None
    assert body["fallback"] == plain["fallback"] and "no known items" in body["fallback"]
    assert body["unknown_items"] == ["nope", "nada"]


def test_explain_rec_agrees_with_recommend(client: TestClient) -> None:
    req = {"user": "u7", "k": 6}
    recs = client.post("/v1/recommend", json=req).json()["items"]
    why = client.post("/v1/explain-rec", json=req).json()["items"]
    assert [x["item"] for x in why] == [x["item"] for x in recs]


@pytest.mark.parametrize(
    ("req", "status", "code", "message"),
    [
        ({"user": "nobody"}, 404, "unknown_user", "unknown user 'nobody'"),
        ({"user": "u1", "k": 21}, 422, "limit_exceeded", "max_k=20"),
        ({"history": ["i1"] * 31}, 422, "limit_exceeded", "at most 30"),
        ({"user": "u1", "top": 51}, 422, "invalid_request", "top"),
        ({"user": "u1", "top": True}, 422, "invalid_request", "top"),
        ({"k": 3}, 422, "invalid_request", "give a `user` or a `history`"),
        ({"user": "u1", "why": "attention"}, 422, "invalid_request", "unknown field"),
        (
            {"user": "u1", "model": "pop", "method": "attention"},
            501,
            "cannot_explain",
            "(pop) has no attention weights",
        ),
        ({"user": "u1", "feature": "x", "model": "peter"}, 422, "invalid_request", "unknown field"),
        ({"user": "u1", "model": "peter"}, 400, "unsupported", "does not support recommend"),
    ],
)
def test_explain_rec_refusals(
    client: TestClient, req: dict[str, Any], status: int, code: str, message: str
) -> None:
    err = _error(client.post("/v1/explain-rec", json=req), status, code)
    assert message in err["message"], err


def test_openapi_documents_the_endpoints_and_their_limits(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/v1/items", "/v1/users/{user}/history", "/v1/explain-rec"} <= set(spec["paths"])
    assert not {"/", "/ui"} & set(spec["paths"])  # the page is not part of the JSON API
    body = spec["components"]["schemas"]["ExplainRecRequest"]["properties"]
    assert body["k"]["maximum"] == 20 and body["top"]["maximum"] == 50
    assert any(b.get("maxItems") == 30 for b in body["history"]["anyOf"])
    params = {p["name"]: p for p in spec["paths"]["/v1/items"]["get"]["parameters"]}
    assert params["limit"]["schema"]["maximum"] == 100 and params["q"]["schema"]["maxLength"] == 256
    answer = spec["components"]["schemas"]["ExplainRecResponse"]["properties"]
    assert {"method", "shared", "items"} <= set(answer)


def test_history_requests_are_counted_by_route_template(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(gc_freeze=False))) as c:
        for user in ("u1", "u2", "someone"):
            c.get(f"/v1/users/{user}/history")
        metrics = c.get("/metrics").text
    assert 'endpoint="/v1/users/{user:path}/history",method="GET",status="200"} 2.0' in metrics
    assert 'endpoint="/v1/users/{user:path}/history",method="GET",status="404"} 1.0' in metrics
    assert "someone" not in metrics


# -- API keys ------------------------------------------------------------------------------------
def test_endpoints_need_the_key_and_the_page_does_not(sasrec: Recommender) -> None:
    with TestClient(
        create_app({"sas": sasrec}, ServingConfig(api_keys=frozenset({KEY}), gc_freeze=False))
    ) as c:
        calls = [
            ("GET", "/v1/items?q=item", None),
            ("GET", "/v1/users/u1/history", None),
            ("POST", "/v1/explain-rec", {"user": "u1", "k": 2}),
        ]
        for method, path, body in calls:
            err = _error(c.request(method, path, json=body), 401, "unauthorized")
            assert "X-API-Key" in err["message"]
            assert (
                c.request(method, path, json=body, headers={"Authorization": f"Bearer {KEY}"}).status_code
                == 200
            )
            assert c.request(method, path, json=body, headers={"X-API-Key": KEY}).status_code == 200
        for path in ("/ui", "/ui/app.js", "/ui/style.css"):  # the page holds no secret; it asks for the key
            assert c.get(path).status_code == 200, path
        assert c.get("/", follow_redirects=False).status_code == 307
        _error(c.get("/ui/other.js"), 401, "unauthorized")  # only the page's own files are open


# -- the page --------------------------------------------------------------------------------------
def test_page_is_served_with_a_strict_policy(client: TestClient) -> None:
    r = client.get("/", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui"
    page = client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="/ui/app.js"></script>' in page.text
    csp = page.headers["content-security-policy"]
    assert csp == CSP and "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe" not in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    head = client.head("/ui")
    assert head.status_code == 200 and head.content == b"" and head.headers["content-security-policy"] == CSP
    for path, kind in (("/ui/app.js", "text/javascript"), ("/ui/style.css", "text/css")):
        r = client.get(path)
        assert r.headers["content-type"].startswith(kind) and r.headers["content-security-policy"] == CSP
        assert r.content == (UI_DIR / path.rsplit("/", 1)[1]).read_bytes()
    _error(client.get("/ui/secret.txt"), 404, "not_found")


def test_page_needs_nothing_inline_or_from_elsewhere() -> None:
    """What the CSP would block, or what could run a title as markup, never appears in the page's files."""
    html = (UI_DIR / "index.html").read_text()
    js = (UI_DIR / "app.js").read_text()
    css = (UI_DIR / "style.css").read_text()
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)  # no inline script
    assert not re.search(r"<style|\sstyle=|\son\w+=", html)  # no inline style or handler
    assert not re.search(r"https?://", html + js + css)  # nothing from another origin
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in js, sink
    assert "sessionStorage" in js and "localStorage" not in js  # the key lives as long as the tab


def test_no_ui_leaves_only_the_api(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(ui=False, gc_freeze=False))) as c:
        _error(c.get("/ui"), 404, "not_found")
        _error(c.get("/", follow_redirects=False), 404, "not_found")
        assert c.get("/v1/items").status_code == 200  # the endpoints stay: they are public API


def test_serve_cli_no_ui(sasrec_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import attnrec.serving.transport as transport
    from attnrec.cli.main import app

    served: list[Any] = []

    class NotRun:
        def __init__(self, asgi: Any, config: Any, drain_s: float) -> None:
            served.append(asgi)

        def run(self) -> None:
            pass

    monkeypatch.setattr(transport, "draining_server", NotRun)
    monkeypatch.delenv("ATTNREC_API_KEYS", raising=False)
    for flag, has_page in (([], True), (["--no-ui"], False)):
        r = CliRunner().invoke(app, ["serve", "--model", str(sasrec_dir), *flag])
        assert r.exit_code == 0, r.output
        page = TestClient(served[-1]).get("/ui")  # no lifespan needed: the page is static
        assert page.status_code == (200 if has_page else 404), page.text
        assert "/v1/items" in served[-1].openapi()["paths"]
        assert ("/ui" in r.output) is has_page  # the start-up line names the page
