"""One real server: `attnrec serve` in a subprocess (uvicorn) on a free loopback port, over HTTP."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from real_server import running_server

from attnrec.recommend import Recommender

HEADER_TIMEOUT, KEEP_ALIVE = 2.0, 2  # seconds; short, so that the connection tests are quick


@pytest.fixture(scope="module")
def server(sasrec_dir: Path) -> Iterator[str]:
    args = [
        "--model",
        f"sas={sasrec_dir}",
        "--model",
        str(sasrec_dir),
        "--timeout-headers",
        str(HEADER_TIMEOUT),
        "--timeout-keep-alive",
        str(KEEP_ALIVE),
    ]
    with running_server(args) as (url, _):
        yield url


def test_real_server_answers_equal_python_api(server: str, sasrec_dir: Path) -> None:
    rec = Recommender.load(sasrec_dir, device="cpu")
    with httpx.Client(base_url=server, timeout=10) as c:
        models = c.get("/v1/models").json()["models"]
        assert [m["name"] for m in models] == ["sas", sasrec_dir.name]
        for req in (
            {"user": "u3", "k": 8},
            {"history": ["i1", "i2", "nope"], "k": 5, "exclude": ["i3"]},
            {"user": "ghost", "k": 3},
        ):
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
    for args, msg in (
        (["--model", str(tmp_path)], "not a saved model directory"),
        (["--model", f"a={sasrec_dir}", "--model", f"a={sasrec_dir}"], "given twice"),
        (["--model", str(sasrec_dir), "--backend", "tf"], "'tf' is not one of 'torch', 'onnx'"),
        # every option with fixed choices is checked as it is read, before any model loads (an unknown
        # --loop once reached uvicorn, which logged an error and a warning and exited 0)
        (["--model", str(sasrec_dir), "--loop", "foo"], "'foo' is not one of 'auto', 'asyncio', 'uvloop'"),
        (["--model", str(sasrec_dir), "--http", "h3"], "'h3' is not one of 'auto', 'h11', 'httptools'"),
        (["--model", str(sasrec_dir), "--log-level", "loud"], "'loud' is not one of 'critical'"),
        (["--model", str(sasrec_dir), "--log-format", "xml"], "'xml' is not one of 'json', 'text'"),
        # and every number against its range (--threads -2 once reached torch and ended in a traceback; a
        # negative --timeout-graceful-shutdown was taken)
        (["--model", str(sasrec_dir), "--threads", "-2"], "Invalid value for '--threads'"),
        (
            ["--model", str(sasrec_dir), "--timeout-graceful-shutdown", "-1"],
            "Invalid value for '--timeout-graceful-shutdown'",
        ),
        (["--model", str(sasrec_dir), "--port", "70000"], "Invalid value for '--port'"),
        (["--model", str(sasrec_dir), "--max-in-flight", "0"], "Invalid value for '--max-in-flight'"),
    ):
        r = runner.invoke(app, ["serve", *args])
        assert r.exit_code == 2 and msg in r.output, r.output


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closed ``sock`` (None: still open after ``seconds``); sends ``trickle``
    one byte every 0.2 s meanwhile (a client that keeps sending but never finishes its headers)."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    sent = 0
    while time.monotonic() - t0 < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            pass
        except ConnectionError:
            return time.monotonic() - t0
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except ConnectionError:
                return time.monotonic() - t0
            sent += 1
    return None


def test_half_open_connections_are_closed(server: str) -> None:
    """Connections that never finish their request headers used to stay open for good."""
    host, port = server.removeprefix("http://").split(":")
    partial = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    socks = [socket.create_connection((host, int(port))) for _ in range(20)]
    try:
        for s in socks[10:]:
            s.sendall(partial)  # half a request
        slow = socket.create_connection((host, int(port)))
        socks.append(slow)
        limit = HEADER_TIMEOUT + 6
        assert (
            _closed_within(slow, limit, trickle=partial * 20) is not None
        )  # a byte every 0.2 s is not enough
        for s in socks[:-1]:
            assert _closed_within(s, limit) is not None
    finally:
        for s in socks:
            s.close()
    assert httpx.get(f"{server}/healthz", timeout=10).status_code == 200  # the server itself is fine


def test_idle_keep_alive_connection_is_closed(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        s.settimeout(10)
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        took = _closed_within(s, KEEP_ALIVE + 6)
        assert took is not None and took >= KEEP_ALIVE * 0.5


def test_chunked_body_over_the_limit_is_413_on_a_real_server(server: str) -> None:
    """A body sent with Transfer-Encoding: chunked was read whole whatever its size (the limit only
    looked at Content-Length); now the server answers 413 once 1 MiB has arrived and closes."""
    host, port = server.removeprefix("http://").split(":")
    chunk = b"x" * 65536
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /v1/recommend HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + b'a\r\n{"user": "\r\n'
        )
        s.settimeout(10)
        sent = 0
        try:
            for _ in range(24):  # 1.5 MiB, over the default 1 MiB limit
                s.sendall(b"10000\r\n" + chunk + b"\r\n")
                sent += len(chunk)
        except ConnectionError:
            pass
        answer = b""
        try:
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                part = s.recv(65536)
                if not part:
                    break
                answer += part
        except ConnectionError:
            pass
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), answer[:300]
    assert b"connection: close" in head.lower()
    assert json.loads(body)["error"]["code"] == "body_too_large"


def test_bad_requests_on_a_real_server(server: str) -> None:
    with httpx.Client(base_url=server, timeout=10) as c:
        for path in ("/healthz", "/readyz"):
            r = c.head(path)
            assert r.status_code == 200 and r.content == b""
        for body in (
            b'{"user": "\\ud800"}',
            b'{"history": ["\\udc00", "424"]}',
            b'{"user": "u1", "k": true}',
            b'{"user": "\xff"}',
            b'{"user": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        ):
            r = c.post("/v1/recommend", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", (
                body[:40],
                r.text,
            )
