"""Key roles: a client key opens the public API only, an admin key opens the admin endpoints too;
every admin operation (discovered from the app's own OpenAPI document, so a new one cannot be
missed) answers a client key 403 in the JSON error shape; reloads only from the models roots."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommender
from attnrec.serving.app import ServingConfig, create_app
from attnrec.serving.auth import collect_admin_keys
from attnrec.serving.page import read_assets
from attnrec.store import SqliteStore

CLIENT = "client-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"
# The public API: what a client key may call. Every other operation of the app is an admin one.
PUBLIC = {
    ("post", "/v1/recommend"),
    ("post", "/v1/similar-items"),
    ("post", "/v1/explain"),
    ("post", "/v1/explain-rec"),
    ("get", "/v1/items"),
    ("get", "/v1/users/{user}/history"),
    ("get", "/v1/models"),
    ("get", "/healthz"),
    ("head", "/healthz"),
    ("get", "/readyz"),
    ("head", "/readyz"),
    ("get", "/metrics"),
    ("post", "/v1/events"),
}


@pytest.fixture(scope="module")
def client(sasrec_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    # with an event store, so that its routes (an admin one among them) are in the document too
    store = SqliteStore(tmp_path_factory.mktemp("roles") / "events.db")
    cfg = ServingConfig(api_keys=frozenset({CLIENT}), admin_keys=frozenset({ADMIN}), store=store)
    with TestClient(create_app({"sas": sasrec_dir}, cfg)) as c:
        while c.get("/readyz").status_code != 200:
            pass
        yield c


def operations(c: TestClient) -> set[tuple[str, str]]:
    spec = c.app.openapi()  # type: ignore[attr-defined]
    return {(method, path) for path, ops in spec["paths"].items() for method in ops}


def test_a_client_key_gets_403_on_every_admin_operation(client: TestClient) -> None:
    admin = operations(client) - PUBLIC
    assert {
        ("post", "/v1/admin/reload"),
        ("post", "/v1/admin/items"),
        ("delete", "/v1/users/{user}"),
    } <= admin
    for method, path in sorted(admin):
        r = client.request(method.upper(), path, json={"model": "sas"}, headers={"X-API-Key": CLIENT})
        assert r.status_code == 403, (method, path, r.text)
        err = r.json()["error"]
        assert err == {"status": 403, "code": "admin_key_required", "message": err["message"], "details": []}
        assert "admin key" in err["message"]
        assert client.request(method.upper(), path, json={"model": "sas"}).status_code == 401


def test_an_admin_key_opens_admin_and_the_public_api(client: TestClient) -> None:
    auth = {"Authorization": f"Bearer {ADMIN}"}
    r = client.post("/v1/admin/reload", json={"model": "sas"}, headers=auth)  # from its own directory
    assert r.status_code == 200, r.text
    assert client.post("/v1/recommend", json={"user": "u1"}, headers=auth).status_code == 200
    assert client.post("/v1/recommend", json={"user": "u1"}, headers={"X-API-Key": CLIENT}).status_code == 200


def test_reload_paths_are_limited_to_the_models_roots(client: TestClient, tmp_path: Path) -> None:
    auth = {"X-API-Key": ADMIN}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for path in ("/etc", str(outside), "../../../../tmp"):
        r = client.post("/v1/admin/reload", json={"model": "sas", "path": path}, headers=auth)
        assert r.status_code == 403 and r.json()["error"]["code"] == "path_not_allowed", r.text
        assert r.json()["error"]["details"] == [{"loc": "path", "message": "outside the models roots"}]


def test_a_symlink_inside_a_root_to_a_directory_outside_is_refused(sasrec_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    os.symlink(sasrec_dir, root / "link")  # sasrec_dir is outside this root
    cfg = ServingConfig(admin_keys=frozenset({ADMIN}), models_roots=(root,))
    with TestClient(create_app({"sas": sasrec_dir}, cfg)) as c:
        r = c.post(
            "/v1/admin/reload",
            json={"model": "sas", "path": str(root / "link")},
            headers={"X-API-Key": ADMIN},
        )
        assert r.status_code == 403 and r.json()["error"]["code"] == "path_not_allowed", r.text


def test_only_admin_keys_leave_the_public_api_open(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec}, ServingConfig(admin_keys=frozenset({ADMIN})))) as c:
        assert c.post("/v1/recommend", json={"user": "u1"}).status_code == 200
        assert c.post("/v1/admin/reload", json={"model": "sas"}).status_code == 401
        r = c.post("/v1/admin/reload", json={"model": "sas"}, headers={"X-API-Key": ADMIN})
        assert r.status_code == 409 and r.json()["error"]["code"] == "no_directory", r.text


def test_admin_keys_from_flags_and_environment() -> None:
    env = {"ATTNREC_ADMIN_KEYS": f" {ADMIN} ,"}
    assert collect_admin_keys(["other-admin-0123456789"], env) == {ADMIN, "other-admin-0123456789"}
    with pytest.raises(ValueError, match="ATTNREC_ADMIN_KEYS: an API key must have at least 16"):
        collect_admin_keys([], {"ATTNREC_ADMIN_KEYS": "short"})
    with pytest.raises(ValueError, match="both as a client key and as an admin key"):
        ServingConfig(api_keys=frozenset({ADMIN}), admin_keys=frozenset({ADMIN}))


def test_the_web_page_never_calls_an_admin_endpoint() -> None:
    script = read_assets()["app.js"].decode()
    assert "/v1/recommend" in script and "/v1/admin" not in script


def test_admin_bodies_are_refused_with_422_in_the_error_shape(client: TestClient) -> None:
    auth = {"X-API-Key": ADMIN, "Content-Type": "application/json"}
    for body in (b"{not json", b'{"model": "sas", "model": "x"}', b'{"model": 3}'):
        r = client.post("/v1/admin/reload", content=body, headers=auth)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", (body, r.text)
