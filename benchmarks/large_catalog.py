"""Large catalogs: SASRec training steps at 10k-1M items (sampled vs full softmax) and exact vs approximate
top-K.

    nice -n 10 .venv/bin/python benchmarks/large_catalog.py     # a few minutes; writes the results
    .venv/bin/python benchmarks/large_catalog.py --quick          # smoke run (small catalogs, not saved)

Writes ``benchmarks/results/large_catalog.json`` and a generated ``large_catalog.md``.

Part 1, training steps. Each (catalog size, loss) runs in a fresh subprocess, so the memory it
reports is its own; glibc is told to serve large blocks with mmap (``MALLOC_MMAP_THRESHOLD_``) so
freed memory leaves the resident set and the peak is the live peak. The worker builds batches of
``--batch`` synthetic sequences (Zipf item popularity, lengths 20-50, window 50) and runs the
training loop's step (loss, backward, Adam) on SASRec (d=64, 2 blocks). After one warm-up step
(which allocates Adam's moments) it records the resident memory ("persistent": weights, Adam
state, data), resets the kernel's peak counter (``/proc/self/clear_refs``) and times the measured
steps; "step peak" is the peak over them minus the persistent memory, i.e. what a step adds.
Losses: ``sampled_ce`` (1,024 popularity-sampled catalog negatives + 256 in-batch negatives,
log-Q corrected), the same with ``sparse_embedding`` (row-wise gradients of the item table and
lazy Adam, SparseAdam) and ``ce`` (full softmax, computed in chunks of at most 8M logits).

Part 2, retrieval over 1,000,000 items. A SASRec trained for one epoch with ``sampled_ce`` on a
synthetic log (``sparse_embedding``) is wrapped in a Recommender; exact top-10 is
``Recommender.recommend_many`` (the whole catalog scored in chunks), approximate top-10 is
``ApproximateRecommender`` (faiss IndexIVFFlat and the torch IVF, ~1,000 lists) at several ``nprobe``;
recall@10 is measured against the exact answers. The same indexes are also measured on clustered synthetic
vectors (1,000 Gaussian clusters), the structure trained embeddings have and a one-epoch model on random data
does not.
"""

from __future__ import annotations

import argparse
import gc
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
# Keyword arguments of SASRecConfig (and the model settings of Recommender): values of mixed types.
MODEL: dict[str, Any] = {"hidden": 64, "n_layers": 2, "n_heads": 1, "max_len": 50, "dropout": 0.2}
SAMPLED: dict[str, Any] = {
    "loss": "sampled_ce",
    "sampler": "popularity",
    "n_negatives": 1024,
    "in_batch_negatives": 256,
}
FULL_CE: dict[str, Any] = {"loss": "ce"}
LOSSES: dict[str, dict[str, Any]] = {
    "sampled_ce": SAMPLED,
    "sampled_ce+sparse": SAMPLED | {"sparse_embedding": True},
    "ce": FULL_CE,
}


def synthetic_sequences(n_users: int, n_items: int, seed: int = 0, max_len: int = 50) -> Any:
    """Per-user sequences of 20..max_len items with Zipf(1.05) popularity over a shuffled catalog."""
    from attnrec.data.schema import Sequences

    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, max_len + 1, n_users)
    cdf = np.cumsum(1.0 / np.arange(1, n_items + 1) ** 1.05)
    ranks = np.searchsorted(cdf, rng.random(int(lengths.sum())) * cdf[-1])
    items = rng.permutation(n_items)[ranks] + 1  # popular items spread over the index range
    offsets = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Sequences(offsets, items.astype(np.int64), n_items)


# -- part 1: one training configuration in its own process -----------------------------------------
def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def step_worker(n_items: int, loss: str, steps: int, batch: int, threads: int) -> dict[str, Any]:
    import torch

    from attnrec.models.sasrec import SASRec, SASRecConfig
    from attnrec.training.optim import make_optimizer
    from attnrec.training.train_config import TrainConfig

    torch.set_num_threads(threads)
    rss_start = _rss()
    train = synthetic_sequences(batch * (steps + 1), n_items)
    torch.manual_seed(0)
    model = SASRec(SASRecConfig(**(MODEL | LOSSES[loss])), 1, n_items)
    opt = make_optimizer(model, TrainConfig(lr=1e-3))
    t = time.perf_counter()
    batches = list(model.train_batches(train, batch, np.random.default_rng(0)))
    build = (time.perf_counter() - t) / len(batches)
    model.train()

    def step(b: dict[str, Any]) -> float:
        value = model.loss(b)
        opt.zero_grad(set_to_none=True)
        value.backward()  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        opt.step()
        return float(value.item())

    t = time.perf_counter()
    step(batches[0])  # warm-up: allocates Adam's moments
    warm = time.perf_counter() - t
    opt.zero_grad(set_to_none=True)
    gc.collect()
    rss_persist = _rss()
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS counter to the current RSS
    t, c = time.perf_counter(), time.process_time()
    losses = [step(b) for b in batches[1 : steps + 1]]
    seconds, cpu = (time.perf_counter() - t) / steps, (time.process_time() - c) / steps
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    real = int(sum(int((b["target"] > 0).sum()) for b in batches[1 : steps + 1]) / steps)
    return {
        "n_items": n_items,
        "loss": loss,
        "batch": batch,
        "positions_per_step": real,
        "steps": steps,
        "seconds_per_step": seconds,
        "cpu_seconds_per_step": cpu,
        "warmup_seconds": warm,
        "batch_build_seconds": build,
        "param_mb": params / 2**20,
        "rss_start_mb": rss_start / 2**20,
        "persistent_mb": rss_persist / 2**20,
        "step_peak_mb": (_hwm() - rss_persist) / 2**20,
        "embedding_grad_mb": 0.0
        if model.config.sparse_embedding
        else (n_items + 1) * MODEL["hidden"] * 4 / 2**20,
        "final_loss": losses[-1],
        "threads": threads,
    }


def run_step(n_items: int, loss: str, steps: int, batch: int, threads: int) -> dict[str, Any]:
    env = dict(
        os.environ,
        MALLOC_MMAP_THRESHOLD_="131072",
        OMP_NUM_THREADS=str(threads),
        PYTHONPATH=str(ROOT / "src"),
    )
    cmd = [
        sys.executable,
        __file__,
        "--step-worker",
        str(n_items),
        loss,
        str(steps),
        str(batch),
        str(threads),
    ]
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    res: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])  # the worker's JSON record
    res["process_seconds"] = time.perf_counter() - t
    print(
        f"  {loss:10s} {n_items:>9,} items: {res['seconds_per_step']:.3f} s/step "
        f"(CPU {res['cpu_seconds_per_step']:.3f} s), step peak "
        f"{res['step_peak_mb']:.0f} MB, persistent {res['persistent_mb']:.0f} MB",
        flush=True,
    )
    return res


# -- part 2: exact vs approximate top-K ------------------------------------------------------------
CPU: dict[str, float] = {}  # CPU seconds of the last _timed call (best repeat)


def _timed(fn: Any, repeat: int = 1) -> tuple[Any, float]:
    """``(result, best wall seconds)``; the CPU seconds of that repeat are left in ``CPU["last"]``."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        if time.perf_counter() - t < best:
            best, CPU["last"] = time.perf_counter() - t, time.process_time() - c
    return out, best


def retrieval(
    n_items: int, n_users: int, n_requests: int, nprobes: list[int], threads: int
) -> dict[str, Any]:
    import torch

    from attnrec import Recommender
    from attnrec.data.schema import DataSource, IdMap, Interactions
    from attnrec.data.split import EvalSet, Split, leave_one_out
    from attnrec.recommend import topk_chunked
    from attnrec.serving.ann import ApproximateRecommender, build_index, faiss_available, recall_at_k

    torch.set_num_threads(threads)
    seqs = synthetic_sequences(n_users, n_items, seed=1)
    ext = np.arange(1, n_items + 1).astype(str).astype(object)
    data = Interactions(
        user=np.repeat(np.arange(n_users), seqs.lengths()),
        item=seqs.items,
        users=IdMap(np.arange(n_users).astype(str).astype(object), 0),
        items=IdMap(ext, 1),
        source=DataSource(f"synthetic-{n_items}-items"),
    )
    split = leave_one_out(data)

    def first(e: EvalSet, n: int) -> EvalSet:
        return EvalSet(e.users[:n], e.histories.take(np.arange(n)), e.targets[:n])

    small = Split(split.name, split.train, first(split.valid, 64), first(split.test, n_requests), {})
    rec = Recommender(
        "sasrec",
        MODEL | LOSSES["sampled_ce+sparse"],
        {"max_epochs": 1, "batch_size": 64, "threads": threads, "device": "cpu"},
    )
    t = time.perf_counter()
    rec.fit(data, small, progress=False)
    fit_seconds = time.perf_counter() - t
    assert rec.users_ is not None  # set by fit
    users = rec.users_.to_external(small.test.users)
    requests = [{"user": u, "k": 10} for u in users]
    singles = requests[:32]
    exact, t_batch = _timed(lambda: rec.recommend_many(requests), 2)
    c_batch = CPU["last"]
    _, t_single = _timed(lambda: [rec.recommend_many([r]) for r in singles])
    out: dict[str, Any] = {
        "n_items": n_items,
        "train_users": n_users,
        "requests": n_requests,
        "fit_seconds": fit_seconds,
        "exact": {
            "batch_ms_per_request": 1e3 * t_batch / len(requests),
            "single_ms": 1e3 * t_single / len(singles),
            "batch_cpu_ms_per_request": 1e3 * c_batch / len(requests),
            "single_cpu_ms": 1e3 * CPU["last"] / len(singles),
        },
        "model_ann": [],
        "clustered": [],
    }
    print(
        f"  exact: {out['exact']['batch_ms_per_request']:.2f} ms/request in a batch of {len(requests)}, "
        f"{out['exact']['single_ms']:.1f} ms alone",
        flush=True,
    )
    kinds = ["faiss", "torch"] if faiss_available() else ["torch"]
    for kind in kinds:
        ann, t_build = _timed(lambda kind=kind: ApproximateRecommender(rec, kind=kind, threads=threads))
        for nprobe in nprobes:
            approx, ta = _timed(lambda nprobe=nprobe, ann=ann: ann.recommend_many(requests, nprobe=nprobe), 2)
            ca = CPU["last"]
            _, ts = _timed(
                lambda nprobe=nprobe, ann=ann: [ann.recommend_many([r], nprobe=nprobe) for r in singles]
            )
            row = {
                "index": ann.index.kind,
                "nlist": ann.index.nlist,
                "nprobe": nprobe,
                "build_seconds": t_build,
                "batch_ms_per_request": 1e3 * ta / len(requests),
                "single_ms": 1e3 * ts / len(singles),
                "batch_cpu_ms_per_request": 1e3 * ca / len(requests),
                "single_cpu_ms": 1e3 * CPU["last"] / len(singles),
                "recall@10": recall_at_k([a.items for a in approx], [e.items for e in exact]),
            }
            out["model_ann"].append(row)
            print(
                f"  {row['index']} nprobe {nprobe}: recall@10 {row['recall@10']:.3f}, "
                f"{row['batch_ms_per_request']:.2f} ms/request batched, {row['single_ms']:.1f} ms alone",
                flush=True,
            )
        del ann
        gc.collect()

    # The same indexes on vectors with cluster structure: 1,000 Gaussian centres (unit scale), items
    # and queries at a centre plus noise of scale `noise` (1.0: clustered; 1.5: weakly clustered).
    d = MODEL["hidden"]
    for noise in (1.0, 1.5):
        g = torch.Generator().manual_seed(0)
        centres = torch.randn(1000, d, generator=g)
        vectors = centres[torch.randint(0, 1000, (n_items,), generator=g)] + noise * torch.randn(
            n_items, d, generator=g
        )
        queries = centres[torch.randint(0, 1000, (n_requests,), generator=g)] + noise * torch.randn(
            n_requests, d, generator=g
        )

        def exact_topk(queries: torch.Tensor = queries, vectors: torch.Tensor = vectors) -> torch.Tensor:
            return (
                topk_chunked(
                    lambda lo, hi: queries @ vectors[lo - 1 : hi - 1].T,
                    n_requests,
                    n_items + 1,
                    10,
                    torch.zeros(0, dtype=torch.long),
                    torch.zeros(0, dtype=torch.long),
                )[1]
                - 1
            )

        truth, t_exact = _timed(exact_topk, 2)
        out["clustered"].append(
            {
                "noise": noise,
                "index": "exact",
                "nlist": None,
                "nprobe": None,
                "build_seconds": 0.0,
                "batch_ms_per_request": 1e3 * t_exact / n_requests,
                "batch_cpu_ms_per_request": 1e3 * CPU["last"] / n_requests,
                "recall@10": 1.0,
            }
        )
        for kind in kinds:
            index, t_build = _timed(
                lambda kind=kind, vectors=vectors: build_index(vectors, kind=kind, threads=threads)
            )
            for nprobe in nprobes:
                (_, ids), ta = _timed(
                    lambda nprobe=nprobe, index=index, queries=queries: index.search(queries, 10, nprobe)
                )
                out["clustered"].append(
                    {
                        "noise": noise,
                        "index": index.kind,
                        "nlist": index.nlist,
                        "nprobe": nprobe,
                        "build_seconds": t_build,
                        "batch_ms_per_request": 1e3 * ta / n_requests,
                        "batch_cpu_ms_per_request": 1e3 * CPU["last"] / n_requests,
                        "recall@10": recall_at_k(ids.tolist(), truth.tolist()),
                    }
                )
                print(
                    f"  clustered (noise {noise}) {index.kind} nprobe {nprobe}: recall@10 "
                    f"{out['clustered'][-1]['recall@10']:.3f}",
                    flush=True,
                )
            del index
            gc.collect()
    return out


# -- report ----------------------------------------------------------------------------------------
def machine(threads: int) -> dict[str, Any]:
    import torch

    cpu = platform.machine()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "# Large catalogs: sampled softmax training and approximate top-K",
        "",
        "Generated by `benchmarks/large_catalog.py` from `large_catalog.json`; do not edit.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['threads']} thread(s) per process, torch {m['torch']}; "
        f"load average {m['load_average_at_start'][0]:.1f} at the start, {res['load_average_at_end'][0]:.1f} "
        f"at the end ({res['other_load']}). Total {res['seconds'] / 60:.1f} min.",
        "",
        "## Training step (SASRec d=64, 2 blocks, window 50)",
        "",
        "Persistent = resident memory after a warm-up step (weights, Adam moments, data); step peak = what "
        "a step adds on top. With a dense item-embedding gradient (sampled_ce, ce) one copy of the table "
        "is part of every step's peak and Adam updates the whole table (time grows with the catalog); "
        "with sparse_embedding the gradient holds only the rows the batch touched and lazy Adam updates "
        "only those, so the step's memory and time stay flat. A full softmax's compute grows with the "
        "catalog in any case.",
        "",
        "Wall seconds depend on what else ran; CPU seconds (this process, all threads) much less so.",
        "",
        "| loss | items | positions/step | s/step (wall) | CPU s/step | step peak MB | dense embedding grad "
        "MB (in step peak) | persistent MB | weights MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["steps"]:
        lines.append(
            f"| {r['loss']} | {r['n_items']:,} | {r['positions_per_step']:,} | {r['seconds_per_step']:.3f} | "
            f"{r['cpu_seconds_per_step']:.3f} | "
            f"{r['step_peak_mb']:.0f} | {r['embedding_grad_mb']:.0f} | {r['persistent_mb']:.0f} | "
            f"{r['param_mb']:.0f} |"
        )
    rt = res.get("retrieval")
    if rt:
        lines += [
            "",
            f"## Top-10 over {rt['n_items']:,} items ({rt['requests']} requests)",
            "",
            f"SASRec trained one epoch with sampled_ce (sparse embedding) on {rt['train_users']:,} synthetic "
            f"users ({rt['fit_seconds']:.0f} s). Exact = `Recommender.recommend_many` (catalog scored in "
            "chunks); batched = all requests in one call, alone = one request per call; ms are wall "
            "milliseconds (inflated by the other jobs) and CPU milliseconds of this process. A one-epoch "
            "model on random data has trained only the items its batches touched, whose vectors dominate "
            "every top-10: an easy case for the index, hence the clustered vectors below.",
            "",
            "| method | nlist | nprobe | recall@10 | ms/request batched | CPU ms/request batched | ms alone "
            "| CPU ms alone | index build s |",
            "|---|---|---|---|---|---|---|---|---|",
            f"| exact | | | 1.000 | {rt['exact']['batch_ms_per_request']:.2f} | "
            f"{rt['exact'].get('batch_cpu_ms_per_request', float('nan')):.2f} | "
            f"{rt['exact']['single_ms']:.1f} | {rt['exact'].get('single_cpu_ms', float('nan')):.1f} | |",
        ]
        if rt.get("other_load"):
            lines.insert(
                len(lines) - 3,
                f"Retrieval measured in a separate run ({rt['seconds'] / 60:.1f} min; load average "
                f"{rt['load_average_at_end'][0]:.1f} at its end; {rt['other_load']}).",
            )
            lines.insert(len(lines) - 3, "")
        for r in rt["model_ann"]:
            lines.append(
                f"| {r['index']} | {r['nlist']} | {r['nprobe']} | {r['recall@10']:.3f} | "
                f"{r['batch_ms_per_request']:.2f} | {r.get('batch_cpu_ms_per_request', float('nan')):.2f} | "
                f"{r['single_ms']:.1f} | {r.get('single_cpu_ms', float('nan')):.1f} | "
                f"{r['build_seconds']:.1f} |"
            )
        lines += [
            "",
            f"Synthetic vectors ({rt['n_items']:,} x {MODEL['hidden']}): 1,000 unit-scale Gaussian centres; "
            "items and queries are a centre plus Gaussian noise (1.0: clustered, 1.5: weakly clustered). "
            "Exact = the same chunked top-K over all items.",
            "",
            "| noise | index | nlist | nprobe | recall@10 | ms/request batched | CPU ms/request batched | "
            "build s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in rt["clustered"]:
            lines.append(
                f"| {r.get('noise', 0.5)} | {r['index']} | {r['nlist'] or ''} | {r['nprobe'] or ''} | "
                f"{r['recall@10']:.3f} | {r['batch_ms_per_request']:.2f} | "
                f"{r.get('batch_cpu_ms_per_request', float('nan')):.2f} | {r['build_seconds']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--step-worker":
        n_items, loss, steps, batch, threads = argv[1:6]
        print(json.dumps(step_worker(int(n_items), loss, int(steps), int(batch), int(threads))))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small catalogs; results are printed, not saved")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--other-load", default="other jobs were running", help="what else ran (recorded)")
    p.add_argument(
        "--retrieval-only",
        action="store_true",
        help="keep the training-step results of large_catalog.json and measure retrieval again",
    )
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    if a.retrieval_only:
        res: dict[str, Any] = json.loads((RESULTS / "large_catalog.json").read_text())
        print("retrieval:", flush=True)
        res["retrieval"] = retrieval(1_000_000, 2000, 256, [8, 32, 128], a.threads)
        res["retrieval"]["other_load"] = a.other_load
        res["retrieval"]["seconds"] = time.perf_counter() - t0
        res["retrieval"]["load_average_at_end"] = os.getloadavg()
        (RESULTS / "large_catalog.json").write_text(json.dumps(res, indent=2) + "\n")
        (RESULTS / "large_catalog.md").write_text(markdown(res))
        print(f"wrote {RESULTS / 'large_catalog.json'} and large_catalog.md")
        return
    sizes = [2_000, 20_000] if a.quick else [10_000, 100_000, 1_000_000]
    res = {"machine": machine(a.threads), "model": MODEL, "sampled": SAMPLED, "steps": []}
    print("training steps:", flush=True)
    for n in sizes:
        res["steps"].append(run_step(n, "sampled_ce", 5, a.batch, a.threads))
    for n in sizes:
        res["steps"].append(run_step(n, "sampled_ce+sparse", 5, a.batch, a.threads))
    for n in sizes:
        res["steps"].append(run_step(n, "ce", 1 if n >= 1_000_000 else 3, a.batch, a.threads))
    print("retrieval:", flush=True)
    res["retrieval"] = retrieval(
        sizes[-1],
        300 if a.quick else 2000,
        64 if a.quick else 256,
        [4, 16] if a.quick else [8, 32, 128],
        a.threads,
    )
    res["seconds"] = time.perf_counter() - t0
    res["load_average_at_end"] = os.getloadavg()
    res["other_load"] = a.other_load
    res["peak_rss_mb_parent"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if a.quick:
        print(markdown(res))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "large_catalog.json").write_text(json.dumps(res, indent=2) + "\n")
    (RESULTS / "large_catalog.md").write_text(markdown(res))
    print(f"wrote {RESULTS / 'large_catalog.json'} and large_catalog.md in {res['seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
