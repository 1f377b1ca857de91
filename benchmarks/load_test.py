"""HTTP load test of `attnrec serve`: a server process on loopback, driven by a client process.

    nice -n 10 .venv/bin/python benchmarks/load_test.py            # everything (several minutes)
    .venv/bin/python benchmarks/load_test.py --quick                 # a smoke run
    .venv/bin/python benchmarks/load_test.py --study explain --models sasrec-ml1m \
        --explain-method greedy,occlusion --out benchmarks/results/load_test_explain

For every model and server setting the script starts ``python -m attnrec serve`` on a free
loopback port, waits for ``/readyz``, and runs a separate client process (asyncio + an httpx
connection pool) that sends a fixed number of ``POST /v1/recommend`` requests at concurrency 1, 8
and 32. It records client-side latency percentiles, requests/s, errors, the server's resident
memory and the CPU seconds the server and the client used, and writes
``benchmarks/results/load_test.json`` and a generated ``load_test.md``.

Models (checkpoints cached under ``runs/load-test/``):
* SASRec and BERT4Rec (when registered) trained briefly on ML-1M (3,416 items; a time budget of
  ``--train-seconds``, so the quality is not the papers' - this measures serving speed);
* SASRec (and, with ``--models bert4rec-1m``, BERT4Rec) with random weights over a synthetic
  1,000,000-item catalog.
Requests mix known users (stored history) and ad-hoc histories with an unknown item in them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from load_harness import (  # benchmarks/load_harness.py, beside this script
    Server,
    client_main,
    environment,
    proc_status,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CACHE = ROOT / "runs" / "load-test"
ML1M = Path(os.environ.get("ATTNREC_ML1M", "/work/shared/data/ml-1m/ml-1m.txt.gz"))


# -- models ----------------------------------------------------------------------------------------
def train_ml1m(model: str, seconds: float) -> Path:
    out = CACHE / f"{model}-ml1m"
    if (out / "config.json").exists():
        return out
    import torch

    from attnrec.data.readers.lines import read_pairs
    from attnrec.data.split import leave_one_out
    from attnrec.evaluation.protocol import FULL
    from attnrec.recommend import Recommender

    torch.set_num_threads(2)
    data = read_pairs(ML1M, name="ml-1m")
    split = leave_one_out(data)
    cfg = {
        "sasrec": {"hidden": 50, "max_len": 200, "dropout": 0.2},
        "bert4rec": {"hidden": 64, "max_len": 200},
    }[model]
    rec = Recommender(
        model,
        cfg,
        {
            "max_epochs": 200,
            "time_budget": seconds,
            "eval_every": 5,
            "device": "cpu",
            "lr": 1e-3,
            "batch_size": 128,
        },
    )
    rec.fit(data, split, progress=False)
    rec.evaluate(split.test, FULL)
    return rec.save(out)


def synthetic_1m(
    arch: str = "sasrec", n_items: int = 1_000_000, n_users: int = 10_000, hidden: int = 64
) -> Path:
    """``arch`` with random weights over an ``n_items`` catalog (latency only; the scores mean nothing)."""
    out = CACHE / f"{arch}-synthetic-{n_items}"
    if (out / "config.json").exists():
        return out
    import torch

    from attnrec.data.schema import DataSource, IdMap, Sequences
    from attnrec.recommend import Recommender

    rng = np.random.default_rng(0)
    rec = Recommender(arch, {"hidden": hidden, "max_len": 50, "n_heads": 2})
    lengths = rng.integers(5, 60, n_users)
    offsets = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # Zipf-like item draws so that popularity has a long tail.
    items = np.minimum(rng.zipf(1.2, int(offsets[-1])), n_items).astype(np.int64)
    rec.users_ = IdMap(np.array([str(u) for u in range(n_users)], dtype=object), 0)
    rec.items_ = IdMap(np.array([str(i) for i in range(1, n_items + 1)], dtype=object), 1)
    rec.histories_ = Sequences(offsets, items, n_items)
    rec.popularity_ = np.bincount(items, minlength=n_items + 1).astype(np.int64)
    rec.source_ = DataSource(f"synthetic-{n_items}-items", format="random weights")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        rec.core = rec.spec.cls(rec.config, n_users, n_items).eval()
    return rec.save(out)


def payloads(model_dir: Path, n: int, seed: int = 0, explain: str | None = None) -> list[dict[str, Any]]:
    """Half known users, half ad-hoc histories (10-50 items, one unknown item), k=10; with ``explain``, every
    request asks for per-item explanations by that method (top 3 history items each)."""
    maps = json.loads((model_dir / "id_maps.json").read_text())
    users, items = maps["users"], maps["items"]
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for j in range(n):
        if j % 2 == 0:
            out.append({"user": rng.choice(users), "k": 10})
        else:
            hist = [rng.choice(items) for _ in range(rng.randint(10, 50))] + ["not-an-item"]
            out.append({"history": hist, "k": 10})
    if explain is not None:
        out = [{**body, "explain": {"method": explain, "top": 3}} for body in out]
    return out


# -- the client (its own process) ------------------------------------------------------------------
def run_client(url: str, bodies_file: Path, concurrency: int, warmup: int, client: str) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "_client",
        "--url",
        url,
        "--bodies",
        str(bodies_file),
        "--concurrency",
        str(concurrency),
        "--warmup",
        str(warmup),
        "--client",
        client,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- the study -------------------------------------------------------------------------------------
def run_setting(
    name: str,
    model_dir: Path,
    setting: dict[str, Any],
    levels: list[int],
    n_requests: int,
    threads: int,
    client: str,
) -> list[dict[str, Any]]:
    explain = setting.get("explain")  # a request option, not a server flag
    extra = [
        (f"--{k.replace('_', '-')}" if v else f"--no-{k.replace('_', '-')}")
        if isinstance(v, bool)
        else f"--{k.replace('_', '-')}={v}"
        for k, v in setting.items()
        if k != "explain"
    ]
    server = Server(name, model_dir, threads, extra)
    rows = []
    try:
        ready_s = server.wait_ready()
        idle = proc_status(server.proc.pid)
        for c in levels:
            bodies_file = CACHE / f"bodies-{name}-{c}.json"
            bodies_file.write_text(json.dumps(payloads(model_dir, n_requests, seed=c, explain=explain)))
            before = proc_status(server.proc.pid)
            load_before = os.getloadavg()[0]
            res = run_client(server.url, bodies_file, c, min(50, n_requests // 10), client)
            after = proc_status(server.proc.pid)
            res.update(
                {
                    "model": name,
                    "setting": setting,
                    "threads": threads,
                    "ready_s": ready_s,
                    "server_rss_mib": after["VmRSS"],
                    "server_peak_rss_mib": after["VmHWM"],
                    "server_idle_rss_mib": idle["VmRSS"],
                    "server_cpu_s": after["cpu_s"] - before["cpu_s"],
                    "loadavg_1min": max(load_before, os.getloadavg()[0]),
                }
            )
            res["server_cpu_ms_per_request"] = (
                1000 * res["server_cpu_s"] / (n_requests + min(50, n_requests // 10))
            )
            print(
                f"{name:22s} {json.dumps(setting):44s} c={c:<3d} p50 {res['p50_ms']:7.2f} p95 "
                f"{res['p95_ms']:7.2f} p99 {res['p99_ms']:7.2f} ms  {res['rps']:7.1f} req/s  errors "
                f"{res['errors']}  rss {res['server_rss_mib']:.0f} MiB  server cpu "
                f"{res['server_cpu_ms_per_request']:.2f} ms/req  client cpu "
                f"{res['client_cpu_ms_per_request']:.2f} ms/req  load {res['loadavg_1min']:.1f}",
                flush=True,
            )
            rows.append(res)
    finally:
        server.stop()
    return rows


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        "# attnrec serving load test",
        "",
        f"Generated by `benchmarks/load_test.py` on {env['date']} ({env['cpus']} CPU cores, "
        f"{env['platform']}, python {env['python']}, torch {env['torch']}). Load average at start: "
        f"{env['loadavg']}.",
        f"Each row: {report['n_requests']} `POST /v1/recommend` requests (k=10; half known users, half "
        "ad-hoc histories of 10-50 items with one unknown item"
        + (
            "; `explain=...` rows ask every request for per-item explanations of its first 10 items, top 3 "
            "history items each"
            if any(r["setting"].get("explain") for r in report["rows"])
            else ""
        )
        + ") from a separate client process over loopback "
        f"({report['client']} client: one keep-alive connection per concurrent request), after a short "
        "warm-up. Latency is measured by the client. `load avg` is the machine's 1-minute load average "
        "during the row (other jobs on the same 2 cores inflate latency; server CPU ms/req is the "
        "contention-robust cost).",
        "",
        "| model | catalog | backend | batching | conc. | p50 ms | p95 ms | p99 ms | req/s | errors | "
        "server RSS MiB | server CPU ms/req | client CPU ms/req | load avg |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        s = r["setting"]
        batching = (
            "off"
            if s.get("max_batch", 32) == 1
            else f"≤{s.get('max_batch', 32)}, wait {s.get('max_wait_ms', 0)} ms"
        )
        if s.get("inline"):
            batching += ", inline"
        if s.get("gc_freeze") is False:
            batching += ", heap not frozen"
        if s.get("explain"):
            batching = f"explain={s['explain']} (not batched)"
        lines.append(
            f"| {r['model']} | {r['n_items']:,} | {s.get('backend', 'torch')} | {batching} | "
            f"{r['concurrency']} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['p99_ms']:.1f} | "
            f"{r['rps']:.0f} | {r['errors']} | {r['server_rss_mib']:.0f} | "
            f"{r['server_cpu_ms_per_request']:.2f} | {r['client_cpu_ms_per_request']:.2f} | "
            f"{r['loadavg_1min']:.1f} |"
        )
    lines += ["", "Models:", ""]
    for name, m in report["models"].items():
        lines.append(f"- **{name}**: {m['description']}")
    if report.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=1000, help="requests per concurrency level")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in the server")
    ap.add_argument("--train-seconds", type=float, default=120)
    ap.add_argument("--models", default="sasrec-ml1m,bert4rec-ml1m,sasrec-1m")
    ap.add_argument(
        "--max-batch", type=int, default=32, help="the servers' micro-batch size (--max-batch of serve)"
    )
    ap.add_argument(
        "--study",
        default="full",
        choices=["full", "batching", "default", "inline", "gc", "explain"],
        help="full: batching and backend comparison on SASRec ML-1M plus every model with the default; "
        "gc: every model with the default (heap frozen after loading) and with --no-gc-freeze; "
        "explain: every model with the default, then with per-item explanations in every request",
    )
    ap.add_argument(
        "--explain-method",
        default="greedy",
        help="the explain study's method(s), comma-separated: a row each (e.g. greedy,occlusion)",
    )
    ap.add_argument("--quick", action="store_true", help="200 requests, SASRec ML-1M only")
    ap.add_argument(
        "--client",
        default="raw",
        choices=["raw", "httpx"],
        help="load generator: hand-written keep-alive HTTP/1.1 (light) or an httpx pool",
    )
    ap.add_argument("--render", action="store_true", help="only regenerate OUT.md from OUT.json")
    ap.add_argument("--prepare-only", action="store_true", help="train/build the checkpoints and stop")
    ap.add_argument("--out", default=str(RESULTS / "load_test"))
    args = ap.parse_args()
    if args.quick:
        args.requests, args.models, args.study = 200, "sasrec-ml1m", "default"
    if args.render:
        report = json.loads(Path(args.out + ".json").read_text())
        Path(args.out + ".md").write_text(markdown(report))
        return
    CACHE.mkdir(parents=True, exist_ok=True)

    from attnrec.models.registry import list_models

    levels = [int(x) for x in args.levels.split(",")]
    wanted = args.models.split(",")
    models: dict[str, Path] = {}
    descriptions: dict[str, str] = {}
    for name in wanted:
        if name.endswith("-ml1m"):
            arch = name.removesuffix("-ml1m")
            if arch not in list_models():
                print(f"skipping {name}: {arch} is not registered in this install", flush=True)
                continue
            t0 = time.time()
            models[name] = train_ml1m(arch, args.train_seconds)
            print(f"{name}: checkpoint {models[name]} ({time.time() - t0:.0f}s)", flush=True)
        elif name.endswith("-1m"):
            models[name] = synthetic_1m(name.removesuffix("-1m"))
        meta = json.loads((models[name] / "config.json").read_text())
        tr = meta.get("train_result") or {}
        ev = (meta.get("evaluations") or [{}])[-1].get("metrics", {})
        descriptions[name] = (
            f"{meta['model']} {json.dumps(meta['model_config'])}, {meta['n_items']:,} items, "
            f"{meta['n_users']:,} users; "
            + (
                f"trained {tr.get('epochs')} epoch(s) in {tr.get('seconds', 0):.0f}s (time budget "
                f"{meta['train_config'].get('time_budget', 0):.0f}s, checked after each epoch), test NDCG@10 "
                f"{ev.get('NDCG@10', float('nan')):.4f} (full ranking)"
                if tr
                else "random weights (latency only)"
            )
        )

    if args.prepare_only:
        return
    default = {"max_batch": args.max_batch, "max_wait_ms": 0.0}
    plan: list[tuple[str, dict[str, Any]]] = []
    if args.study in ("full", "batching") and "sasrec-ml1m" in models:
        plan += [("sasrec-ml1m", {"max_batch": 1}), ("sasrec-ml1m", {"max_batch": 32, "max_wait_ms": 2.0})]
        if args.study == "full":
            plan += [
                ("sasrec-ml1m", {**default, "backend": "onnx"}),
                ("sasrec-ml1m", {**default, "inline": True}),
            ]
    plan += [(name, default) for name in models]
    if args.study == "gc":  # the tail-latency fix: the same servers without gc.freeze() after loading
        plan += [(name, {**default, "gc_freeze": False}) for name in models]
    if args.study == "explain":  # the cost of `explain` on /v1/recommend, against the same server without it
        plan += [(name, {**default, "explain": m}) for m in args.explain_method.split(",") for name in models]
    if args.study in ("full", "batching") and "sasrec-1m" in models:
        plan += [("sasrec-1m", {"max_batch": 1})]
    rows: list[dict[str, Any]] = []
    loadavg = " ".join(f"{x:.1f}" for x in os.getloadavg())
    report = {
        "environment": environment() | {"loadavg": loadavg, "server_threads": args.threads},
        "n_requests": args.requests,
        "levels": levels,
        "models": {n: {"path": str(p), "description": descriptions[n]} for n, p in models.items()},
        "rows": rows,
        "notes": [],
        "client": args.client,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name, setting in plan:
        meta = json.loads((models[name] / "config.json").read_text())
        for r in run_setting(name, models[name], setting, levels, args.requests, args.threads, args.client):
            r["n_items"] = meta["n_items"]
            rows.append(r)
        # Written after every setting, so an interrupted run keeps what it measured.
        Path(str(out) + ".json").write_text(json.dumps(report, indent=2))
        Path(str(out) + ".md").write_text(markdown(report))
    print(f"wrote {out}.json and {out}.md")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_client":
        ap = argparse.ArgumentParser()
        ap.add_argument("_client")
        ap.add_argument("--url", required=True)
        ap.add_argument("--bodies", required=True)
        ap.add_argument("--concurrency", type=int, default=1)
        ap.add_argument("--warmup", type=int, default=50)
        ap.add_argument("--client", default="raw", choices=["raw", "httpx"])
        client_main(ap.parse_args())
    else:
        main()
