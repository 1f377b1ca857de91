"""The server and damaged model directories: each damage kind of ``damaged_dirs`` is refused at
start-up and by a hot reload, at once, with the old model serving on; a load that hangs is given up
after the timeout with the reload lock released; unsigned directories are refused unless allowed;
and a real ``attnrec serve`` refuses a FIFO on reload and still stops on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
    from fastapi.testclient import TestClient

from real_server import running_server

from attnrec.checkpoint import MANIFEST, CheckpointError
from attnrec.recommend import Recommender
from attnrec.serving.api_errors import ApiError
from attnrec.serving.app import FromDirectory, ServingConfig, create_app
from attnrec.serving.lifecycle import ServingState
from attnrec.serving.reload import reload_model
from damaged_dirs import DAMAGE, KEY, damaged, fifo_weights

QUICK_S = 10
REQ = {"user": "u3", "k": 5}
CFG = ServingConfig(manifest_key=KEY, load_timeout_s=5)


@pytest.fixture(scope="module")
def signed(sasrec: Recommender, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sasrec.save(tmp_path_factory.mktemp("signed") / "m", manifest_key=KEY)


def _ready(c: TestClient, name: str = "m") -> str:
    deadline = time.monotonic() + 60
    while (status := c.get("/readyz").json()["models"][name]) == "loading" and time.monotonic() < deadline:
        time.sleep(0.02)
    return str(status)


def _state(c: TestClient) -> ServingState:
    state = c.app.state.serving  # type: ignore[attr-defined]
    assert isinstance(state, ServingState)
    return state


def _reload(c: TestClient, path: Path | None) -> Any:
    """``reload_model`` on the app's event loop (the admin route's work, whatever its auth)."""
    assert c.portal is not None
    return c.portal.call(reload_model, _state(c), "m", path)


@pytest.fixture(scope="module")
def served(signed: Path) -> Iterator[TestClient]:
    with TestClient(create_app({"m": signed}, CFG)) as c:
        assert _ready(c) == "ready"
        yield c


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_start_up_refuses_each_damage(signed: Path, tmp_path: Path, kind: str) -> None:
    d = damaged(signed, tmp_path, kind)
    t0 = time.monotonic()
    with pytest.raises(CheckpointError, match=DAMAGE[kind][1]):  # what `attnrec serve` does first
        FromDirectory.read(d, "cpu", CFG.load_policy())
    with TestClient(create_app({"good": signed, "m": d}, CFG)) as c:  # loaded in the background
        assert _ready(c) == "failed" and _ready(c, "good") == "ready"
        r = c.post("/v1/recommend", json={"model": "m", **REQ})
        assert r.status_code == 503 and re.search(DAMAGE[kind][1], r.json()["error"]["message"]), r.text
        assert c.post("/v1/recommend", json={"model": "good", **REQ}).status_code == 200
    assert time.monotonic() - t0 < 3 * QUICK_S


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_hot_reload_refuses_each_damage_and_serves_on(
    served: TestClient, signed: Path, sasrec: Recommender, tmp_path: Path, kind: str
) -> None:
    d = damaged(signed, tmp_path, kind)
    t0 = time.monotonic()
    with pytest.raises(ApiError) as info:
        _reload(served, d)
    assert time.monotonic() - t0 < QUICK_S
    assert info.value.status == 422 and info.value.code == "reload_failed"
    assert re.search(DAMAGE[kind][1], info.value.message) and "\n" not in info.value.message
    assert "the previous model keeps serving" in info.value.message
    last = _state(served).reloads.last["m"]
    assert last.outcome == "refused" and last.message == info.value.message
    body = served.post("/v1/recommend", json=REQ).json()
    assert [x["item"] for x in body["items"]] == sasrec.recommend(**REQ).items  # type: ignore[arg-type]
    assert _state(served).reloads.running == {}


def test_a_good_reload_is_recorded(served: TestClient, signed: Path) -> None:
    log = _state(served).reloads
    before = log.counts["m", "ok"]
    _reload(served, signed)
    assert log.counts["m", "ok"] == before + 1 and log.last["m"].outcome == "ok"


def test_a_hanging_load_is_given_up_and_the_lock_released(
    signed: Path, sasrec: Recommender, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What no check can bound (a file system that stops answering) is bounded by the timeout."""
    import attnrec.serving.lifecycle as lifecycle

    real_load, hang = lifecycle.load, threading.Event()

    def load(d: Path, device: str = "cpu", **kw: Any) -> Any:
        if Path(d).name == "hangs":
            hang.wait(60)  # released at the end of the test
        return real_load(d, device, **kw)

    monkeypatch.setattr(lifecycle, "load", load)
    cfg = ServingConfig(manifest_key=KEY, load_timeout_s=0.5)
    with TestClient(create_app({"m": signed}, cfg)) as c:
        assert _ready(c) == "ready"
        hangs = signed.parent / "hangs"
        shutil.copytree(signed, hangs, dirs_exist_ok=True)
        try:
            for _ in range(2):  # the second one is not queued behind the first
                t0 = time.monotonic()
                with pytest.raises(ApiError) as info:
                    _reload(c, hangs)
                assert time.monotonic() - t0 < QUICK_S
                assert info.value.status == 504 and info.value.code == "reload_timeout"
                assert "the previous model keeps serving" in info.value.message
                assert c.post("/v1/recommend", json=REQ).status_code == 200
            log = _state(c).reloads
            assert log.counts["m", "timed_out"] == 2 and log.last["m"].outcome == "timed_out"
            assert log.stuck == 2 and all(t.daemon for t in log.abandoned)  # cannot hold up the exit
            with pytest.raises(ApiError) as info:  # no more threads piled up
                _reload(c, signed)
            assert info.value.status == 503 and info.value.code == "reload_stuck"
        finally:
            hang.set()
        for t in list(_state(c).reloads.abandoned):
            t.join(QUICK_S)
        _reload(c, signed)  # once they ended, reloads go on
        assert _state(c).reloads.last["m"].outcome == "ok"


def test_unsigned_directories_are_refused_unless_allowed(sasrec: Recommender, tmp_path: Path) -> None:
    old = sasrec.save(tmp_path / "old")
    (old / MANIFEST).unlink()
    with TestClient(create_app({"m": old})) as c:
        assert _ready(c) == "failed"
        assert "no manifest.json" in c.post("/v1/recommend", json=REQ).json()["error"]["message"]
    with TestClient(create_app({"m": old}, ServingConfig(allow_unsigned=True))) as c:
        assert _ready(c) == "ready"


def test_a_real_server_refuses_a_fifo_reload_and_stops_on_sigterm(signed: Path, tmp_path: Path) -> None:
    """The issue's case: weights that are a FIFO in a directory without a manifest, which the server
    is told to accept, once blocked the reload forever, every later reload, and SIGTERM."""
    d = tmp_path / "fifo"
    shutil.copytree(signed, d)
    fifo_weights(d)
    (d / MANIFEST).unlink()
    api_key = "reload-safety-key-0123456789"  # an admin key: reload is an admin endpoint
    env = {"ATTNREC_ADMIN_KEYS": api_key, "ATTNREC_MANIFEST_KEY": KEY}
    roots = ["--models-root", str(tmp_path), "--models-root", str(signed.parent)]
    args = ["--model", f"m={signed}", "--load-timeout", "5", "--allow-unsigned", *roots]
    with running_server(args, env=env) as (url, proc):
        auth = {"Authorization": f"Bearer {api_key}"}
        with httpx.Client(base_url=url, headers=auth, timeout=30) as c:
            t0 = time.monotonic()
            r = c.post("/v1/admin/reload", json={"model": "m", "path": str(d)})
            assert r.status_code == 422 and "FIFO" in r.json()["error"]["message"], r.text
            assert time.monotonic() - t0 < QUICK_S
            assert c.post("/v1/recommend", json=REQ).status_code == 200
            r = c.post("/v1/admin/reload", json={"model": "m", "path": str(signed)})  # the lock is free
            assert r.status_code == 200, r.text
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(QUICK_S)
        assert time.monotonic() - t0 < QUICK_S


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="per-thread priorities are a Linux feature")
def test_a_background_load_runs_at_a_lower_priority_than_the_server() -> None:
    """A hot reload's thread lowers its own priority, so on a busy core the request threads go first;
    a start-up load (not in the background) and the calling thread keep theirs."""
    from attnrec.serving.loading import LOAD_NICENESS, run_abandonable

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine = niceness()
    background = asyncio.run(run_abandonable(niceness, 10.0, "test-load", background=True))
    foreground = asyncio.run(run_abandonable(niceness, 10.0, "test-load"))
    assert background == min(19, mine + LOAD_NICENESS)
    assert foreground == mine
    assert niceness() == mine
