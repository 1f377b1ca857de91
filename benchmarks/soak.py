"""Soak test of `attnrec serve`: minutes of mixed traffic (valid, malformed, oversized) plus hot reloads.

    nice -n 10 .venv/bin/python benchmarks/soak.py --minutes 10        # the committed run
    .venv/bin/python benchmarks/soak.py --minutes 1 --out /tmp/soak     # a smoke run

One server process (``python -m attnrec serve``, an API key so the admin endpoint is open to the
test) serves the ML-1M SASRec checkpoint of ``benchmarks/load_test.py`` (``runs/load-test/``,
trained there when missing). A client process keeps ``--concurrency`` keep-alive connections busy
with a fixed mix of requests:

* ``valid`` (80%): known users and ad-hoc histories, as in the load test; each must answer 200 with
  ``k`` items;
* ``malformed`` (10%): broken JSON, ``"k": true``, lone surrogates, control characters, invalid
  UTF-8, deeply nested arrays, wrong types; each must answer 4xx in the JSON error shape;
* ``oversized`` (10%): bodies over the 1 MiB limit, half with ``Content-Length``, half chunked;
  each must answer 413.

Twice during the run (at one third and two thirds of it) the client asks
``POST /v1/admin/reload`` to swap the model for another directory (a copy of it, then the
original). Every few seconds the server's resident memory is sampled. The report counts answers
per kind and status, gives latency percentiles of the valid requests, lists the reloads and the
RSS curve, and states the three claims: zero 5xx, zero failed valid requests, RSS flat.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_harness import Server, environment, proc_status  # noqa: E402
from load_test import CACHE, RESULTS, payloads, train_ml1m  # noqa: E402

API_KEY = "soak-test-key-0123456789abcdef"
LIMIT = 1 << 20  # the server's default body limit (1 MiB)


def malformed_bodies(seed: int = 0) -> list[bytes]:
    """Request bodies that must each be refused with a 4xx (never parsed into an answer, never a 5xx)."""
    rng = random.Random(seed)
    nested = b"[" * 5000 + b"]" * 5000
    return [
        b'{"user": ',  # truncated JSON
        b'{"user": "1", "k": true}',  # a boolean where an integer belongs
        b'{"user": "\\ud800"}',  # a lone UTF-16 surrogate
        b'{"history": ["\\udc00", "424"]}',
        b'{"user": "a\\u0000b"}',  # a control character in an ID
        b'{"user": "\xff\xfe"}',  # invalid UTF-8
        b'{"history": ' + nested + b"}",  # deeply nested
        b'["not", "an", "object"]',
        b'{"user": "1", "k": "ten"}',
        b'{"user": ' + json.dumps("x" * 5000).encode() + b"}",  # an over-long ID
        b'{"history": ' + json.dumps([str(rng.randint(1, 3000)) for _ in range(20_000)]).encode() + b"}",
        b"not json at all",
    ]


def request_bytes(host: str, path: str, body: bytes, chunked: bool = False, key: str = API_KEY) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nX-API-Key: {key}\r\n"
    if not chunked:
        return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    parts = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
    return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunks + b"0\r\n\r\n"


class Connection:
    """One keep-alive HTTP/1.1 connection, reopened when the server closes it (e.g. after a 413)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.reopened = 0

    async def call(self, data: bytes) -> tuple[int, bytes, bool]:
        """``(status, body, closed)``; status 0 means the exchange failed at the transport level."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            self.reopened += 1
        assert self.reader is not None
        try:
            self.writer.write(data)
            await self.writer.drain()
        except ConnectionError:
            pass  # a server may answer (413) and close before reading a large body: read its answer anyway
        try:
            head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 60)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            self.close()
            return 0, b"", True
        status = int(head.split(b" ", 2)[1])
        length, closed = 0, False
        for line in head.split(b"\r\n")[1:]:
            low = line.lower()
            if low.startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
            elif low.startswith(b"connection:") and b"close" in low:
                closed = True
        try:
            body = await self.reader.readexactly(length)
        except (ConnectionError, asyncio.IncompleteReadError):
            # The answer's head arrived, then a reset: a server that refuses a body it did not read
            # (413) closes at once, and unread bytes turn the close into a reset. The status stands.
            body, closed = b"", True
        if closed:
            self.close()
        return status, body, closed

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def soak(
    url: str,
    model: str,
    valid: list[dict[str, Any]],
    seconds: float,
    concurrency: int,
    reload_paths: list[str],
    seed: int,
) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    bad = malformed_bodies(seed)
    big = b'{"history": [' + b",".join([b'"1"'] * (LIMIT // 4 + 1000)) + b"]}"
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    latencies: list[float] = []
    failures: list[str] = []
    failed: Counter[str] = Counter()  # answers that were not what their kind must get, per kind
    t_end = time.monotonic() + seconds

    async def worker(w: int) -> None:
        conn = Connection(host, int(port))
        i = w
        while time.monotonic() < t_end:
            roll = rng.random()
            if roll < 0.8:
                kind, body = "valid", valid[i % len(valid)]
                data, chunked = json.dumps(body).encode(), False
            elif roll < 0.9:
                kind, data, chunked = "malformed", bad[i % len(bad)], False
            else:
                kind, data, chunked = "oversized", big, bool(i % 2)
            i += concurrency
            t = time.perf_counter()
            status, payload, _ = await conn.call(
                request_bytes(f"{host}:{port}", "/v1/recommend", data, chunked)
            )
            dt = time.perf_counter() - t
            counts[f"{kind} {status}"] += 1
            if kind == "valid":
                latencies.append(dt)
                if status != 200 or len(json.loads(payload).get("items", [])) != body["k"]:
                    failures.append(f"{status} {payload[:160]!r}")
                    failed[kind] += 1
            elif kind == "oversized" and status != 413 or kind == "malformed" and not 400 <= status < 500:
                failures.append(f"{kind} -> {status} {payload[:160]!r}")
                failed[kind] += 1
        conn.close()

    async def reloader() -> list[dict[str, Any]]:
        done = []
        for j, path in enumerate(reload_paths, 1):
            conn = Connection(host, int(port))  # a fresh connection: an idle one is closed by the server
            await asyncio.sleep(
                max(0.0, t_end - time.monotonic() - seconds * (1 - j / (len(reload_paths) + 1)))
            )
            t = time.perf_counter()
            body = json.dumps({"model": model, "path": path}).encode()
            status, payload, _ = await conn.call(request_bytes(f"{host}:{port}", "/v1/admin/reload", body))
            done.append(
                {
                    "at_s": round(seconds - (t_end - time.monotonic()), 1),
                    "status": status,
                    "seconds": round(time.perf_counter() - t, 2),
                    "answer": payload[:300].decode(errors="replace"),
                }
            )
            conn.close()
        return done

    reloads, *_ = await asyncio.gather(reloader(), *(worker(w) for w in range(concurrency)))
    lat = np.array(latencies) * 1000
    return {
        "counts": dict(sorted(counts.items())),
        "reloads": reloads,
        "failures": len(failures),
        "failed_by_kind": dict(sorted(failed.items())),
        "failure_samples": failures[:5],
        "valid_requests": len(latencies),
        "p50_ms": float(np.percentile(lat, 50)),
        "p99_ms": float(np.percentile(lat, 99)),
        "max_ms": float(lat.max()),
    }


async def run(
    url: str,
    pid: int,
    model: str,
    valid: list[dict[str, Any]],
    seconds: float,
    concurrency: int,
    reload_paths: list[str],
    seed: int,
) -> dict[str, Any]:
    rss: list[tuple[float, float]] = []
    t0 = time.monotonic()

    async def sampler() -> None:
        while True:
            rss.append((round(time.monotonic() - t0, 1), proc_status(pid)["VmRSS"]))
            await asyncio.sleep(5)

    task = asyncio.create_task(sampler())
    res = await soak(url, model, valid, seconds, concurrency, reload_paths, seed)
    task.cancel()
    rss.append((round(time.monotonic() - t0, 1), proc_status(pid)["VmRSS"]))
    res["rss_mib"] = rss
    return res


def failed_valid(res: dict[str, Any]) -> int:
    """Valid requests not answered 200 with ``k`` items."""
    if "failed_by_kind" in res:
        return int(res["failed_by_kind"].get("valid", 0))
    # Runs recorded before the per-kind count: every failure that was not a malformed or oversized
    # body answered wrongly (those are counted apart in ``counts``) was a valid request's.
    wrong: int = sum(
        n for k, n in res["counts"].items() if k.startswith("oversized") and k.split()[1] != "413"
    )
    wrong += sum(
        n for k, n in res["counts"].items() if k.startswith("malformed") and not k.split()[1].startswith("4")
    )
    return int(res["failures"]) - wrong


def rss_phases(res: dict[str, Any]) -> list[list[float]]:
    """The RSS samples between reloads (a phase ends at a reload), warm-up (first 30 s) and the
    samples from 5 s before to 15 s after each reload left out."""
    cuts = [r["at_s"] for r in res["reloads"]]
    phases: list[list[float]] = [[] for _ in range(len(cuts) + 1)]
    for t, mib in res["rss_mib"]:
        if t >= 30 and not any(c - 5 <= t < c + 15 for c in cuts):  # around a reload: two models, settling
            phases[sum(t >= c for c in cuts)].append(mib)
    return [p for p in phases if p]


def verdict(res: dict[str, Any]) -> dict[str, Any]:
    """The claims of the soak run, computed from the counts and the RSS curve.

    "RSS flat" means no growth under steady traffic: within each phase between reloads the resident
    memory stays within 2% of where the phase started (a reload may move it once: two models
    briefly coexist, and the allocator keeps some of the old one's pages).
    """
    five = sum(n for k, n in res["counts"].items() if k.split()[1].startswith("5"))
    # status 0: the exchange failed at the transport level (reported per kind)
    transport = {k.split()[0]: n for k, n in res["counts"].items() if k.split()[1] == "0"}
    rss = [m for _, m in res["rss_mib"]]
    phases = rss_phases(res)
    drift = [max(abs(m - p[0]) for m in p) for p in phases]
    steps = [b[0] - a[-1] for a, b in zip(phases, phases[1:], strict=False)]
    return {
        "no_5xx": five == 0,
        "server_errors": five,
        "transport_failures": transport,
        "failed_valid": failed_valid(res),
        "no_failed_valid": failed_valid(res) == 0,
        "reloads_ok": all(r["status"] == 200 for r in res["reloads"]),
        "rss_first_mib": rss[0],
        "rss_last_mib": rss[-1],
        "rss_max_mib": max(rss),
        "rss_drift_between_reloads_mib": drift,
        "rss_step_at_reloads_mib": steps,
        "rss_flat": all(d <= 0.02 * p[0] for d, p in zip(drift, phases, strict=True)),
    }


def markdown(report: dict[str, Any]) -> str:
    env, res = report["environment"], report["result"]
    v = verdict(res)  # computed from the recorded run, so a re-render applies the current definitions
    malformed_not_4xx = sum(
        n for k, n in res["counts"].items() if k.startswith("malformed") and not k.split()[1].startswith("4")
    )
    lines = [
        "# attnrec serving soak test",
        "",
        f"Generated by `benchmarks/soak.py` on {env['date']} ({env['cpus']} CPU cores, {env['platform']}, "
        f"python {env['python']}, torch {env['torch']}; load average at start {env['loadavg']}). Model: "
        f"{report['model']}. {report['minutes']} minutes at concurrency {report['concurrency']} from a "
        "separate client process over loopback (hand-written keep-alive HTTP/1.1; a connection the server "
        "closes is reopened), 80% valid requests (half known users, half ad-hoc histories with an unknown "
        "item), 10% malformed bodies, 10% bodies over the 1 MiB limit (half chunked), and two hot reloads "
        "through `POST /v1/admin/reload`.",
        "",
        f"- zero 5xx: **{'yes' if v['no_5xx'] else 'NO'}** ({v['server_errors']})",
        "- exchanges that failed at the transport level (status 0 below), by kind: "
        + (", ".join(f"{k} {n}" for k, n in v["transport_failures"].items()) or "none")
        + " (an oversized body refused with 413 before it was read can reach the client as a connection "
        "reset that swallows the answer: the server closes with unread bytes in its socket)",
        f"- zero failed valid requests: **{'yes' if v['no_failed_valid'] else 'NO'}** ({v['failed_valid']} "
        f"of {res['valid_requests']:,} not answered 200 with k items; malformed bodies: "
        f"{malformed_not_4xx} "
        "not answered 4xx)",
        f"- both reloads answered 200: **{'yes' if v['reloads_ok'] else 'NO'}**",
        f"- RSS flat under traffic: **{'yes' if v['rss_flat'] else 'NO'}** (largest drift within a phase "
        "between reloads, after 30 s of warm-up: "
        + ", ".join(f"{d:.1f}" for d in v["rss_drift_between_reloads_mib"])
        + " MiB; step at each reload: "
        + ", ".join(f"{d:+.1f}" for d in v["rss_step_at_reloads_mib"])
        + f" MiB; {v['rss_first_mib']:.0f} MiB at start, {v['rss_max_mib']:.0f} max, {v['rss_last_mib']:.0f} "
        "at the end)",
        f"- valid requests: p50 {res['p50_ms']:.1f} ms, p99 {res['p99_ms']:.1f} ms, max {res['max_ms']:.0f} "
        "ms",
        "",
        "| kind | status | answers |",
        "|---|---:|---:|",
    ]
    for key, n in res["counts"].items():
        kind, status = key.split()
        lines.append(f"| {kind} | {status} | {n:,} |")
    lines += ["", "Reloads:", ""]
    for r in res["reloads"]:
        lines.append(f"- at {r['at_s']} s: HTTP {r['status']} in {r['seconds']} s")
    lines += ["", "Server RSS (MiB) every ~5 s: " + ", ".join(f"{m:.0f}" for _, m in res["rss_mib"])]
    if res["failure_samples"]:
        lines += ["", "Failure samples:", ""] + [f"- `{s}`" for s in res["failure_samples"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch threads in the server")
    ap.add_argument("--train-seconds", type=float, default=120)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--render", action="store_true", help="only regenerate OUT.md from OUT.json")
    ap.add_argument("--out", default=str(RESULTS / "soak"))
    args = ap.parse_args()
    if args.render:
        Path(args.out + ".md").write_text(markdown(json.loads(Path(args.out + ".json").read_text())))
        return

    CACHE.mkdir(parents=True, exist_ok=True)
    model_dir = train_ml1m("sasrec", args.train_seconds)
    twin = CACHE / "sasrec-ml1m-reload"
    shutil.rmtree(twin, ignore_errors=True)
    shutil.copytree(model_dir, twin)  # the directory the first reload swaps to
    # an admin key: the reloads need one, and it opens the public API too
    server = Server("sasrec", model_dir, args.threads, ["--admin-key", API_KEY])
    loadavg = " ".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        server.wait_ready()
        valid = payloads(model_dir, 5000, seed=args.seed)
        res = asyncio.run(
            run(
                server.url,
                server.proc.pid,
                "sasrec",
                valid,
                args.minutes * 60,
                args.concurrency,
                [str(twin), str(model_dir)],
                args.seed,
            )
        )
    finally:
        server.stop()
    report = {
        "environment": environment() | {"loadavg": loadavg},
        "model": f"sasrec trained on ML-1M by benchmarks/load_test.py ({model_dir.name})",
        "minutes": args.minutes,
        "concurrency": args.concurrency,
        "server_threads": args.threads,
        "result": res,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(str(out) + ".json").write_text(json.dumps(report, indent=2) + "\n")
    Path(str(out) + ".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
