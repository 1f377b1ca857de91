"""API keys and CORS: 401 in the JSON error shape without a key, health checks open, keys from the
command line / environment / a file, constant-time comparison, the admin guard, CORS preflights."""

from __future__ import annotations

import hmac
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommender
from attnrec.serving.app import ServingConfig, create_app
from attnrec.serving.auth import KeyRing, collect_keys, keys_from_file

KEY = "k-0123456789abcdef-first"
KEY2 = "k-0123456789abcdef-second"


@pytest.fixture(scope="module")
def client(sasrec: Recommender) -> Iterator[TestClient]:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(api_keys=frozenset({KEY, KEY2})))) as c:
        yield c


def _unauthorized(r: Any) -> None:
    assert r.status_code == 401, r.text
    err = r.json()["error"]
    assert err["status"] == 401 and err["code"] == "unauthorized" and "X-API-Key" in err["message"]
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/recommend", {"user": "u1", "k": 3}),
        ("POST", "/v1/similar-items", {"item": "i1"}),
        ("POST", "/v1/explain", {"user": "u1", "item": "i1"}),
        ("GET", "/v1/models", None),
        ("POST", "/v1/admin/reload", {"model": "sas"}),
        ("GET", "/v1/no-such-route", None),
    ],
)
@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-key-0123456789"},
        {"X-API-Key": KEY[:-1]},
        {"Authorization": f"Basic {KEY}"},
        {"Authorization": "Bearer "},
        {"X-API-Key": ""},
    ],
)
def test_every_endpoint_needs_a_valid_key(
    client: TestClient, method: str, path: str, body: Any, headers: dict[str, str]
) -> None:
    _unauthorized(client.request(method, path, json=body, headers=headers))


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": f"Bearer {KEY}"},
        {"authorization": f"bearer {KEY2}"},
        {"X-API-Key": KEY2},
        {"X-API-Key": "nope", "Authorization": f"Bearer {KEY}"},
    ],
)
def test_a_valid_key_in_either_header_is_accepted(
    client: TestClient, sasrec: Recommender, headers: dict[str, str]
) -> None:
    r = client.post("/v1/recommend", json={"user": "u1", "k": 3}, headers=headers)
    assert r.status_code == 200, r.text
    assert [x["item"] for x in r.json()["items"]] == sasrec.recommend(user="u1", k=3).items
    assert client.get("/v1/models", headers=headers).status_code == 200


def test_health_and_docs_stay_open_metrics_need_a_key(client: TestClient) -> None:
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert client.get(path).status_code == 200, path
    _unauthorized(client.get("/metrics"))
    assert client.get("/metrics", headers={"X-API-Key": KEY}).status_code == 200
    assert client.get("/readyz").json()["models"] == {}  # no model names without a key
    assert client.get("/readyz", headers={"X-API-Key": KEY}).json()["models"] == {"sas": "ready"}


def test_metrics_and_model_states_can_be_opened(sasrec: Recommender) -> None:
    cfg = ServingConfig(api_keys=frozenset({KEY}), protect_metrics=False)
    with TestClient(create_app({"sas": sasrec}, cfg)) as c:
        assert c.get("/metrics").status_code == 200
        assert c.get("/readyz").json()["models"] == {"sas": "ready"}
        _unauthorized(c.get("/v1/models"))


def test_no_key_configured_leaves_the_service_open(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec})) as c:
        assert c.post("/v1/recommend", json={"user": "u1", "k": 3}).status_code == 200
        assert c.get("/v1/models").status_code == 200


def test_key_ring_compares_with_every_key_without_early_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    ring = KeyRing([KEY, KEY2, KEY + "x"])
    assert (
        ring.accepts([KEY.encode()]) and len(calls) == 3
    )  # a match on the first key still checks the others
    assert not ring.accepts([b"x" * 40]) and not ring.accepts([]) and not ring.accepts([b""])


def test_keys_from_flags_environment_and_file(tmp_path: Path) -> None:
    f = tmp_path / "keys.txt"
    f.write_text(
        f"# production keys\n\n  {KEY2}  \n# rotated out: old-key-xxxxxxxxxxxxxxx\nthird-key-0123456789\n"
    )
    assert keys_from_file(f) == [KEY2, "third-key-0123456789"]
    env = {"ATTNREC_API_KEYS": f" {KEY} , env-key-0123456789ab,"}
    assert collect_keys([KEY], f, env) == {KEY, KEY2, "third-key-0123456789", "env-key-0123456789ab"}
    assert collect_keys([], None, {"ATTNREC_API_KEYS": ""}) == frozenset()


@pytest.mark.parametrize(
    ("given", "content", "env", "message"),
    [
        (["short"], None, "", "--api-key: an API key must have at least 16 characters"),
        (
            ["has a space 0123456789"],
            None,
            "",
            "--api-key: an API key must be printable ASCII without spaces",
        ),
        ([], None, "tooshort", r"\$ATTNREC_API_KEYS: an API key must have at least 16"),
        ([], "# only a comment\n\n", "", "no keys in it"),
        ([], "good-key-0123456789\nbad\n", "", "line 2: an API key must have at least 16"),
    ],
)
def test_bad_keys_are_refused(
    tmp_path: Path, given: list[str], content: str | None, env: str, message: str
) -> None:
    f = None
    if content is not None:
        f = tmp_path / "keys"
        f.write_text(content)
    with pytest.raises(ValueError, match=message):
        collect_keys(given, f, {"ATTNREC_API_KEYS": env})


def test_serve_cli_refuses_bad_keys_with_one_line(
    tmp_path: Path, sasrec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from attnrec.cli.main import app

    monkeypatch.delenv("ATTNREC_API_KEYS", raising=False)
    runner = CliRunner()
    for args, msg in (
        (["--api-key", "short"], "at least 16 characters"),
        (["--api-keys-file", str(tmp_path / "missing")], "cannot read it"),
        (["--cors-origin", "shop.example/path"], "expected scheme://host"),
    ):
        r = runner.invoke(app, ["serve", "--model", str(sasrec_dir), *args])
        assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output


def test_admin_is_refused_without_keys_unless_allowed(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec})) as c:
        r = c.post("/v1/admin/reload", json={"model": "sas"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled", r.text
        assert "--admin-key" in r.json()["error"]["message"]
    with TestClient(create_app({"sas": sasrec}, ServingConfig(unauthenticated_admin=True))) as c:
        r = c.post("/v1/admin/reload", json={"model": "sas"})  # allowed: refused only for lack of a directory
        assert r.status_code == 409 and r.json()["error"]["code"] == "no_directory", r.text


def test_a_client_key_without_admin_keys_configured_is_refused_admin(client: TestClient) -> None:
    r = client.post("/v1/admin/reload", json={"model": "sas"}, headers={"X-API-Key": KEY})
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled", r.text


def test_cors_origins(sasrec: Recommender) -> None:
    origin = "https://shop.example"
    cfg = ServingConfig(api_keys=frozenset({KEY}), cors_origins=(origin,))
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-api-key,content-type",
    }
    with TestClient(create_app({"sas": sasrec}, cfg)) as c:
        r = c.options(
            "/v1/recommend", headers={"Origin": origin, **preflight}
        )  # no key needed for a preflight
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        assert "x-api-key" in r.headers["access-control-allow-headers"].lower()
        r = c.post("/v1/recommend", json={"user": "u1"}, headers={"Origin": origin, "X-API-Key": KEY})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
        r = c.options("/v1/recommend", headers={"Origin": "https://evil.example", **preflight})
        assert r.status_code == 400 and r.json()["error"]["code"] == "cors_refused", r.text
        r = c.post(
            "/v1/recommend", json={"user": "u1"}, headers={"Origin": "https://evil.example", "X-API-Key": KEY}
        )
        assert "access-control-allow-origin" not in r.headers
    with TestClient(create_app({"sas": sasrec})) as c:  # no origin configured: no CORS headers
        r = c.post("/v1/recommend", json={"user": "u1"}, headers={"Origin": origin})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
