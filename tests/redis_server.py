"""A private ``redis-server`` (Debian's package) on a free loopback port, in a temporary directory.

Tests that need Redis use :func:`redis_url_or_skip`: without ``redis-server`` (or redis-py) they skip on
a developer's machine but fail when the ``CI`` environment variable is set, because ``.ci/run``
installs and CI must never skip them silently (as the browser test treats Chromium).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

READY_S = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_redis(environ: Mapping[str, str], binary: str | None = None) -> str:
    """The path of ``redis-server``; skips when it (or redis-py) is missing, fails under CI."""
    found = binary if binary is not None else shutil.which("redis-server")
    missing = (
        [] if found and Path(found).is_file() else ["redis-server (Debian: apt-get install redis-server)"]
    )
    try:
        import redis  # noqa: F401
    except ImportError:
        missing.append("redis-py (the redis extra)")
    if not missing:
        assert found is not None
        return found
    what = f"the Redis store tests need {', '.join(missing)}, which is not installed"
    if environ.get("CI"):
        pytest.fail(f"{what}; CI must run them (.ci/run installs redis-server)")
    pytest.skip(what)


@contextmanager
def redis_server(binary: str, directory: Path, appendfsync: str = "always") -> Iterator[str]:
    """``redis://`` URL of a fresh server persisting to ``directory`` (append-only file on); stopped on
    exit."""
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(directory),
            "--appendonly",
            "yes",
            "--appendfsync",
            appendfsync,
            "--save",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            "--loglevel",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    import redis

    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + READY_S
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"redis-server exited with {proc.returncode}: {out}")
            try:
                if redis.Redis.from_url(url, socket_timeout=1).ping():
                    break
            except redis.exceptions.ConnectionError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not answer in {READY_S} s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
