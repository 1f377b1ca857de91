"""Server CPU per request: how much of it is the HTTP layer, and where it goes.

    taskset -c 1 .venv/bin/python benchmarks/http_cpu.py                 # measure, write results
    taskset -c 1 .venv/bin/python benchmarks/http_cpu.py --profile       # and a py-spy profile at c=1
    .venv/bin/python benchmarks/http_cpu.py --render                     # rewrite the .md from the .json

Protocol. The model is the load test's ML-1M SASRec (``benchmarks/load_test.py``: width 50, max
length 200, trained under a short time budget; the quality does not matter here). The request
bodies are the load test's: half known users, half ad-hoc histories of 10-50 items with one unknown
item, ``k = 10``.

* **in-process**: ``Recommender.load`` in this process, then ``recommend`` for each body in turn;
  CPU seconds of this process (``time.process_time``) per request. This is the scoring alone: the
  same model and the same answers without HTTP, JSON or the event loop.
* **server**: ``attnrec serve`` (one torch thread, the defaults: micro-batches of up to 32, no
  wait) driven by the load test's client process (hand-written keep-alive HTTP/1.1) at
  concurrency 1 and 32; the server's CPU seconds (user + system, from ``/proc``) per request,
  warm-up included in the count as in ``load_test.py``.
* **HTTP layer** = server - in-process at concurrency 1 (at 32 the server batches, so its scoring
  costs less than one request at a time).

CPU seconds, not wall time, are the contention-robust figure on a shared machine; the load
average during each row is recorded. With ``--profile`` a second server run at concurrency 1 is
sampled by ``py-spy`` (``pip install py-spy``; not a dependency of attnrec) and the functions with
the most own samples are listed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from load_harness import Server, environment  # benchmarks/load_harness.py, beside this script
from load_test import CACHE, RESULTS, payloads, run_setting, train_ml1m

OUT = RESULTS / "http_cpu"
PREVIOUS = [
    ("first service audit (before the operator features)", 1, "1.0", "its own run"),
    ("second service audit", 1, "5.7", "its own run, in-process scoring 2.2 ms"),
    ("load_test.md, 2026-11-22, load average 8.4", 1, "3.55", "benchmarks/results/load_test.md"),
    ("load_test.md, 2026-11-22, load average 8.7", 32, "1.15", "benchmarks/results/load_test.md"),
]


def in_process(model_dir: Path, bodies: list[dict[str, Any]], warmup: int) -> dict[str, float]:
    import torch

    from attnrec.recommend import Recommender

    torch.set_num_threads(1)
    rec = Recommender.load(model_dir, device="cpu")

    def answer(body: dict[str, Any]) -> None:
        if "user" in body:
            rec.recommend(user=body["user"], k=body["k"])
        else:
            rec.recommend(history=body["history"], k=body["k"])

    for body in bodies[:warmup]:
        answer(body)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for body in bodies:
        answer(body)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "requests": len(bodies),
        "cpu_ms_per_request": 1000 * cpu / len(bodies),
        "wall_ms_per_request": 1000 * wall / len(bodies),
        "loadavg_1min": os.getloadavg()[0],
    }


def profile(model_dir: Path, n_requests: int, seconds: int) -> dict[str, Any]:
    """py-spy samples of a server answering at concurrency 1: the 25 functions with the most own
    samples (the function itself was running) and with the most inclusive ones (it was on the stack)."""
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(pyspy).exists():
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    server = Server("sasrec-ml1m", model_dir, 1, ["--max-batch=32", "--max-wait-ms=0.0"])
    raw = CACHE / "http_cpu_profile.txt"
    try:
        server.wait_ready()
        bodies_file = CACHE / "bodies-profile.json"
        bodies_file.write_text(json.dumps(payloads(model_dir, n_requests, seed=7)))
        spy = subprocess.Popen(
            [pyspy, "record", "--pid", str(server.proc.pid), "--duration", str(seconds), "--format", "raw"]
            + ["--output", str(raw), "--nonblocking", "--threads"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = [sys.executable, str(Path(__file__).with_name("load_test.py")), "_client"]
        client += ["--url", server.url, "--bodies", str(bodies_file), "--concurrency", "1"]
        client += ["--warmup", "20", "--client", "raw"]
        subprocess.run(client, capture_output=True, check=True, timeout=900)
        spy.wait(timeout=seconds + 60)
    finally:
        server.stop()
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if frames and frames[0].startswith("thread"):
            frames = frames[1:]
        if not frames:
            continue
        n = int(count)
        total += n
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n

    def top(counts: dict[str, int]) -> list[dict[str, Any]]:
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:25]
        return [{"function": f, "samples": n, "share": n / total} for f, n in ranked]

    return {"own": top(own), "inclusive": top(inclusive), "samples": total}


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# Server CPU per request: the HTTP layer's share",
        "",
        f"Generated by `benchmarks/http_cpu.py` (protocol in its docstring) on {env['date']} "
        f"({env['cpus']} CPU cores shared with other jobs, python {env['python']}, torch {env['torch']}). "
        f"Model: {report['model']}. {report['n_requests']} requests per row.",
        "",
        "| where | concurrency | CPU ms / request | p50 / p99 ms (client) | load average |",
        "|---|---:|---:|---|---:|",
    ]
    ip = report["in_process"]
    lines.append(
        f"| in-process `Recommender.recommend` | 1 | {ip['cpu_ms_per_request']:.2f} | "
        f"{ip['wall_ms_per_request']:.2f} (wall, mean) | {ip['loadavg_1min']:.1f} |"
    )
    for row in report["server"]:
        lines.append(
            f"| `attnrec serve` | {row['concurrency']} | {row['server_cpu_ms_per_request']:.2f} | "
            f"{row['p50_ms']:.1f} / {row['p99_ms']:.1f} | {row['loadavg_1min']:.1f} |"
        )
    c1 = next(r for r in report["server"] if r["concurrency"] == 1)
    layer = c1["server_cpu_ms_per_request"] - ip["cpu_ms_per_request"]
    lines += [
        "",
        f"HTTP layer at concurrency 1 (server - in-process): **{layer:.2f} ms** of CPU per request.",
        "",
        "Previous figures (server CPU per request, same model family and bodies):",
        "",
        "| run | concurrency | server CPU ms / request | source |",
        "|---|---:|---:|---|",
    ]
    lines += [f"| {run} | {c} | {ms} | {src} |" for run, c, ms, src in PREVIOUS]
    if report.get("profile"):
        lines += [
            "",
            "py-spy, server at concurrency 1, the 15 functions with the most own samples (the function "
            f"itself running, all threads; {report['profile']['samples']} samples in all; "
            "the inclusive counts are in the JSON file):",
            "",
            "| function | share of samples |",
            "|---|---:|",
        ]
        lines += [f"| `{p['function']}` | {100 * p['share']:.1f}% |" for p in report["profile"]["own"][:15]]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--train-seconds", type=float, default=60)
    ap.add_argument("--profile", action="store_true", help="also sample the server with py-spy at c=1")
    ap.add_argument("--profile-seconds", type=int, default=20)
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    out = Path(args.out)
    if args.render:
        out.with_suffix(".md").write_text(markdown(json.loads(out.with_suffix(".json").read_text())))
        return

    CACHE.mkdir(parents=True, exist_ok=True)
    model_dir = train_ml1m("sasrec", args.train_seconds)
    meta = json.loads((model_dir / "config.json").read_text())
    bodies = payloads(model_dir, args.requests, seed=1)
    report: dict[str, Any] = {
        "environment": environment(),
        "model": f"SASRec {json.dumps(meta['model_config'])}, {meta['n_items']:,} items, "
        f"{meta['n_users']:,} users",
        "n_requests": args.requests,
    }
    report["in_process"] = in_process(model_dir, bodies, warmup=min(50, args.requests // 10))
    print("in-process", report["in_process"], flush=True)
    setting = {"max_batch": 32, "max_wait_ms": 0.0}
    rows = run_setting("sasrec-ml1m", model_dir, setting, [1, 32], args.requests, 1, "raw")
    report["server"] = [{**row, "concurrency": c} for row, c in zip(rows, [1, 32], strict=True)]
    if args.profile:
        report["profile"] = profile(model_dir, args.requests, args.profile_seconds)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
