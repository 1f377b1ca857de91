"""`attnrec serve` as a real subprocess on a free loopback port, for the tests that need real sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(
    args: list[str],
    env: dict[str, str] | None = None,
    ready_s: float = 180,
    ready: Callable[[str], bool] | None = None,
    log_level: str = "warning",
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``(url, process)`` of ``attnrec serve ARGS`` once ``/readyz`` answers 200 (or ``ready(url)``
    is true, e.g. for a server where a model is meant to fail); stopped on exit.

    ``ready_s`` is generous: imports alone can take ~50 s on a loaded 2-core machine.
    """
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnrec",
            "serve",
            *args,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--threads",
            "1",
            "--log-level",
            log_level,
        ],
        env=dict(os.environ, OMP_NUM_THREADS="1") | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"server exited with {proc.returncode}: {out}")
            try:
                if (
                    ready(url)
                    if ready is not None
                    else httpx.get(f"{url}/readyz", timeout=1).status_code == 200
                ):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"server did not become ready in {ready_s:.0f} s")
            time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
