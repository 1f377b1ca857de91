"""Every bad request is a 4xx in the JSON error shape (issue 18, item 1), in-process.

The cases of the issue's table: lone UTF-16 surrogates and control characters in IDs, over-long
IDs and lists, ``"k": true``, invalid UTF-8, deeply nested JSON, wrong top-level types, a body
over the limit sent chunked (no ``Content-Length``), a body that never finishes, ``HEAD`` on the
health endpoints; and ``gc.freeze`` after loading.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommender
from attnrec.serving.api_errors import error_json
from attnrec.serving.app import ServingConfig, create_app
from attnrec.serving.schemas import MAX_ID_CHARS, MAX_IDS


class FakeExplainer:
    def explain(self, user: object, item: object, feature: str | None = None) -> dict[str, Any]:
        return {"text": f"{user} {item} {feature}"}


@pytest.fixture(scope="module")
def client(sasrec: Recommender) -> Iterator[TestClient]:
    cfg = ServingConfig(max_body_bytes=4 << 20, gc_freeze=False)
    with TestClient(
        create_app({"sas": sasrec, "peter": FakeExplainer()}, cfg), raise_server_exceptions=False
    ) as c:
        yield c


def _invalid(r: httpx.Response, loc: str, message: str) -> None:
    """A 422 in the documented shape, naming ``loc`` and saying ``message``; valid UTF-8 JSON."""
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/json"
    err = json.loads(r.content.decode("utf-8"))["error"]  # strict UTF-8: no lone surrogates in the answer
    assert err["status"] == 422 and err["code"] == "invalid_request", err
    assert any(d["loc"] == loc and message in d["message"] for d in err["details"]), err
    assert message in err["message"]


SURROGATE, LOW_SURROGATE = "\\ud800", "\\udc00"  # as JSON escapes: the body itself is valid UTF-8


@pytest.mark.parametrize(
    "path,body,loc",
    [
        ("/v1/recommend", f'{{"user": "{SURROGATE}"}}', "user"),
        ("/v1/recommend", f'{{"history": ["{LOW_SURROGATE}", "424"]}}', "history.0"),
        ("/v1/recommend", f'{{"user": "u1", "include": ["i1", "a{SURROGATE}"]}}', "include.1"),
        ("/v1/recommend", f'{{"user": "u1", "exclude": ["{SURROGATE}"]}}', "exclude.0"),
        ("/v1/recommend", f'{{"model": "{SURROGATE}", "user": "u1"}}', "model"),
        ("/v1/similar-items", f'{{"item": "{SURROGATE}"}}', "item"),
        ("/v1/explain", f'{{"user": "{SURROGATE}", "item": "i1"}}', "user"),
        ("/v1/explain", f'{{"user": "u1", "item": "i1", "feature": "{LOW_SURROGATE}"}}', "feature"),
    ],
)
def test_lone_surrogates_are_422(client: TestClient, path: str, body: str, loc: str) -> None:
    _invalid(
        client.post(path, content=body, headers={"content-type": "application/json"}),
        loc,
        "lone UTF-16 surrogate",
    )


def test_error_answers_are_valid_utf8_whatever_they_quote() -> None:
    r = error_json(422, "invalid_request", "bad ID 'a\ud800'", [{"loc": "x\udc00", "message": "m" * 10_000}])
    body = json.loads(bytes(r.body).decode("utf-8"))["error"]
    assert body["message"] == "bad ID 'a\\ud800'" and body["details"][0]["loc"] == "x\\udc00"
    assert len(body["details"][0]["message"]) < 400


@pytest.mark.parametrize(
    "path,req,loc",
    [
        ("/v1/recommend", {"user": "u\x001"}, "user"),
        ("/v1/recommend", {"history": ["i1", "i\n2"]}, "history.1"),
        ("/v1/recommend", {"user": "u1", "exclude": ["\x7f"]}, "exclude.0"),
        ("/v1/recommend", {"user": "u1", "include": ["\x85"]}, "include.0"),  # C1 controls too
        ("/v1/similar-items", {"item": "i\t1"}, "item"),
        ("/v1/explain", {"user": "u1", "item": "i1", "feature": "\x1b[31m"}, "feature"),
    ],
)
def test_control_characters_are_422(client: TestClient, path: str, req: dict[str, Any], loc: str) -> None:
    _invalid(client.post(path, json=req), loc, "control characters")


def test_ordinary_unicode_ids_still_work(client: TestClient, sasrec: Recommender) -> None:
    r = client.post("/v1/recommend", json={"user": "Zoë 😀", "history": ["i1", "Ø"], "k": 3})
    assert r.status_code == 200, r.text
    assert r.json()["user"] == "Zoë 😀" and r.json()["unknown_items"] == ["Ø"]
    assert [x["item"] for x in r.json()["items"]] == sasrec.recommend(history=["i1"], k=3).items
    r = client.post("/v1/recommend", json={"user": "x" * MAX_ID_CHARS, "k": 2})
    assert r.status_code == 200 and r.json()["user"] == "x" * MAX_ID_CHARS and len(r.json()["items"]) == 2
    assert (
        client.post("/v1/recommend", json={"user": "u1", "k": 2.0}).status_code == 422
    )  # a count is an integer


@pytest.mark.parametrize(
    "req,loc,message",
    [
        ({"user": "x" * (MAX_ID_CHARS + 1)}, "user", f"at most {MAX_ID_CHARS} characters"),
        ({"user": 10**MAX_ID_CHARS}, "user", f"at most {MAX_ID_CHARS} characters"),  # 257 digits
        ({"history": ["i1", "y" * 5000]}, "history.1", f"at most {MAX_ID_CHARS} characters"),
        ({"user": "u1", "model": "m" * 300}, "model", f"at most {MAX_ID_CHARS} characters"),
        ({"history": ["i1"] * (MAX_IDS + 1)}, "history", f"at most {MAX_IDS} items"),
        ({"user": "u1", "include": ["i1"] * (MAX_IDS + 1)}, "include", f"at most {MAX_IDS} items"),
    ],
)
def test_length_limits_are_422(client: TestClient, req: dict[str, Any], loc: str, message: str) -> None:
    _invalid(client.post("/v1/recommend", json=req), loc, message)


@pytest.mark.parametrize(
    "req,loc",
    [
        ({"user": "u1", "k": True}, "k"),  # was accepted as k=1
        ({"user": "u1", "k": "3"}, "k"),
        ({"user": "u1", "k": 2.5}, "k"),
        ({"user": "u1", "exclude_seen": "false"}, "exclude_seen"),
        ({"user": "u1", "exclude_seen": 0}, "exclude_seen"),
        ({"history": [True]}, "history"),
        ({"user": "u1", "model": 1}, "model"),
    ],
)
def test_types_are_strict(client: TestClient, req: dict[str, Any], loc: str) -> None:
    r = client.post("/v1/recommend", json=req)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
    assert [d["loc"] for d in r.json()["error"]["details"]] == [loc]
    r = client.post("/v1/similar-items", json={"item": "i1", "k": True})
    assert r.status_code == 422 and r.json()["error"]["details"][0]["loc"] == "k"


@pytest.mark.parametrize(
    "body,content_type,message",
    [
        (b'{"user": "\xff\xfe"}', "application/json", "not UTF-8"),
        ('{"user": "u1"}'.encode("utf-16"), "application/json", "not UTF-8"),
        (b'{"user": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "application/json", "nested too deeply"),
        (
            b'{"user": ' + b"9" * 5000 + b"}",
            "application/json",
            "malformed JSON",
        ),  # over Python's int digits limit
        (b"{not json", "application/json", "malformed JSON"),
        (b"[1, 2]", "application/json", "valid dictionary"),
        (b'"u1"', "application/json", "valid dictionary"),
        (b"null", "application/json", "valid dictionary"),
        (b"user=u1", "application/x-www-form-urlencoded", "valid dictionary"),
        (b'{"user": "u1"}', "text/plain", "valid dictionary"),
    ],
)
def test_malformed_bodies_are_422(client: TestClient, body: bytes, content_type: str, message: str) -> None:
    for path in ("/v1/recommend", "/v1/similar-items", "/v1/explain"):
        _invalid(client.post(path, content=body, headers={"content-type": content_type}), "body", message)


def test_client_errors_log_no_traceback(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        for body in (
            f'{{"user": "{SURROGATE}"}}',
            f'{{"history": ["{LOW_SURROGATE}", "424"]}}',
            '{"user": "u1", "k": true}',
        ):
            assert (
                client.post(
                    "/v1/recommend", content=body, headers={"content-type": "application/json"}
                ).status_code
                == 422
            )
        client.post(
            "/v1/recommend", content=b'{"user": "\xff"}', headers={"content-type": "application/json"}
        )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info], caplog.text


def test_many_bad_items_give_a_bounded_answer(client: TestClient) -> None:
    r = client.post("/v1/recommend", json={"history": ["\x01"] * 5000})
    err = r.json()["error"]
    assert r.status_code == 422 and len(err["details"]) == 21 and len(r.content) < 5000
    assert err["details"][-1]["message"] == "and 4980 more problems"


def test_head_on_health_endpoints(client: TestClient) -> None:
    for path in ("/healthz", "/readyz"):
        r = client.head(path)
        assert r.status_code == 200 and r.content == b"", (path, r.status_code)
    assert client.get("/healthz").json()["status"] == "ok"  # GET unchanged


def test_head_readyz_is_503_while_loading(tmp_path: Any) -> None:
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with TestClient(create_app({"broken": bad}, ServingConfig(gc_freeze=False))) as c:
        for _ in range(200):
            if c.get("/readyz").json()["models"]["broken"] != "loading":
                break
            asyncio.run(asyncio.sleep(0.05))
        r = c.head("/readyz")
        assert r.status_code == 503 and r.content == b""
        assert c.head("/healthz").status_code == 200


def _asgi_post(app: Any, content: Any) -> tuple[httpx.Response, float]:
    """POST ``content`` (an async iterator: sent chunked, without Content-Length) to ``app``; the
    answer and the seconds it took."""

    async def main() -> tuple[httpx.Response, float]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=30) as c:
                t0 = asyncio.get_running_loop().time()
                r = await c.post(
                    "/v1/recommend", content=content, headers={"content-type": "application/json"}
                )
                return r, asyncio.get_running_loop().time() - t0

    return asyncio.run(main())


def test_chunked_body_over_the_limit_is_413_before_it_is_read(sasrec: Recommender) -> None:
    """A 5 MiB user ID sent chunked (no Content-Length) used to be read, parsed and answered 200."""
    limit, chunk = 64 * 1024, 16 * 1024
    pulled = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal pulled
        parts = [b'{"user": "', *([b"x" * chunk] * (5 * 1024 * 1024 // chunk)), b'", "k": 1}']
        for part in parts:
            pulled += len(part)
            yield part

    app = create_app({"sas": sasrec}, ServingConfig(max_body_bytes=limit, gc_freeze=False))
    r, _ = _asgi_post(app, body())
    assert r.status_code == 413, r.text[:200]
    err = r.json()["error"]
    assert err["code"] == "body_too_large" and f"limit of {limit} bytes" in err["message"]
    assert r.headers["connection"] == "close"
    assert pulled <= limit + 2 * chunk  # the rest was never read


def test_chunked_body_within_the_limit_is_served(sasrec: Recommender) -> None:
    async def body() -> AsyncIterator[bytes]:
        for part in (b'{"user": ', b'"u3", "k"', b": 4}"):
            yield part

    r, _ = _asgi_post(create_app({"sas": sasrec}, ServingConfig(gc_freeze=False)), body())
    assert (
        r.status_code == 200
        and [x["item"] for x in r.json()["items"]] == sasrec.recommend(user="u3", k=4).items
    )


def test_body_that_never_finishes_is_408(sasrec: Recommender) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"user": "u1"'
        await asyncio.sleep(30)
        yield b"}"

    app = create_app({"sas": sasrec}, ServingConfig(body_timeout_s=0.3, gc_freeze=False))
    r, took = _asgi_post(app, body())
    assert r.status_code == 408 and r.json()["error"]["code"] == "body_timeout", r.text
    assert took < 10


def test_gc_freeze_after_loading(sasrec: Recommender) -> None:
    gc.unfreeze()
    with TestClient(create_app({"sas": sasrec}, ServingConfig(gc_freeze=False))):
        assert gc.get_freeze_count() == 0
    with TestClient(create_app({"sas": sasrec})):  # on by default
        assert gc.get_freeze_count() > 10_000  # the model, the ID maps, torch and the rest of the heap
    gc.unfreeze()


def test_config_limits_within_the_schema_caps() -> None:
    with pytest.raises(ValueError, match=f"at most {MAX_IDS}"):
        ServingConfig(max_history=MAX_IDS + 1)
    with pytest.raises(ValueError, match="body_timeout_s > 0"):
        ServingConfig(body_timeout_s=0)


def test_405_names_the_allowed_methods(client: TestClient) -> None:
    """RFC 9110: a 405 carries Allow (the JSON handler used to drop it; found by the fuzz test)."""
    r = client.delete("/v1/recommend")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"


def test_openapi_states_the_server_limits(sasrec: Recommender) -> None:
    """The schema clients (and the fuzz test) read says what the server accepts: max k, list lengths,
    ID text, and that a `user` or a `history` is needed."""
    cfg = ServingConfig(max_k=7, max_history=30, max_list=40, gc_freeze=False)
    spec = create_app({"sas": sasrec}, cfg).openapi()
    body = spec["components"]["schemas"]["RecommendRequest"]
    assert body["properties"]["k"]["maximum"] == 7
    assert body["properties"]["history"]["anyOf"][0]["maxItems"] == 30
    assert body["properties"]["exclude"]["anyOf"][0]["maxItems"] == 40
    assert body["properties"]["user"]["anyOf"][0]["maxLength"] == MAX_ID_CHARS
    assert [b["required"] for b in body["anyOf"]] == [["user"], ["history"]]
    assert spec["components"]["schemas"]["SimilarItemsRequest"]["properties"]["k"]["maximum"] == 7
    error = {"$ref": "#/components/schemas/ErrorResponse"}
    for status in ("405", "413", "422"):
        assert (
            spec["paths"]["/v1/recommend"]["post"]["responses"][status]["content"]["application/json"][
                "schema"
            ]
            == error
        )
