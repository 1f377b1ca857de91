"""Ingestion throughput of the history stores (events/s, batched) and the cost of one bounded read.

    taskset -c 1 env OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/store_ingest.py
    ... benchmarks/store_ingest.py --quick      # smoke run (fewer events, not saved)

Writes ``benchmarks/results/store_ingest.json`` and a generated ``store_ingest.md``.

Protocol. :data:`N_EVENTS` synthetic events (seeded: users drawn from 10,000 with a Zipf-like skew,
items from 5,000, timestamps increasing, an event type of view/cart/buy, every tenth with a rating)
are built as :class:`attnrec.store.Event` objects first (their construction and checking rate is
measured on its own), then appended to a fresh store in batches of each size of :data:`BATCHES`;
events/s = events / wall seconds of the appends (each batch is one transaction, durable on return).
Backends:

* SQLite (``SqliteStore``) in WAL mode with ``durability="full"`` (fsync at every commit) and
  ``"normal"``, the file in a temporary directory (the machine's ``/tmp`` file system);
* Redis (``RedisStore``, redis-py) against Debian's ``redis-server`` started for the run with the
  append-only file on, ``appendfsync everysec`` and ``always``, the server pinned to CPU 0 (the
  client runs where the command is pinned: CPU 1), data in a temporary directory.

Reads: the median and 99th-percentile wall time of one ``recent`` call for 32 users (a
micro-batch) with ``limit`` 250 (a ``max_len`` of 200 plus the default margin), after the largest
ingest, over :data:`READS` calls.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnrec.store import Event, HistoryStore, RedisStore, SqliteStore
from load_harness import redis_server  # benchmarks/load_harness.py, beside this script
from provenance import git_sha

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
N_EVENTS = 200_000
BATCHES = (100, 1_000, 10_000)
READS = 300
TARGETS = {"sqlite": 5_000, "redis": 20_000}  # events/s asked of each backend


def make_events(n: int, seed: int = 0) -> list[Event]:
    rng = np.random.default_rng(seed)
    users = (rng.pareto(1.2, n) * 300).astype(np.int64) % 10_000
    items = rng.integers(0, 5_000, n)
    ts = 1_800_000_000 + np.cumsum(rng.integers(0, 3, n))
    kinds = np.array(["view", "cart", "buy"])[rng.integers(0, 3, n)]
    ratings = np.where(rng.random(n) < 0.1, rng.integers(1, 6, n).astype(float), np.nan)
    return [
        Event(f"u{u}", f"i{i}", int(t), str(k), None if np.isnan(r) else float(r))
        for u, i, t, k, r in zip(users, items, ts, kinds, ratings, strict=True)
    ]


def sqlite_store(directory: Path, durability: str, batch: int) -> HistoryStore:
    return SqliteStore(directory / f"{durability}-{batch}.db", durability=durability)


def redis_store(url: str, batch: int) -> HistoryStore:
    return RedisStore(url, namespace=f"b{batch}")


def ingest(store: HistoryStore, events: list[Event], batch: int) -> float:
    t0 = time.perf_counter()
    for lo in range(0, len(events), batch):
        store.append(events[lo : lo + batch])
    return time.perf_counter() - t0


def reads(store: HistoryStore, n: int, seed: int = 1) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    times = []
    for _ in range(n):
        users = [f"u{u}" for u in rng.integers(0, 2_000, 32)]
        t0 = time.perf_counter()
        store.recent(users, 250)
        times.append(time.perf_counter() - t0)
    return {"p50_ms": float(np.percentile(times, 50) * 1e3), "p99_ms": float(np.percentile(times, 99) * 1e3)}


def run_config(
    open_store: Callable[[int], HistoryStore], events: list[Event], n_reads: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"batches": {}, "load_1min": [os.getloadavg()[0]]}
    for batch in BATCHES:
        store = open_store(batch)
        n = min(
            len(events), batch * 200
        )  # small batches: fewer events, the same number of transactions at most
        seconds = ingest(store, events[:n], batch)
        out["batches"][str(batch)] = {
            "events": n,
            "seconds": round(seconds, 3),
            "events_per_s": round(n / seconds),
        }
        if batch == BATCHES[-1]:
            out["read_32_users"] = reads(store, n_reads)
        store.close()
    out["load_1min"].append(os.getloadavg()[0])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20k events, not saved")
    args = ap.parse_args()
    n = 20_000 if args.quick else N_EVENTS
    t0 = time.perf_counter()
    events = make_events(n)
    build = time.perf_counter() - t0
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for durability in ("full", "normal"):
            print(f"sqlite {durability} ...", file=sys.stderr)
            results[f"sqlite-{durability}"] = run_config(
                functools.partial(sqlite_store, Path(tmp), durability), events, READS
            )
        for fsync in ("everysec", "always"):
            print(f"redis appendfsync {fsync} ...", file=sys.stderr)
            d = Path(tmp) / f"redis-{fsync}"
            d.mkdir()
            with redis_server(d, fsync, cpus={0}) as url:
                results[f"redis-{fsync}"] = run_config(functools.partial(redis_store, url), events, READS)
    record = {
        "benchmark": "store_ingest",
        "git_sha": git_sha(),
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
        },
        "events": n,
        "event_objects_per_s": round(n / build),
        "targets_events_per_s": TARGETS,
        "results": results,
    }
    print(json.dumps(record, indent=1))
    if not args.quick:
        (RESULTS / "store_ingest.json").write_text(json.dumps(record, indent=1) + "\n")
        (RESULTS / "store_ingest.md").write_text(report(record))


def report(record: dict[str, Any]) -> str:
    lines = [
        "# History-store ingestion throughput",
        "",
        "Generated by `benchmarks/store_ingest.py` (protocol in its docstring); "
        f"commit `{record['git_sha'][:10]}`, {record['events']:,} synthetic events, one process pinned to "
        "CPU 1 (`taskset -c 1`), redis-server on CPU 0. Each batch is one transaction, durable on return "
        "as the backend promises. Targets: SQLite 5,000 events/s, Redis 20,000 events/s.",
        "",
        "| store | durability | "
        + " | ".join(f"batch {b:,}" for b in BATCHES)
        + " | read 32 users p50 / p99 |",
        "|---|---|" + "---:|" * len(BATCHES) + "---:|",
    ]
    setting = {
        "sqlite-full": "synchronous=FULL",
        "sqlite-normal": "synchronous=NORMAL",
        "redis-everysec": "appendfsync everysec",
        "redis-always": "appendfsync always",
    }
    for name, r in record["results"].items():
        cells = [f"{r['batches'][str(b)]['events_per_s']:,}/s" for b in BATCHES]
        rd = r["read_32_users"]
        lines.append(
            f"| {name.split('-')[0]} | {setting[name]} | "
            + " | ".join(cells)
            + f" | {rd['p50_ms']:.2f} / {rd['p99_ms']:.2f} ms |"
        )
    loads = [x for r in record["results"].values() for x in r["load_1min"]]
    lines += [
        "",
        f"The machine ({record['machine']['cores']} cores) was shared with other jobs: its 1-minute load "
        f"average was {min(loads):.1f} to {max(loads):.1f} during the run, so these figures are lower bounds "
        "of what one free core does.",
        "",
        f"Building and checking the `Event` objects themselves: {record['event_objects_per_s']:,} events/s "
        "(not included above).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
