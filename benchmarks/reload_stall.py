"""Latency while a model is hot-reloaded, against the steady state, on a real `attnrec serve`.

    taskset -c 1 .venv/bin/python benchmarks/reload_stall.py --seconds 60       # the committed run
    taskset -c 1 .venv/bin/python benchmarks/reload_stall.py --seconds 20 --out /tmp/stall   # smoke

One server process serves the ML-1M SASRec checkpoint of ``benchmarks/load_test.py``
(``runs/load-test/``, trained there when missing). A client keeps ``--concurrency`` connections
busy with the load test's request mix (known users and ad-hoc histories, k=10) for ``--seconds``,
and every ``--every`` seconds asks ``POST /v1/admin/reload`` to swap the model for a copy of its
directory and back. Each request is timed; those whose flight overlaps a reload (from the reload
request to its answer) are the *during* sample, the others the *steady* sample; the report gives
p50/p99/max of both and their p99 ratio.

``--code DIR`` serves with the attnrec package under ``DIR`` (default: this checkout's ``src``), so
that the same run can be made with an earlier version for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load_harness import Server  # noqa: E402
from load_test import CACHE, RESULTS, payloads, train_ml1m  # noqa: E402

API_KEY = "reload-stall-key-0123456789abcdef"
ROOT = Path(__file__).resolve().parents[1]


async def _drive(
    url: str,
    bodies: list[dict[str, Any]],
    dirs: list[Path],
    seconds: float,
    every: float,
    concurrency: int,
    rate: float | None,
) -> tuple[list[tuple[float, float, int]], list[tuple[float, float, int]]]:
    import httpx

    auth = {"Authorization": f"Bearer {API_KEY}"}
    limits = httpx.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency + 1)
    requests: list[tuple[float, float, int]] = []
    reloads: list[tuple[float, float, int]] = []
    async with httpx.AsyncClient(base_url=url, headers=auth, limits=limits, timeout=60) as c:
        for body in bodies[:50]:  # warm-up
            await c.post("/v1/recommend", json=body)
        t_end = time.monotonic() + seconds

        async def worker(offset: int) -> None:
            i = offset
            due = time.monotonic() + (offset / rate if rate else 0.0)
            while time.monotonic() < t_end:
                if rate:  # paced: each worker sends at rate / concurrency per second, late ones at once
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    due = max(due + concurrency / rate, time.monotonic() - concurrency / rate)
                t0 = time.monotonic()
                r = await c.post("/v1/recommend", json=bodies[i % len(bodies)])
                requests.append((t0, time.monotonic(), r.status_code))
                i += concurrency

        async def reloader() -> None:
            k = 0
            while True:
                await asyncio.sleep(every)
                if time.monotonic() + every / 2 > t_end:
                    return
                t0 = time.monotonic()
                r = await c.post("/v1/admin/reload", json={"model": "m", "path": str(dirs[k % 2])})
                reloads.append((t0, time.monotonic(), r.status_code))
                k += 1

        await asyncio.gather(reloader(), *(worker(j) for j in range(concurrency)))
    return requests, reloads


def _stats(lat_ms: np.ndarray) -> dict[str, float]:
    if not len(lat_ms):
        return {"n": 0}
    return {
        "n": len(lat_ms),
        "p50_ms": float(np.percentile(lat_ms, 50)),
        "p99_ms": float(np.percentile(lat_ms, 99)),
        "max_ms": float(lat_ms.max()),
    }


def run(
    code: Path, model_dir: Path, seconds: float, every: float, concurrency: int, rate: float | None
) -> dict[str, Any]:
    copy = model_dir.parent / f"{model_dir.name}-reload-copy"
    if not copy.exists():
        shutil.copytree(model_dir, copy)
    os.environ["PYTHONPATH"] = str(code)
    os.environ["ATTNREC_ADMIN_KEYS"] = API_KEY  # reload is an admin endpoint; an admin key opens both
    server = Server("m", model_dir, 1, [])
    try:
        server.wait_ready()
        bodies = payloads(model_dir, 2000)
        requests, reloads = asyncio.run(
            _drive(server.url, bodies, [copy, model_dir], seconds, every, concurrency, rate)
        )
    finally:
        server.stop()
    windows = [(t0, t1) for t0, t1, _ in reloads]
    during = np.array(
        [1000 * (b - a) for a, b, _ in requests if any(a < w1 and b > w0 for w0, w1 in windows)]
    )
    steady = np.array(
        [1000 * (b - a) for a, b, _ in requests if not any(a < w1 and b > w0 for w0, w1 in windows)]
    )
    out = {
        "code": str(code),
        "requests": len(requests),
        "failed": sum(1 for *_, s in requests if s != 200),
        "reloads": [{"seconds": round(t1 - t0, 3), "status": s} for t0, t1, s in reloads],
        "steady": (calm := _stats(steady)),
        "during_reload": (busy := _stats(during)),
    }
    if len(steady) and len(during):
        out["p99_ratio"] = busy["p99_ms"] / calm["p99_ms"]
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Latency during a hot reload",
        "",
        f"`{report['command']}` on {report['machine']}; ML-1M SASRec (`runs/load-test/sasrec-ml1m`), "
        f"concurrency {report['concurrency']}, "
        + (
            f"paced at {report['rate']:g} requests/s in all"
            if report.get("rate")
            else "closed loop (saturating)"
        )
        + f", {report['seconds']:.0f} s per run, a reload every "
        f"{report['every']:.0f} s (a copy of the directory, then the original). A request is *during* a "
        "reload when its flight overlaps the reload request's.",
        "",
        "| code | requests | failed | reloads (s each) | steady p50 / p99 / max ms "
        "| during reload p50 / p99 / max ms | p99 ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in report["runs"].items():
        s, d = r["steady"], r["during_reload"]
        reloads = ", ".join(
            f"{x['seconds']:.2f}" + ("" if x["status"] == 200 else f" ({x['status']})") for x in r["reloads"]
        )
        lines.append(
            f"| {name} | {r['requests']} | {r['failed']} | {reloads} | "
            f"{s.get('p50_ms', 0):.1f} / {s.get('p99_ms', 0):.1f} / {s.get('max_ms', 0):.1f} | "
            f"{d.get('p50_ms', 0):.1f} / {d.get('p99_ms', 0):.1f} / {d.get('max_ms', 0):.1f} (n={d['n']}) | "
            f"{r.get('p99_ratio', float('nan')):.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--every", type=float, default=8)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rate", type=float, default=None, help="requests/s in all (default: closed loop)")
    ap.add_argument(
        "--train-seconds", type=float, default=30, help="training budget when the model is missing"
    )
    ap.add_argument(
        "--code",
        action="append",
        default=None,
        help="NAME=DIR: serve with the attnrec package under DIR (repeatable); default: this checkout",
    )
    ap.add_argument("--out", default=str(RESULTS / "reload_stall"))
    args = ap.parse_args()
    CACHE.mkdir(parents=True, exist_ok=True)
    model_dir = train_ml1m("sasrec", args.train_seconds)
    codes = dict(c.split("=", 1) for c in args.code) if args.code else {"this version": str(ROOT / "src")}
    report: dict[str, Any] = {
        "command": "python benchmarks/reload_stall.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPU(s) allowed, "
        f"Python {platform.python_version()}",
        "seconds": args.seconds,
        "every": args.every,
        "concurrency": args.concurrency,
        "rate": args.rate,
        "runs": {},
    }
    for name, code in codes.items():
        report["runs"][name] = run(
            Path(code), model_dir, args.seconds, args.every, args.concurrency, args.rate
        )
        print(name, json.dumps(report["runs"][name]), flush=True)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
