"""A real `attnrec serve` over sockets: framing errors and the connection cap answered in the JSON
error shape, JSON log lines with the request ID, and SIGTERM turning /readyz to 503 while the
server drains before it exits."""

from __future__ import annotations

import json
import signal
import socket
import time
from pathlib import Path

import httpx
from real_server import running_server


def _raw(url: str, payload: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(payload)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _json_body(response: bytes) -> dict[str, object]:
    head, _, body = response.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return json.loads(body)  # type: ignore[no-any-return]


def test_framing_cap_logs_and_draining(sasrec_dir: Path) -> None:
    args = ["--model", f"sas={sasrec_dir}", "--max-connections", "3", "--shutdown-delay", "3", "--access-log"]
    with running_server(args, log_level="info") as (url, proc):
        reply = _raw(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 400"), reply
        assert _json_body(reply)["error"]["code"] == "malformed_http"  # type: ignore[index]

        host, port = url.removeprefix("http://").split(":")
        held = [socket.create_connection((host, int(port)), timeout=10) for _ in range(3)]
        try:
            time.sleep(0.3)
            reply = _raw(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert reply.startswith(b"HTTP/1.1 503"), reply
            assert b"retry-after: 1" in reply.lower()
            assert _json_body(reply)["error"]["code"] == "too_many_connections"  # type: ignore[index]
        finally:
            for s in held:
                s.close()
        time.sleep(0.3)

        r = httpx.post(f"{url}/v1/recommend", json={"user": "u1"}, headers={"X-Request-ID": "trace-me-1"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "trace-me-1"

        with httpx.Client(base_url=url, timeout=5) as c:  # one connection, kept open while draining
            assert c.get("/readyz").status_code == 200
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            r = c.get("/readyz")
            assert r.status_code == 503 and r.json()["status"] == "shutting down", r.text
        proc.wait(30)
        out = proc.stdout.read() if proc.stdout else ""
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    access = [x for x in lines if x.get("request_id") == "trace-me-1" and x["logger"] == "attnrec.access"]
    assert access and access[0]["status"] == 200 and access[0]["path"] == "/v1/recommend", out[-2000:]
    assert all("time" in x and "level" in x for x in lines)
