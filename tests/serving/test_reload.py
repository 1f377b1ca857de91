"""Hot reload: no failed request while a model is swapped (twice, under concurrent load), answers
from the new model afterwards, a micro-batch in flight finishing on the old one, a broken
directory refused with the old model still serving, and SIGHUP on a real `attnrec serve`."""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
    from fastapi.testclient import TestClient

from real_server import running_server

from attnrec.recommend import Recommendation, Recommender
from attnrec.serving.app import FromDirectory, ServingConfig, create_app
from synthetic_logs import ring_log

KEY = "reload-test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
REQ = {"user": "u3", "k": 5}


@pytest.fixture(scope="module")
def pop_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second model on the same items whose answers differ from SASRec's."""
    log = ring_log(120, 60, 0, min_len=5, follow=0.8)
    return Recommender("pop").fit(log, progress=False).save(tmp_path_factory.mktemp("pop") / "pop")


@pytest.fixture()
def broken_dir(tmp_path: Path) -> Path:
    d = tmp_path / "broken"
    d.mkdir()
    (d / "config.json").write_text("{not json")
    return d


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ...]:
    """The models roots of these tests: every test directory (the served ones and the reloaded ones)."""
    return (tmp_path_factory.getbasetemp(),)


def items(body: Mapping[str, Any]) -> list[str]:
    return [x["item"] for x in body["items"]]


def want(d: Path) -> list[str]:
    return Recommender.load(d).recommend(**REQ).items  # type: ignore[arg-type]


Answer = tuple[float, float, int, list[str]]  # started, finished, status, items


async def _hammer(c: httpx.AsyncClient, stop: asyncio.Event, out: list[Answer]) -> None:
    while not stop.is_set():
        t0 = time.monotonic()
        r = await c.post("/v1/recommend", json=REQ)
        out.append((t0, time.monotonic(), r.status_code, items(r.json()) if r.status_code == 200 else []))


def test_reload_twice_under_load_fails_no_request(
    sasrec_dir: Path, pop_dir: Path, broken_dir: Path, roots: tuple[Path, ...]
) -> None:
    old, new = want(sasrec_dir), want(pop_dir)
    assert old != new
    app = create_app({"m": sasrec_dir}, ServingConfig(admin_keys=frozenset({KEY}), models_roots=roots))
    answers: list[Answer] = []

    async def main() -> list[tuple[float, float, httpx.Response]]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=AUTH, timeout=60
            ) as c:
                while (await c.get("/readyz")).status_code != 200:
                    await asyncio.sleep(0.02)
                stop = asyncio.Event()
                clients = [asyncio.create_task(_hammer(c, stop, answers)) for _ in range(8)]
                swaps = []
                for path in (pop_dir, broken_dir, sasrec_dir, pop_dir):
                    await asyncio.sleep(0.3)
                    t0 = time.monotonic()
                    r = await c.post("/v1/admin/reload", json={"model": "m", "path": str(path)})
                    swaps.append((t0, time.monotonic(), r))
                await asyncio.sleep(0.3)
                stop.set()
                await asyncio.gather(*clients)
                return swaps

    swaps = asyncio.run(main())
    assert [r.status_code for _, _, r in swaps] == [200, 422, 200, 200], [r.text for _, _, r in swaps]
    assert swaps[1][2].json()["error"]["code"] == "reload_failed"
    assert len(answers) > 40 and [s for _, _, s, _ in answers if s != 200] == []  # zero failed requests
    assert all(a in (old, new) for *_, a in answers)  # every answer is one model's, never a mix
    # Between two swaps (the broken one changed nothing), every request sent after the first had
    # finished and answered before the next began comes from the model swapped in.
    starts = [float("-inf"), *(t0 for t0, _, _ in swaps)]
    ends = [float("-inf"), *(t1 for _, t1, _ in swaps)]
    for i, model in enumerate([old, new, new, old, new]):
        nxt = starts[i + 1] if i + 1 < len(starts) else float("inf")
        between = [a for t0, t1, _, a in answers if t0 > ends[i] and t1 < nxt]
        assert between and all(a == model for a in between), (i, len(between))


class Gated:
    """A served recommender whose batches wait for a gate: a batch can be held mid-flight."""

    def __init__(self, rec: Recommender) -> None:
        self.rec, self.entered, self.gate = rec, threading.Event(), threading.Event()

    def recommend_many(self, requests: Sequence[Mapping[str, object]]) -> list[Recommendation]:
        self.entered.set()
        assert self.gate.wait(30)
        return self.rec.recommend_many(requests)

    def similar_items(self, item: object, k: int = 10) -> Recommendation:
        return self.rec.similar_items(item, k)


def test_a_batch_in_flight_finishes_on_the_old_model(
    sasrec: Recommender, sasrec_dir: Path, pop_dir: Path, roots: tuple[Path, ...]
) -> None:
    gated = Gated(sasrec)
    app = create_app(
        {"m": FromDirectory(sasrec_dir, gated)},
        ServingConfig(unauthenticated_admin=True, warmup=False, models_roots=roots),
    )

    async def main() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60
            ) as c:
                first = asyncio.create_task(c.post("/v1/recommend", json=REQ))
                while not gated.entered.is_set():
                    await asyncio.sleep(0.01)
                swap = await c.post("/v1/admin/reload", json={"model": "m", "path": str(pop_dir)})
                second = asyncio.create_task(c.post("/v1/recommend", json=REQ))
                await asyncio.sleep(0.05)
                gated.gate.set()
                return await first, swap, await second

    first, swap, second = asyncio.run(main())
    assert swap.status_code == 200, swap.text
    assert first.status_code == 200 and items(first.json()) == sasrec.recommend(**REQ).items  # type: ignore[arg-type]
    assert second.status_code == 200 and items(second.json()) == want(pop_dir)


def test_broken_directory_keeps_the_old_model(
    sasrec_dir: Path,
    sasrec: Recommender,
    broken_dir: Path,
    caplog: pytest.LogCaptureFixture,
    roots: tuple[Path, ...],
) -> None:
    cfg = ServingConfig(admin_keys=frozenset({KEY}), models_roots=roots)
    with TestClient(create_app({"m": sasrec_dir}, cfg)) as c:
        while c.get("/readyz").status_code != 200:
            time.sleep(0.02)
        before = c.get("/v1/models", headers=AUTH).json()["models"][0]
        for path in (broken_dir, broken_dir / "missing"):
            with caplog.at_level(logging.ERROR, logger="attnrec.serving"):
                r = c.post("/v1/admin/reload", json={"model": "m", "path": str(path)}, headers=AUTH)
            assert r.status_code == 422 and r.json()["error"]["code"] == "reload_failed", r.text
            assert "the previous model keeps serving" in r.json()["error"]["message"]
            assert any(
                "reload of model 'm'" in rec.getMessage() and "refused" in rec.getMessage()
                for rec in caplog.records
            )
            body = c.post("/v1/recommend", json=REQ, headers=AUTH).json()
            assert items(body) == sasrec.recommend(**REQ).items  # type: ignore[arg-type]
        after = c.get("/v1/models", headers=AUTH).json()["models"][0]
        assert after["status"] == "ready" and after["loaded_at"] == before["loaded_at"]
        assert 'attnrec_model_reload_failures_total{model="m"} 2.0' in c.get("/metrics", headers=AUTH).text
        r = c.post("/v1/admin/reload", json={"model": "m", "path": "bad\x00path"}, headers=AUTH)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
        r = c.post("/v1/admin/reload", json={"model": "nope"}, headers=AUTH)
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_model"
        r = c.post("/v1/admin/reload", json={"model": "m", "extra": 1}, headers=AUTH)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


class OnlyExplains:
    def explain(self, user: object, item: object, feature: str | None = None) -> dict[str, str]:
        return {"text": "because"}


def test_reload_refuses_a_model_that_cannot_do_what_the_old_did(
    sasrec_dir: Path, pop_dir: Path, monkeypatch: pytest.MonkeyPatch, roots: tuple[Path, ...]
) -> None:
    import attnrec.serving.lifecycle as lifecycle

    real_load = lifecycle.load
    monkeypatch.setattr(
        lifecycle,
        "load",
        lambda d, device="cpu", **kw: OnlyExplains() if d == pop_dir else real_load(d, device, **kw),
    )
    cfg = ServingConfig(unauthenticated_admin=True, models_roots=roots)
    with TestClient(create_app({"m": sasrec_dir}, cfg)) as c:
        while c.get("/readyz").status_code != 200:
            time.sleep(0.02)
        r = c.post("/v1/admin/reload", json={"model": "m", "path": str(pop_dir)})
        assert (
            r.status_code == 422 and "cannot do recommend, similar-items" in r.json()["error"]["message"]
        ), r.text
        assert c.post("/v1/recommend", json=REQ).status_code == 200


def test_a_failed_model_can_be_fixed_by_a_reload(
    sasrec_dir: Path, broken_dir: Path, sasrec: Recommender, roots: tuple[Path, ...]
) -> None:
    cfg = ServingConfig(unauthenticated_admin=True, models_roots=roots)
    with TestClient(create_app({"m": broken_dir}, cfg)) as c:
        while c.get("/readyz").json()["models"]["m"] == "loading":
            time.sleep(0.02)
        assert c.post("/v1/recommend", json=REQ).status_code == 503
        r = c.post("/v1/admin/reload", json={"model": "m"})  # same broken directory: still failed
        assert r.status_code == 422 and "the model stays failed" in r.json()["error"]["message"]
        r = c.post("/v1/admin/reload", json={"model": "m", "path": str(sasrec_dir)})
        assert r.status_code == 200 and r.json()["info"]["status"] == "ready", r.text
        assert c.get("/readyz").status_code == 200
        assert items(c.post("/v1/recommend", json=REQ).json()) == sasrec.recommend(**REQ).items  # type: ignore[arg-type]


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="SIGHUP is POSIX only")
def test_sighup_reloads_a_real_server(sasrec_dir: Path, pop_dir: Path, tmp_path: Path) -> None:
    served = tmp_path / "served"
    shutil.copytree(sasrec_dir, served)
    args = ["--model", f"m={served}"]
    with running_server(args, env={"ATTNREC_API_KEYS": KEY}) as (url, proc):
        with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
            assert items(c.post("/v1/recommend", json=REQ).json()) == want(sasrec_dir)
            assert (
                httpx.post(f"{url}/v1/recommend", json=REQ).status_code == 401
            )  # the key from the environment
            shutil.rmtree(served)
            shutil.copytree(pop_dir, served)
            proc.send_signal(signal.SIGHUP)
            for _ in range(600):
                if 'attnrec_model_reloads_total{model="m"} 1.0' in c.get("/metrics").text:
                    break
                time.sleep(0.05)
            else:
                raise AssertionError("SIGHUP did not reload the model in 30 s")
            assert items(c.post("/v1/recommend", json=REQ).json()) == want(pop_dir)
            assert c.get("/v1/models").json()["models"][0]["model"] == "pop"
            assert proc.poll() is None  # SIGHUP did not end the server
