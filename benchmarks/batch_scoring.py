"""Batch scoring (``attnrec batch``): every ML-1M user's top-100, and 1,000,000 users in flat memory.

    taskset -c 1 env OMP_NUM_THREADS=1 PYTHONPATH=src .venv/bin/python benchmarks/batch_scoring.py
    ... benchmarks/batch_scoring.py --quick            # smoke run (20k synthetic users, not saved)
    ... benchmarks/batch_scoring.py --model runs/x    # score with a saved SASRec trained on ML-1M

Writes ``benchmarks/results/batch_scoring.json`` and a generated ``batch_scoring.md``.

1. Models. Unless ``--model`` / ``--model-1m`` are given, two small SASRecs (:data:`MODEL`,
   :data:`MODEL_1M`) are trained on ML-1M (``../shared/data/ml-1m/ml-1m.txt.gz``) for
   :data:`EPOCHS` epochs in subprocesses and saved to a temporary directory. Scoring speed does not
   depend on how well they are trained.
2. ML-1M. A fresh process loads a model and the data and runs
   :func:`attnrec.recommend.batch_scoring.score_to_parquet` over all 6,040 users (top-100, seen items
   excluded, chunks of 4,096): the same work as
   ``attnrec batch --model DIR --data ml-1m.txt.gz --out recs.parquet -k 100``. Recorded: wall and
   CPU seconds, peak RSS (``getrusage``), output size; once with each model.
3. 1,000,000 synthetic users. Another process writes a Parquet input file of 1M rows (``user``
   ``s0000000``.., unknown to the model, and a ``history`` of 5..200 ML-1M item IDs drawn with
   Zipf popularity by a seeded generator) in row groups of 50,000, never holding more than one.
   A fresh process then scores it with ``MODEL_1M`` (``--users FILE``, top-100) and records its resident
   memory (``VmRSS``) after the model is loaded and after 10k, 100k, 250k, 500k and 1M users, and the
   peak. Every user is unknown to the model, so every row is scored from its history and carries a
   ``fallback`` note saying so.

Each measured process runs with ``MALLOC_MMAP_THRESHOLD_=131072`` (large blocks are given back to
the system when freed, so the resident set shows live memory, as in large_catalog.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from provenance import git_sha

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ML1M_CANDIDATES = [
    ROOT.parent / "shared" / "data" / "ml-1m" / "ml-1m.txt.gz",
    Path("/work/shared/data/ml-1m/ml-1m.txt.gz"),
]
MODEL = {"hidden": 64, "n_layers": 2, "n_heads": 1, "max_len": 50, "dropout": 0.2, "attn_dropout": 0.0}
# The 1M-user run measures memory; on the shared core a full-size model would take most of an hour,
# so it scores with a smaller SASRec (its ML-1M run is measured too, to relate the two).
MODEL_1M = MODEL | {"hidden": 32, "n_layers": 1}
TRAIN = {"batch_size": 128, "lr": 1e-3, "device": "cpu", "seed": 0, "threads": 1}
EPOCHS = {"model": 3, "model_1m": 1}
K, CHUNK = 100, 4096
CHECKPOINTS = (10_000, 100_000, 250_000, 500_000, 1_000_000)
ROW_GROUP = 50_000


def _status(field: str) -> int:
    """A ``/proc/self/status`` memory figure (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _mb(n: float) -> float:
    return round(n / 2**20, 1)


# -- workers (each in its own process) ---------------------------------------------------------------
def train_worker(data: str, out_dir: str, which: str) -> dict[str, Any]:
    from attnrec.data.datasets import load_dataset
    from attnrec.recommend import Recommender

    interactions = load_dataset(data)
    rec = Recommender(
        "sasrec", MODEL if which == "model" else MODEL_1M, TRAIN | {"max_epochs": EPOCHS[which]}
    )
    t = time.perf_counter()
    rec.fit(interactions, progress=False)
    rec.save(out_dir)
    tr = rec.train_result_
    assert tr is not None
    return {"seconds": time.perf_counter() - t, "epochs": tr.epochs, "valid_ndcg10": tr.best_value}


def synth_worker(path: str, n_users: int, data: str) -> dict[str, Any]:
    """Write ``n_users`` rows of (user, history of ML-1M item IDs) to ``path``, one row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from attnrec.data.datasets import load_dataset

    log = load_dataset(data)
    items = np.array(log.items.to_list(), dtype=object)
    order = np.argsort(-log.item_popularity()[1:], kind="stable")  # most popular first
    cdf = np.cumsum(1.0 / np.arange(1, len(items) + 1) ** 1.0)
    rng = np.random.default_rng(0)
    t, total = time.perf_counter(), 0
    schema = pa.schema([("user", pa.string()), ("history", pa.list_(pa.string()))])
    with pq.ParquetWriter(path, schema) as writer:
        for lo in range(0, n_users, ROW_GROUP):
            n = min(ROW_GROUP, n_users - lo)
            lengths = rng.integers(5, 201, n)
            total += int(lengths.sum())
            ranks = np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum())) * cdf[-1]), len(items) - 1)
            flat = items[order[ranks]]
            offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(lengths, out=offsets[1:])
            users = pa.array([f"s{u:07d}" for u in range(lo, lo + n)])
            hist = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat.tolist(), pa.string()))
            writer.write_table(pa.Table.from_arrays([users, hist], schema=schema))
    return {
        "seconds": time.perf_counter() - t,
        "bytes": os.path.getsize(path),
        "users": n_users,
        "mean_history": total / n_users,
        "peak_rss_mb": _mb(_status("VmHWM")),
    }


def score_worker(model_dir: str, source: str, out: str, kind: str) -> dict[str, Any]:
    import torch

    from attnrec.data.datasets import load_dataset
    from attnrec.recommend import Recommender
    from attnrec.recommend.batch_scoring import ChunkDone, score_to_parquet

    torch.set_num_threads(1)
    rss_start = _status("VmRSS")
    rec = Recommender.load(model_dir, device="cpu")
    src: Any = load_dataset(source) if kind == "dataset" else Path(source)
    rss_loaded = _status("VmRSS")
    marks: list[dict[str, Any]] = []
    todo = list(CHECKPOINTS)
    t0, c0 = time.perf_counter(), time.process_time()

    def progress(chunk: ChunkDone) -> None:
        while todo and chunk.users_done >= todo[0]:
            todo.pop(0)
            marks.append(
                {
                    "users": chunk.users_done,
                    "rss_mb": _mb(_status("VmRSS")),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )

    res = score_to_parquet(rec, src, out, k=K, chunk_users=CHUNK, progress=progress, model_label="benchmark")
    cpu = time.process_time() - c0
    return {
        "kind": kind,
        "users": res.users,
        "fallbacks": res.fallbacks,
        "chunks": res.chunks,
        "seconds": res.seconds,
        "cpu_seconds": cpu,
        "users_per_second": res.users / res.seconds,
        "rss_start_mb": _mb(rss_start),
        "rss_loaded_mb": _mb(rss_loaded),
        "rss_marks": marks,
        "peak_rss_mb": _mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024),
        "output_mb": _mb(os.path.getsize(out)),
    }


WORKERS: dict[str, Callable[..., dict[str, Any]]] = {
    "--train": train_worker,
    "--synth": synth_worker,
    "--score": score_worker,
}


def _run(flag: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run([sys.executable, __file__, flag, *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{flag} worker failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- report ----------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    import platform

    import torch

    cpu = platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def _model_line(name: str, m: dict[str, Any]) -> str:
    settings = ", ".join(f"{k}={v}" for k, v in m["settings"].items())
    tr = m.get("training")
    how = (
        f"trained {tr['epochs']} epoch(s) on ML-1M in {tr['seconds'] / 60:.1f} min (validation NDCG@10 "
        f"{tr['valid_ndcg10']:.4f})"
        if tr
        else f"loaded from {m['dir']}"
    )
    return f"- `{name}`: SASRec ({settings}); {how}."


def markdown(res: dict[str, Any]) -> str:
    m, syn = res["machine"], res["runs"][-1]
    lines = [
        "# Batch scoring to Parquet (`attnrec batch`)",
        "",
        "Generated by `benchmarks/batch_scoring.py` from `batch_scoring.json`; do not edit.",
        "",
        f"Machine: {m['cpu']}, pinned to core(s) {m['affinity']} of {m['cores']}, {m['threads']} torch "
        f"thread, torch {m['torch']}; load average {m['load_average_at_start'][0]:.1f} at the start and "
        f"{res['load_average_at_end'][0]:.1f} at the end ({res['other_load']}). Commit "
        f"{res['git_sha'][:10]}; total {res['seconds'] / 60:.1f} min.",
        "",
        f"Top-{res['k']}, seen items excluded, chunks of {res['chunk_users']:,} users, one row per user "
        "(`--layout wide`). Wall seconds include waiting for the shared core; CPU seconds (this process) "
        "do not, and are the comparable figure. Models:",
        "",
    ]
    lines += [_model_line(name, model) for name, model in res["models"].items()]
    lines += [
        "",
        "| run | model | users | wall s | CPU s | users per CPU s | peak RSS MB | RSS after loading MB | "
        "output MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["runs"]:
        lines.append(
            f"| {r['name']} | `{r['model']}` | {r['users']:,} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} "
            f"| {r['users'] / r['cpu_seconds']:,.0f} | {r['peak_rss_mb']:,.0f} | {r['rss_loaded_mb']:,.0f} | "
            f"{r['output_mb']:,.0f} |"
        )
    inp = res["synth_input"]
    lines += [
        "",
        f"## Resident memory while scoring {syn['users']:,} users",
        "",
        f"Input: {inp['bytes'] / 2**20:,.0f} MB of Parquet ({inp['users']:,} rows, histories of 5-200 ML-1M "
        f"items, mean {inp['mean_history']:.1f}, Zipf popularity), written in row groups of {ROW_GROUP:,}; "
        "the users are unknown to the model, so each is scored from its history (and gets a `fallback` "
        "note).",
        "",
        "| users done | RSS MB | wall s |",
        "|---|---|---|",
        f"| 0 (model loaded) | {syn['rss_loaded_mb']:,.0f} | 0 |",
    ]
    lines += [f"| {r['users']:,} | {r['rss_mb']:,.0f} | {r['seconds']:.0f} |" for r in syn["rss_marks"]]
    lines += ["", f"Peak RSS of the run: {syn['peak_rss_mb']:,.0f} MB; output {syn['output_mb']:,.0f} MB."]
    return "\n".join(lines) + "\n"


def _model(tmp: str, data: str, which: str, given: str | None) -> tuple[str, dict[str, Any]]:
    """``(directory, record)`` of the model ``which``: trained in a subprocess unless ``given``."""
    settings = MODEL if which == "model" else MODEL_1M
    if given:
        config = json.loads((Path(given) / "config.json").read_text())
        return given, {"settings": config["model_config"], "dir": given}
    model_dir = str(Path(tmp) / which)
    print(f"training {which} ({EPOCHS[which]} epoch(s)) on {data} ...", flush=True)
    return model_dir, {"settings": settings, "training": _run("--train", data, model_dir, which)}


def _score(name: str, which: str, model_dir: str, source: str, out: str, kind: str) -> dict[str, Any]:
    print(f"scoring: {name} ...", flush=True)
    r = {"name": name, "model": which} | _run("--score", model_dir, source, out, kind)
    print(
        f"  {r['users']:,} users in {r['seconds']:.1f} s ({r['cpu_seconds']:.1f} CPU s), peak RSS "
        f"{r['peak_rss_mb']:.0f} MB, RSS marks {[m['rss_mb'] for m in r['rss_marks']]}",
        flush=True,
    )
    return r


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in WORKERS:
        args: list[Any] = list(argv[1:])
        if argv[0] == "--synth":
            args[1] = int(args[1])
        print(json.dumps(WORKERS[argv[0]](*args)))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="20k synthetic users; printed, not saved")
    p.add_argument("--model", help="a saved SASRec trained on ML-1M for the ML-1M run (default: train one)")
    p.add_argument(
        "--model-1m", help="a saved SASRec trained on ML-1M for the synthetic run (default: train one)"
    )
    p.add_argument("--data", help="ML-1M file (default ../shared/data/ml-1m/ml-1m.txt.gz)")
    p.add_argument("--users", type=int, default=1_000_000, help="synthetic users")
    p.add_argument("--other-load", default="other jobs were running", help="what else ran (recorded)")
    a = p.parse_args(argv)
    data = a.data or next((str(c) for c in ML1M_CANDIDATES if c.exists()), None)
    if data is None:
        raise SystemExit("ML-1M not found; pass --data PATH")
    n_users = 20_000 if a.quick else a.users
    t0 = time.perf_counter()
    res: dict[str, Any] = {
        "machine": machine(),
        "git_sha": git_sha(),
        "train": TRAIN,
        "k": K,
        "chunk_users": CHUNK,
        "other_load": a.other_load,
        "data": Path(data).name,
        "models": {},
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="attnrec-batch-") as tmp:
        big, res["models"]["model"] = _model(tmp, data, "model", a.model)
        small, res["models"]["model_1m"] = _model(tmp, data, "model_1m", a.model_1m)
        res["runs"].append(
            _score("ML-1M, all users (`--data`)", "model", big, data, f"{tmp}/a.parquet", "dataset")
        )
        res["runs"].append(
            _score("ML-1M, all users (`--data`)", "model_1m", small, data, f"{tmp}/b.parquet", "dataset")
        )
        users_file = f"{tmp}/users.parquet"
        print(f"writing {n_users:,} synthetic users ...", flush=True)
        res["synth_input"] = _run("--synth", users_file, str(n_users), data)
        res["runs"].append(
            _score(
                "synthetic, Parquet input (`--users`)",
                "model_1m",
                small,
                users_file,
                f"{tmp}/c.parquet",
                "file",
            )
        )
    res["seconds"] = time.perf_counter() - t0
    res["load_average_at_end"] = os.getloadavg()
    if a.quick:
        print(markdown(res))
        return
    (RESULTS / "batch_scoring.json").write_text(json.dumps(res, indent=2) + "\n")
    (RESULTS / "batch_scoring.md").write_text(markdown(res))
    print(f"wrote {RESULTS / 'batch_scoring.json'} and batch_scoring.md in {res['seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
