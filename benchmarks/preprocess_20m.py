"""Preprocessing a MovieLens-20M-sized log: a synthetic 20M-row Parquet file, read in a streaming way.

    # writes benchmarks/results/preprocess_20m.*
    nice -n 10 .venv/bin/python benchmarks/preprocess_20m.py
    .venv/bin/python benchmarks/preprocess_20m.py --rows 1000000     # smaller smoke run (printed, not saved)

The log (generated once, under /tmp, never in the repository) has the shape of MovieLens-20M:
138,493 users with 20 or more ratings each (log-normal activity), 26,744 movies with Zipf
popularity, 20,000,263 rows of ``userId`` (int32, rows grouped by user as in ``ratings.csv``),
``movieId`` (int32), ``rating`` (0.5-5.0, float32) and ``timestamp`` (int64 unix seconds), written
in row groups of 1M rows with ``pyarrow.parquet.ParquetWriter`` so generating it needs little memory.

Preprocessing runs in a fresh subprocess so its peak resident memory (``ru_maxrss``) is its own:
``attnrec.data.stream.read_parquet_stream`` (batches of 1M rows: incremental int32 ID maps, 5-core
filtering on the codes, user/time ordering), then the leave-one-out split (per-user sequences) that
training uses. ``--compare-pandas`` also measures the in-memory ``read_table`` path on the same file.
Writes ``benchmarks/results/preprocess_20m.json`` and a generated ``preprocess_20m.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ML20M = {"rows": 20_000_263, "users": 138_493, "items": 26_744}


def generate(path: Path, rows: int, users: int, items: int, seed: int = 0, group: int = 1 << 20) -> float:
    """Write the synthetic log; returns seconds. Users' rows are contiguous and in user order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    extra = rng.lognormal(np.log(60.0), 1.2, users)
    counts = 20 + np.floor(extra * (rows - 20 * users) / extra.sum()).astype(np.int64)
    counts[: rows - int(counts.sum())] += 1  # exactly `rows` rows
    pop_cdf = np.cumsum(1.0 / np.arange(1, items + 1) ** 0.9)
    movie_ids = rng.permutation(np.arange(1, items + 1) * 3).astype(np.int32)  # sparse, unordered IDs
    user_ids = np.arange(1, users + 1, dtype=np.int32)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    schema = pa.schema(
        [("userId", pa.int32()), ("movieId", pa.int32()), ("rating", pa.float32()), ("timestamp", pa.int64())]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, schema) as writer:
        for lo in range(0, rows, group):
            hi = min(rows, lo + group)
            u = np.searchsorted(bounds, np.arange(lo, hi), side="right") - 1  # user of each row
            start = 9.0e8 + rng.random(users)[u] * 4.0e8  # each user's first rating time
            table = pa.table(
                {
                    "userId": user_ids[u],
                    "movieId": movie_ids[np.searchsorted(pop_cdf, rng.random(hi - lo) * pop_cdf[-1])],
                    "rating": (rng.integers(1, 11, hi - lo) / 2).astype(np.float32),
                    "timestamp": (start + rng.exponential(3.0e6, hi - lo)).astype(np.int64),
                },
                schema=schema,
            )
            writer.write_table(table)
    tmp.replace(path)
    return time.perf_counter() - t0


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(path: Path, how: str, k_core: int) -> dict[str, Any]:
    from attnrec.data.split import leave_one_out

    base = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    if how == "stream":
        from attnrec.data.stream import read_parquet_stream

        data = read_parquet_stream(path, k_core=k_core)
    else:
        from attnrec.data.readers.table import read_table

        data = read_table(path, k_core=k_core)
    t_read, c_read = time.perf_counter() - t0, time.process_time() - c0
    peak_read = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t1, c1 = time.perf_counter(), time.process_time()
    split = leave_one_out(data)
    t_split, c_split = time.perf_counter() - t1, time.process_time() - c1
    return {
        "how": how,
        "k_core": k_core,
        "rows": len(data),
        "users": data.n_users,
        "items": data.n_items,
        "train_items": int(len(split.train.items)),
        "read_seconds": t_read,
        "split_seconds": t_split,
        "total_seconds": t_read + t_split,
        "read_cpu_seconds": c_read,
        "split_cpu_seconds": c_split,
        "total_cpu_seconds": c_read + c_split,
        "rss_after_imports_mb": base,
        "peak_rss_after_read_mb": peak_read,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "sha256": data.source.sha256,
    }


def run_worker(path: Path, how: str, k_core: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, __file__, "--worker", str(path), how, str(k_core)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"  {how}: {res['rows']:,} rows -> {res['users']:,} users, {res['items']:,} items; read "
        f"{res['read_seconds']:.1f} s + split {res['split_seconds']:.1f} s (CPU "
        f"{res['total_cpu_seconds']:.1f} s), peak RSS {res['peak_rss_mb']:.0f} MB",
        flush=True,
    )
    return res


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "# Preprocessing a 20M-row interaction log",
        "",
        "Generated by `benchmarks/preprocess_20m.py` from `preprocess_20m.json`; do not edit.",
        "",
        f"Synthetic log with the shape of MovieLens-20M: {res['rows']:,} rows, {res['users']:,} users, "
        f"{res['items']:,} items; Parquet {res['file_mb']:.0f} MB (generated in "
        f"{res['generate_seconds']:.0f} s). Machine: {m['cpu']}, {m['cores']} cores; load average "
        f"{m['load_average_at_start'][0]:.1f} at the start, {res['load_average_at_end'][0]:.1f} at the end "
        f"({res['other_load']}).",
        "",
        "Peak RSS is the preprocessing process's own (`ru_maxrss`, including the ~"
        f"{res['runs'][0]['rss_after_imports_mb']:.0f} MB of the Python interpreter and libraries), once "
        "right after reading (the reader's own peak) and once after the leave-one-out split, whose training, "
        "validation and test sequences are copies of the log (int64). Wall "
        "seconds depend on what else ran; CPU seconds (user + system, all threads) much less so.",
        "",
        "| reader | k-core | rows kept | users | items | read + encode + sort s | leave-one-out split s | "
        "total s (wall) | total CPU s | peak RSS MB after reading | peak RSS MB after the split |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["runs"]:
        name = (
            "read_parquet_stream (1M-row batches)"
            if r["how"] == "stream"
            else "read_table (pandas, in memory)"
        )
        lines.append(
            f"| {name} | {r['k_core']} | {r['rows']:,} | {r['users']:,} | {r['items']:,} | "
            f"{r['read_seconds']:.1f} | {r['split_seconds']:.1f} | {r['total_seconds']:.1f} | "
            f"{r['total_cpu_seconds']:.1f} | {r['peak_rss_after_read_mb']:.0f} | {r['peak_rss_mb']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        print(json.dumps(worker(Path(argv[1]), argv[2], int(argv[3]))))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=ML20M["rows"])
    p.add_argument(
        "--path", type=Path, default=None, help="where the synthetic log goes (default under /tmp)"
    )
    p.add_argument("--k-core", type=int, default=5)
    p.add_argument("--compare-pandas", action="store_true", help="also time read_table (needs several GB)")
    p.add_argument("--other-load", default="other jobs were running", help="what else ran (recorded)")
    a = p.parse_args(argv)
    import pyarrow.parquet as pq

    users = max(10, round(ML20M["users"] * a.rows / ML20M["rows"]))
    items = max(10, round(ML20M["items"] * min(1.0, (a.rows / ML20M["rows"]) ** 0.5)))
    path = a.path or Path("/tmp/attnrec-bench") / f"synthetic-{a.rows}.parquet"
    if path.resolve().is_relative_to(ROOT):
        raise SystemExit("keep the synthetic log out of the repository (use a path under /tmp)")
    machine = {
        "cpu": platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            machine["cpu"] = line.split(":", 1)[1].strip()
            break
    gen = 0.0
    if not path.exists() or pq.ParquetFile(path).metadata.num_rows != a.rows:
        print(f"generating {a.rows:,} rows in {path} ...", flush=True)
        gen = generate(path, a.rows, users, items)
    print("preprocessing:", flush=True)
    runs = [run_worker(path, "stream", a.k_core)]
    if a.compare_pandas:
        runs.append(run_worker(path, "pandas", a.k_core))
    res = {
        "rows": a.rows,
        "users": users,
        "items": items,
        "path": str(path),
        "file_mb": path.stat().st_size / 2**20,
        "generate_seconds": gen,
        "runs": runs,
        "machine": machine,
        "load_average_at_end": os.getloadavg(),
        "other_load": a.other_load,
    }
    if a.rows != ML20M["rows"]:
        print(markdown(res))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "preprocess_20m.json").write_text(json.dumps(res, indent=2) + "\n")
    (RESULTS / "preprocess_20m.md").write_text(markdown(res))
    print(f"wrote {RESULTS / 'preprocess_20m.json'} and preprocess_20m.md")


if __name__ == "__main__":
    main()
