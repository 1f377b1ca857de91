"""The processes of the HTTP load test (``benchmarks/load_test.py``): the server and the client.

:class:`Server` starts ``python -m attnrec serve`` on a free loopback port and waits for
``/readyz``; :func:`proc_status` reads a process's memory and CPU time from ``/proc``. The client
(:func:`client_main`, run in its own process by ``load_test.py _client``) sends the request
bodies at a fixed concurrency, either from an httpx connection pool (:func:`drive`) or from
keep-alive HTTP/1.1 connections written by hand (:func:`drive_raw`), and prints its measurements
as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np


def environment() -> dict[str, Any]:
    """What a serving benchmark's report records of the machine: date, cores, platform, versions and
    the load average at the start (imports torch for its version)."""
    import platform

    import torch

    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "loadavg": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


# -- processes -------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def proc_status(pid: int) -> dict[str, float]:
    """VmRSS / VmHWM in MiB and CPU seconds (user + system) of a process, from /proc."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


@contextmanager
def redis_server(
    directory: Path, appendfsync: str = "everysec", cpus: set[int] | None = None
) -> Iterator[str]:
    """``redis://`` URL of a private ``redis-server`` (Debian's package) on a free loopback port,
    persisting to ``directory`` (append-only file on, ``appendfsync`` as given), stopped on exit;
    ``cpus``: the CPUs it may run on (default: those of this process)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (Debian: apt-get install redis-server)")
    import redis

    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", appendfsync, "--loglevel", "warning"]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, preexec_fn=pin)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(200):
            try:
                if redis.Redis.from_url(url, socket_timeout=1).ping():
                    break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


class Server:
    """``attnrec serve`` on a free loopback port; ``cpus``: the CPUs its process (every thread of it) may
    run on, set before it starts (default: those of this process)."""

    def __init__(
        self, name: str, model_dir: Path, threads: int, extra: list[str], cpus: set[int] | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "attnrec",
            "serve",
            "--model",
            f"{name}={model_dir}",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--threads",
            str(threads),
            "--log-level",
            "warning",
            *extra,
        ]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=pin
        )

    def wait_ready(self, timeout: float = 600) -> float:
        import httpx

        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read() if self.proc.stderr else ''}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError("server not ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the client (its own process) ------------------------------------------------------------------
async def drive(url: str, bodies: list[dict[str, Any]], concurrency: int, warmup: int) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        for b in bodies[:warmup]:
            await client.post("/v1/recommend", json=b)
        latencies: list[float] = []
        errors: list[str] = []
        todo = iter(bodies)

        async def worker() -> None:
            for body in todo:
                t = time.perf_counter()
                try:
                    r = await client.post("/v1/recommend", json=body)
                    ok = r.status_code == 200 and len(r.json()["items"]) == body["k"]
                    if not ok:
                        errors.append(f"{r.status_code} {r.text[:200]}")
                except Exception as e:  # noqa: BLE001 - counted as an error
                    errors.append(repr(e)[:200])
                latencies.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    lat = np.array(latencies) * 1000
    return {
        "requests": len(bodies),
        "concurrency": concurrency,
        "wall_s": wall,
        "rps": len(bodies) / wall,
        "p50_ms": float(np.percentile(lat, 50)),
        "p95_ms": float(np.percentile(lat, 95)),
        "p99_ms": float(np.percentile(lat, 99)),
        "max_ms": float(lat.max()),
        "mean_ms": float(lat.mean()),
        "errors": len(errors),
        "error_samples": errors[:3],
    }


async def drive_raw(url: str, bodies: list[dict[str, Any]], concurrency: int, warmup: int) -> dict[str, Any]:
    """The same load from ``concurrency`` keep-alive HTTP/1.1 connections written by hand.

    An httpx request costs the client a few ms of CPU, as much as the server spends answering it;
    on a 2-core machine that steals the server's CPU. This client costs ~0.1 ms per request.
    """
    host, port = url.removeprefix("http://").split(":")
    payloads = [json.dumps(b).encode() for b in bodies]

    def request(data: bytes) -> bytes:
        return (
            f"POST /v1/recommend HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode() + data

    async def call(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes
    ) -> tuple[int, bytes]:
        writer.write(request(data))
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return status, await reader.readexactly(length)

    warm = await asyncio.open_connection(host, int(port))
    for data in payloads[:warmup]:
        await call(*warm, data)
    warm[1].close()
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(concurrency)]
    latencies: list[float] = []
    errors: list[str] = []
    reconnects = 0
    todo = iter(zip(bodies, payloads, strict=True))

    async def worker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal reconnects
        for body, data in todo:
            t = time.perf_counter()
            for attempt in range(2):
                try:
                    status, payload = await asyncio.wait_for(call(reader, writer, data), 60)
                    if status != 200 or len(json.loads(payload)["items"]) != body["k"]:
                        errors.append(f"{status} {payload[:200]!r}")
                    break
                except (asyncio.IncompleteReadError, ConnectionError) as e:
                    # A keep-alive connection the server closed while idle: reconnect and resend once.
                    reader, writer = await asyncio.open_connection(host, int(port))
                    if attempt == 1 or (isinstance(e, asyncio.IncompleteReadError) and e.partial):
                        errors.append(repr(e)[:200])
                        break
                    reconnects += 1
                except Exception as e:  # noqa: BLE001 - counted as an error
                    errors.append(repr(e)[:200])
                    reader, writer = await asyncio.open_connection(host, int(port))
                    break
            latencies.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(r, w) for r, w in conns))
    wall = time.perf_counter() - t0
    for _, w in conns:
        w.close()
    lat = np.array(latencies) * 1000
    return {
        "requests": len(bodies),
        "concurrency": concurrency,
        "wall_s": wall,
        "rps": len(bodies) / wall,
        "p50_ms": float(np.percentile(lat, 50)),
        "p95_ms": float(np.percentile(lat, 95)),
        "p99_ms": float(np.percentile(lat, 99)),
        "max_ms": float(lat.max()),
        "mean_ms": float(lat.mean()),
        "errors": len(errors),
        "error_samples": errors[:3],
        "reconnects": reconnects,
    }


def client_main(args: argparse.Namespace) -> None:
    bodies = json.loads(Path(args.bodies).read_text())
    fn = drive_raw if args.client == "raw" else drive
    t0 = time.process_time()
    res = asyncio.run(fn(args.url, bodies, args.concurrency, args.warmup))
    res["client"] = args.client
    res["client_cpu_ms_per_request"] = 1000 * (time.process_time() - t0) / (len(bodies) + args.warmup)
    res["client_cpu_s"] = proc_status(os.getpid())["cpu_s"]
    print(json.dumps(res))
