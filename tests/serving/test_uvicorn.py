"""One real server: `attnrec serve` in a subprocess (uvicorn) on a free loopback port, over HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from attnrec.recommend import Recommender


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(sasrec_dir: Path) -> Iterator[str]:
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnrec", "serve", "--model", f"sas={sasrec_dir}", "--model", str(sasrec_dir),
         "--host", "127.0.0.1", "--port", str(port), "--threads", "1", "--log-level", "warning"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # imports alone can take ~50 s on a loaded 2-core machine
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited with {proc.returncode}: {proc.stdout.read()}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("server did not become ready in 180 s")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_real_server_answers_equal_python_api(server: str, sasrec_dir: Path) -> None:
    rec = Recommender.load(sasrec_dir, device="cpu")
    with httpx.Client(base_url=server, timeout=10) as c:
        models = c.get("/v1/models").json()["models"]
        assert [m["name"] for m in models] == ["sas", sasrec_dir.name]
        for req in ({"user": "u3", "k": 8}, {"history": ["i1", "i2", "nope"], "k": 5, "exclude": ["i3"]},
                    {"user": "ghost", "k": 3}):
            body = c.post("/v1/recommend", json=req).json()
            want = rec.recommend(**req)  # type: ignore[arg-type]
            assert [x["item"] for x in body["items"]] == want.items
            assert [x["score"] for x in body["items"]] == pytest.approx(want.scores, rel=1e-5, abs=1e-5)
            assert body["unknown_items"] == want.unknown_items and body["fallback"] == want.fallback
        body = c.post("/v1/similar-items", json={"model": sasrec_dir.name, "item": "i5", "k": 4}).json()
        assert [x["item"] for x in body["items"]] == rec.similar_items("i5", 4).items
        r = c.post("/v1/recommend", json={"user": "u3", "k": 0})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
        assert c.post("/v1/explain", json={"user": "u3", "item": "i1"}).status_code == 501
        assert c.get("/healthz").json()["status"] == "ok"


def test_cli_rejects_bad_model_dirs(tmp_path: Path, sasrec_dir: Path) -> None:
    from typer.testing import CliRunner

    from attnrec.cli.main import app

    runner = CliRunner()
    for args, msg in ((["--model", str(tmp_path)], "not a saved model directory"),
                      (["--model", f"a={sasrec_dir}", "--model", f"a={sasrec_dir}"], "given twice"),
                      (["--model", str(sasrec_dir), "--backend", "tf"], "--backend must be")):
        r = runner.invoke(app, ["serve", *args])
        assert r.exit_code == 2 and msg in r.output, r.output
