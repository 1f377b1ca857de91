"""Memory and loop time under a burst of large bodies: N concurrent ~1 MiB requests against `attnrec serve`.

The server (pinned to one core with ``taskset`` when available) serves a small SASRec with random
weights. The client (pinned to another core) opens ``--concurrency`` connections at once, each
sending one ``POST /v1/recommend`` whose ``exclude`` list of 10,000 long IDs makes the body just
under the 1 MiB limit, while a prober on its own connection calls ``GET /healthz`` every 50 ms and
a sampler reads the server's resident memory every 20 ms. Reported: the answers by status, the
server's RSS before, at its peak (VmHWM) and after, and the ``/healthz`` latency during the burst.

    python benchmarks/concurrent_bodies.py                      # the defaults: the capped server
    python benchmarks/concurrent_bodies.py --server-args="--max-in-flight 100000 --max-connections 0"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from load_harness import Server, proc_status  # benchmarks/load_harness.py, beside this script
from load_test import synthetic_1m

RESULTS = Path(__file__).resolve().parent / "results"


def body(seed: int) -> bytes:
    ids = [f"item-{seed}-{i}-" + "x" * 80 for i in range(10_000)]
    data = json.dumps({"history": ["1", "2", "3"], "k": 10, "exclude": ids}).encode()
    assert len(data) < 1 << 20, len(data)
    return data


async def one(host: str, port: int, data: bytes) -> int | str:
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        "POST /v1/recommend HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        f"{len(data)}\r\nConnection: close\r\n\r\n"
    )
    try:
        writer.write(head.encode() + data)
        await writer.drain()
        status_line = await reader.readline()
        await reader.read()
        return int(status_line.split()[1]) if status_line else 0
    except (ConnectionError, OSError) as e:
        return f"error {type(e).__name__}"
    finally:
        writer.close()


async def burst(url: str, pid: int, concurrency: int) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    bodies = [body(i) for i in range(concurrency)]
    rss: list[float] = []
    probes: list[float] = []
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            rss.append(proc_status(pid)["VmRSS"])
            await asyncio.sleep(0.02)

    async def probe() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        while not done.is_set():
            t0 = time.perf_counter()
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            probes.append(1000 * (time.perf_counter() - t0))
            await asyncio.sleep(0.05)
        writer.close()

    tasks = [asyncio.create_task(sample()), asyncio.create_task(probe())]
    await asyncio.sleep(0.3)
    t0 = time.perf_counter()
    statuses = await asyncio.gather(*(one(host, int(port), b) for b in bodies))
    seconds = time.perf_counter() - t0
    await asyncio.sleep(0.3)
    done.set()
    await asyncio.gather(*tasks)
    p = np.array(probes)
    return {
        "statuses": dict(Counter(str(s) for s in statuses)),
        "burst_s": round(seconds, 2),
        "rss_peak_sampled_mib": round(max(rss), 1),
        "healthz_ms": {
            "n": len(p),
            "p50": round(float(np.percentile(p, 50)), 1),
            "p99": round(float(np.percentile(p, 99)), 1),
            "max": round(float(p.max()), 1),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--server-args", default="", help="Extra `attnrec serve` options.")
    ap.add_argument("--label", default="capped (defaults)")
    ap.add_argument("--out", type=Path, default=RESULTS / "concurrent_bodies.json")
    args = ap.parse_args()
    model = synthetic_1m("sasrec", n_items=20_000, n_users=2_000, hidden=32)
    server = Server("sas", model, 1, args.server_args.split())
    pin = shutil.which("taskset")
    if pin:
        os.system(f"taskset -pc 1 {server.proc.pid} > /dev/null")
        os.sched_setaffinity(0, {0})
    try:
        server.wait_ready()
        time.sleep(1.0)
        before = proc_status(server.proc.pid)
        result = asyncio.run(burst(server.url, server.proc.pid, args.concurrency))
        time.sleep(1.0)
        after = proc_status(server.proc.pid)
    finally:
        server.stop()
    row = {
        "label": args.label,
        "server_args": args.server_args,
        "concurrency": args.concurrency,
        "body_bytes": len(body(0)),
        "rss_before_mib": round(before["VmRSS"], 1),
        "rss_peak_mib": round(after["VmHWM"], 1),
        "rss_after_mib": round(after["VmRSS"], 1),
        **result,
        "pinned": bool(pin),
        "load_avg_1m": os.getloadavg()[0],
        "python": sys.version.split()[0],
    }
    rows = json.loads(args.out.read_text()) if args.out.exists() else []
    rows.append(row)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    main()
