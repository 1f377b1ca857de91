"""Peer comparison: RecBole's and RecTools' SASRec against attnrec's on ML-1M, same split and hyperparameters.

    nice -n 10 .venv/bin/python benchmarks/peers.py                 # all three, one library at a time
    # one library (recbole, rectools, attnrec)
    .venv/bin/python benchmarks/peers.py --only attnrec
    .venv/bin/python benchmarks/peers.py --table                      # rebuild peers.md from peers.json
    .venv/bin/python benchmarks/peers.py --only rectools --data small.txt --max-epochs 2 --out /tmp/p.json
    nice -n 10 .venv/bin/python benchmarks/peers.py --time-cap 2700   # each library trains at most 45 min
    # with the run's notes
    .venv/bin/python benchmarks/peers.py --table --notes benchmarks/results/peers-notes.md

The committed ``peers.json`` is one run on ML-1M with ``--threads 1 --time-cap 2700`` (about 2.5 h
with the installs); ``peers-notes.md`` says what else the machine was doing.

What it does, one library at a time (never concurrently, so the timings do not disturb each other):

1. Data: the papers' ML-1M file (``../shared/data/ml-1m/ml-1m.txt.gz``; one ``user item`` line per
   interaction in time order) is loaded by attnrec and split leave-one-out (last item test, the one
   before validation, the test history includes it; users with fewer than 3 interactions only train).
   The same sequences are written for the peers under ``/tmp/attnrec-peers/data``: an atomic
   ``.inter`` file for RecBole (``timestamp`` = position in the user's sequence; its ``LS``
   ``valid_and_test`` split then gives the same split for every user with at least 4 interactions,
   all of ML-1M's; a user with exactly 3 would be trained on its validation item there, and the
   export counts them), the all-but-last interactions for RecTools (``train.csv``; its validation
   mask takes the last of them for the evaluated users), and the test users and targets (``test.json``).
2. Environments: each peer gets its own virtual environment under ``/tmp/attnrec-peers/<lib>-venv``
   with the same torch version as attnrec's (``pip install torch==X``, the CPU build), then
   ``recbole==1.2.1`` (with numpy < 2, scipy < 1.14 and pandas < 2.2, which that release predates)
   or ``rectools[torch]==0.19.0``. Both install and run with torch 2.13.0 as they are.
3. Training, in a fresh process per library (peak RSS is that process's ``ru_maxrss``): SASRec with
   d=64, 2 blocks, 1 head, max length 200, dropout 0.1 on hidden states and none on attention
   probabilities (Klenitskiy & Vasilev's SASRec+ recipe, 0.1821 published on this file; RecTools has
   one dropout rate for both), point-wise FFN of width d with ReLU, full-softmax cross-entropy, Adam
   lr 1e-3 with betas (0.9, 0.98) (RecBole's default 0.999 is replaced), batch 128, at most 200
   epochs, validation every 2 epochs, stop after 5 validations without improvement, the best
   validated weights kept, seed 0, ``--threads`` torch threads.
   ``--time-cap S`` stops each library's training after S seconds. One RecBole epoch on ML-1M takes
   over an hour on this machine, so the full comparison needs a cap to fit a working day: a peer
   stops after the training batch that passes it and its weights so far are validated as a last
   epoch would be; attnrec stops at the end of the epoch that passes it. A peer that has not
   reached validation NDCG@10 0.18 within the cap needs longer than the cap to reach it.
4. Evaluation, validation and test alike: full ranking over all items with the user's whole history
   excluded (the target stays a candidate; ties count against it), NDCG@10 and HR@10, validation
   selecting on NDCG@10. attnrec uses its own protocol. The peers' own evaluators cannot do this,
   so this script scores their models itself with the same rule: RecBole's full-sort evaluation of
   sequential models excludes nothing (its numbers under its own protocol are recorded as
   ``test_own_protocol``), and RecTools' trainer validates only a loss (its ``val_loss`` is
   recorded too). The RecTools test metrics come from its own ``recommend(filter_viewed=True)``
   top-10 lists (history excluded by the library), checked against this script's scorer
   (``test_check``).

Known differences that no setting removes (recorded in the table's notes): RecBole's SASRec trains
on every prefix of every sequence (one target per sample, so an "epoch" is ~165x more samples than
a shifted-sequence epoch) and uses post-LayerNorm blocks; RecTools matches the authors' pre-LN
shifted-sequence training (on each user's last 201 items, as attnrec) but ranks only the items in
its training windows (attnrec ranks every item of the data set). Seconds per epoch are therefore
reported together with total wall time to the final model and the time at which validation NDCG@10
first reached 0.18.

Writes ``benchmarks/results/peers.json`` (one entry per library, updated after each) and a
generated ``peers.md`` beside it with the ratios to attnrec.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from peer_common import WORK, peak_mb, versions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ML1M = ROOT.parent / "shared" / "data" / "ml-1m" / "ml-1m.txt.gz"
SETTINGS: dict[str, Any] = {
    "hidden": 64,
    "n_layers": 2,
    "n_heads": 1,
    "max_len": 200,
    "dropout": 0.1,
    "attn_dropout": 0.0,
    "lr": 1e-3,
    "beta2": 0.98,
    "batch_size": 128,
    "max_epochs": 200,
    "eval_every": 2,
    "patience": 5,
    "seed": 0,
    "threads": 2,
    "time_cap": 0.0,
}
PACKAGES = {
    "recbole": ["recbole==1.2.1", "numpy<2", "scipy<1.14", "pandas<2.2"],
    "rectools": ["rectools[torch]==0.19.0"],
}
TARGET_NDCG = 0.18


# -- data ------------------------------------------------------------------------------------------
def export(data_spec: str) -> dict[str, Any]:
    """Write the sequences for the peers; returns a description of the split."""
    from attnrec.data.datasets import load_dataset
    from attnrec.data.split import leave_one_out

    data = load_dataset(data_spec)
    split = leave_one_out(data)
    seqs = data.sequences()
    d = WORK / "data"
    (d / "ml1m").mkdir(parents=True, exist_ok=True)
    users = data.users.to_list()
    items = data.items.to_list()
    with open(d / "ml1m" / "ml1m.inter", "w") as inter, open(d / "train.csv", "w") as train:
        inter.write("user_id:token\titem_id:token\ttimestamp:float\n")
        train.write("user_id,item_id,position\n")
        for u in range(seqs.n_users):
            s = seqs[u]
            for pos, i in enumerate(s):
                inter.write(f"{users[u]}\t{items[i - 1]}\t{pos}\n")
                if (
                    pos < len(s) - 1 or len(s) < 3
                ):  # the test history (all but the last item) of evaluated users
                    train.write(f"{users[u]},{items[i - 1]},{pos}\n")
    test = {
        "users": [users[u] for u in split.test.users],
        "targets": [items[i - 1] for i in split.test.targets],
    }
    (d / "test.json").write_text(json.dumps(test))
    lengths = seqs.lengths()
    return {
        "data": data.source.name,
        "sha256": data.source.sha256,
        "users": data.n_users,
        "items": data.n_items,
        "interactions": len(data),
        "test_users": len(split.test),
        "split": split.describe(),
        "users_with_3": int((lengths == 3).sum()),
        "users_below_3": int((lengths < 3).sum()),
    }


# -- environments ----------------------------------------------------------------------------------
def venv_python(lib: str) -> Path:
    import torch

    venv = WORK / f"{lib}-venv"
    py = venv / "bin" / "python"
    stamp = venv / ".installed"
    want = " ".join(PACKAGES[lib])
    if stamp.exists() and stamp.read_text() == want:
        return py
    if not py.exists():
        subprocess.check_call([sys.executable, "-m", "venv", str(venv)])
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    subprocess.check_call([*pip, "--upgrade", "pip"])
    subprocess.check_call([*pip, f"torch=={torch.__version__.split('+')[0]}"])  # the same torch as attnrec's
    subprocess.check_call([*pip, *PACKAGES[lib]])
    stamp.write_text(want)
    return py


def run_worker(python: Path, lib: str, settings: dict[str, Any]) -> dict[str, Any]:
    out = WORK / f"{lib}-result.json"
    out.unlink(missing_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(settings["threads"]), PYTHONHASHSEED="0")
    if lib == "attnrec":
        env["PYTHONPATH"] = str(ROOT / "src")
    t0 = time.perf_counter()
    log = WORK / f"{lib}.log"
    with open(log, "w") as fh:
        code = subprocess.call(
            [str(python), __file__, "--worker", lib, json.dumps(settings), str(out)],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=WORK,
        )
    if code != 0 or not out.exists():
        raise SystemExit(f"{lib} failed (exit {code}); see {log}")
    res: dict[str, Any] = json.loads(out.read_text())
    res["process_wall_seconds"] = time.perf_counter() - t0
    return res


# -- workers: attnrec's here; the peers' in peer_recbole.py and peer_rectools.py (their own environments) --


def _first_reaching(evals: list[dict[str, Any]], key: str = "NDCG@10") -> float | None:
    for e in evals:
        if e.get(key) is not None and e[key] >= TARGET_NDCG:
            return float(e["at_seconds"])
    return None


def worker_attnrec(s: dict[str, Any], data_spec: str) -> dict[str, Any]:
    import torch

    from attnrec import Recommender
    from attnrec.data.datasets import load_dataset
    from attnrec.data.split import leave_one_out
    from attnrec.evaluation.protocol import FULL

    torch.set_num_threads(s["threads"])
    data = load_dataset(data_spec)
    split = leave_one_out(data)
    model = {k: s[k] for k in ("hidden", "n_layers", "n_heads", "max_len", "dropout", "attn_dropout")} | {
        "loss": "ce"
    }
    train = {
        "lr": s["lr"],
        "batch_size": s["batch_size"],
        "max_epochs": s["max_epochs"],
        "eval_every": s["eval_every"],
        "patience": s["patience"],
        "seed": s["seed"],
        "threads": s["threads"],
        "device": "cpu",
        "beta2": s.get("beta2", 0.98),
        "time_budget": s.get("time_cap", 0.0),
    }
    rec = Recommender("sasrec", model, train)
    t0 = time.perf_counter()
    rec.fit(data, split, valid_protocol=FULL, progress=False)
    fit = time.perf_counter() - t0
    t1 = time.perf_counter()
    test = rec.evaluate(split.test, FULL).metrics
    eval_seconds = time.perf_counter() - t1
    tr = rec.train_result_
    assert tr is not None
    evals, clock = [], 0.0
    n_evals = sum(1 for h in tr.history if "valid" in h)
    valid_each = max(0.0, fit - sum(h["train_seconds"] for h in tr.history)) / max(n_evals, 1)
    for h in tr.history:
        clock += h["train_seconds"]
        if "valid" in h:
            clock += valid_each
            evals.append(
                {
                    "epoch": h["epoch"],
                    "at_seconds": clock,
                    "NDCG@10": h["valid"]["NDCG@10"],
                    "HR@10": h["valid"]["HR@10"],
                }
            )
    return {
        "epoch_seconds": [h["train_seconds"] for h in tr.history],
        "epochs": tr.epochs,
        "best_epoch": tr.best_epoch,
        "valid_seconds_each": valid_each,
        "evals": evals,
        "fit_seconds": fit,
        "test_eval_seconds": eval_seconds,
        "test": {"NDCG@10": test["NDCG@10"], "HR@10": test["HR@10"]},
        "stopped": tr.stopped,
        "time_cap": float(s.get("time_cap") or 0.0),
        "peak_rss_mb": peak_mb(),
        "version": __import__("attnrec").__version__,
        "packages": versions("torch", "numpy"),
    }


# -- report ----------------------------------------------------------------------------------------
def summarise(lib: str, r: dict[str, Any]) -> dict[str, Any]:
    secs = r["epoch_seconds"]
    part = r.get("partial_epoch")
    r["seconds_per_epoch_estimated"] = not secs and bool(part and part["batches"])
    if secs:
        r["seconds_per_epoch"] = sum(secs) / len(secs)
    elif part and r["seconds_per_epoch_estimated"]:  # no whole epoch within the cap: scale the batches it did
        r["seconds_per_epoch"] = part["seconds"] / part["batches"] * r["batches_per_epoch"]
    else:
        r["seconds_per_epoch"] = float("nan")
    r["total_wall_seconds"] = r["fit_seconds"] + r["test_eval_seconds"] + r.get("prepare_seconds", 0.0)
    r["seconds_to_valid_ndcg_0.18"] = _first_reaching(r.get("evals", []))
    return r


def _time_cap(r: dict[str, Any]) -> float:
    """The library's training cap in seconds. Every worker reports it now; attnrec's did not in the
    committed 2026-11-23 run, whose entry falls back on the run's settings."""
    return float(r.get("time_cap") or r.get("settings", {}).get("time_cap") or 0.0)


def markdown(res: dict[str, Any], notes: str = "", source: str = "peers.json") -> str:
    """peers.md from the results in ``res`` (read from ``source``), with ``notes`` (markdown on how the
    run went) at the end."""
    libs = res.get("libraries", {})
    lines = [
        "# SASRec on ML-1M: attnrec vs RecBole vs RecTools",
        "",
        f"Generated by `benchmarks/peers.py` from `{source}`; do not edit.",
        "",
    ]
    if "split" in res:
        sp = res["split"]
        lines += [
            f"Data: {sp['data']} (sha256 {sp['sha256'][:12]}), {sp['users']:,} users, {sp['items']:,} items, "
            f"{sp['interactions']:,} interactions; split {sp['split']}; test on {sp['test_users']:,} users, "
            "full ranking, history excluded.",
            "",
            f"Settings: {json.dumps(res.get('settings', {}))}. Machine: {res.get('machine', '')}.",
            "",
        ]
    if not libs:
        return "\n".join(lines + ["No results yet: run `benchmarks/peers.py`."]) + "\n"
    base = libs.get("attnrec")
    lines += [
        "| library | version | s/epoch | x attnrec s/epoch | epochs (best) | test eval s | total wall s | "
        "x attnrec wall | valid NDCG@10 >= 0.18 after s | peak RSS MB | test NDCG@10 | test HR@10 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for lib, r in libs.items():
        ratio = r["seconds_per_epoch"] / base["seconds_per_epoch"] if base else float("nan")
        wall = r["total_wall_seconds"] / base["total_wall_seconds"] if base else float("nan")
        reach = r.get("seconds_to_valid_ndcg_0.18")
        cap = _time_cap(r)
        never = f"not within the {cap:.0f} s cap" if cap else "never"
        est = " (est.)" if r.get("seconds_per_epoch_estimated") else ""
        part = r.get("partial_epoch")
        epochs = f"{r['epochs']}" + (f" + {part['batches']}/{r['batches_per_epoch']} batches" if part else "")
        best = r.get("best_epoch", "")
        best = f"{best:.2f}" if isinstance(best, float) else best
        lines.append(
            f"| {lib} | {r.get('version', '')} | {r['seconds_per_epoch']:.1f}{est} | {ratio:.2f} | {epochs} "
            f"({best}) | {r['test_eval_seconds']:.1f} | {r['total_wall_seconds']:.0f} | "
            f"{wall:.2f} | {never if reach is None else f'{reach:.0f}'} | {r['peak_rss_mb']:.0f} | "
            f"{r['test']['NDCG@10']:.4f} | {r['test']['HR@10']:.4f} |"
        )
    caps = {_time_cap(r) for r in libs.values()}
    lines += [
        "",
        "Notes: all three validate and test under the same protocol (full ranking, history excluded) and "
        "keep the weights of the best validation NDCG@10; the peers' models are scored by peers.py where the "
        "library cannot do it. RecBole trains on every prefix (one target per sample) with post-LN blocks.",
        *(
            [
                "- Time cap: each library's training stops once it has run "
                + " / ".join(f"{c:.0f} s" for c in sorted(caps))
                + " (the peers after the batch that passes it, "
                "then their weights so far are validated as a last epoch would be; attnrec at the end of "
                "the epoch that passes it). A capped run's test figures are those of its best validated "
                "weights within the cap, "
                'not of a converged model; "not within the cap" means its time to NDCG@10 0.18 is longer '
                "than the cap. Seconds per epoch marked (est.) come from the batches of an unfinished epoch."
            ]
            if any(caps)
            else []
        ),
        *[f"- {lib}: {r['note']}" for lib, r in libs.items() if r.get("note")],
        *[
            f"- {lib} under its own protocol ({o['protocol']}): NDCG@10 {o['NDCG@10']:.4f}, HR@10 "
            f"{o['HR@10']:.4f}"
            for lib, r in libs.items()
            if (o := r.get("test_own_protocol"))
        ],
    ]
    if notes.strip():
        lines += ["", "## How the run went", "", notes.strip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        lib, settings, out = argv[1], json.loads(argv[2]), Path(argv[3])
        torch_seed = settings["seed"]
        import random

        random.seed(torch_seed)
        if lib == "recbole":  # the peers' workers import their library: only in its own environment
            from peer_recbole import worker_recbole

            result = worker_recbole(settings)
        elif lib == "rectools":
            from peer_rectools import worker_rectools

            result = worker_rectools(settings)
        else:
            result = worker_attnrec(settings, settings["data"])
        out.write_text(json.dumps(result, indent=2))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["recbole", "rectools", "attnrec"], action="append")
    p.add_argument(
        "--data", default=str(ML1M), help="dataset for attnrec.load_dataset (default: the papers' ML-1M)"
    )
    p.add_argument("--max-epochs", type=int, default=SETTINGS["max_epochs"])
    p.add_argument("--threads", type=int, default=SETTINGS["threads"])
    p.add_argument(
        "--attn-dropout",
        type=float,
        default=SETTINGS["attn_dropout"],
        help="attnrec and RecBole; RecTools always uses dropout on attention probabilities",
    )
    p.add_argument(
        "--dropout", type=float, default=SETTINGS["dropout"], help="dropout on hidden states (all three)"
    )
    p.add_argument(
        "--time-cap",
        type=float,
        default=SETTINGS["time_cap"],
        help="seconds of training per library, 0 = none (RecBole's epoch on ML-1M takes over an hour)",
    )
    p.add_argument("--table", action="store_true", help="only rebuild peers.md from peers.json")
    p.add_argument("--out", type=Path, default=RESULTS / "peers.json")
    p.add_argument(
        "--notes", type=Path, help="a markdown file (how and where the run went) to include in peers.md"
    )
    a = p.parse_args(argv)
    res: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {}
    if not a.table:
        WORK.mkdir(parents=True, exist_ok=True)
        settings = SETTINGS | {
            "max_epochs": a.max_epochs,
            "threads": a.threads,
            "attn_dropout": a.attn_dropout,
            "dropout": a.dropout,
            "time_cap": a.time_cap,
            "data": a.data,
        }
        res["split"] = export(a.data)
        res["settings"] = settings
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        res["machine"] = (
            f"{os.cpu_count()} cores, run on CPUs {cpus}, load average {os.getloadavg()[0]:.1f} at the start"
        )
        libs = res.setdefault("libraries", {})
        for lib in a.only or ["recbole", "rectools", "attnrec"]:
            print(f"{lib}: preparing ...", flush=True)
            python = Path(sys.executable) if lib == "attnrec" else venv_python(lib)
            print(f"{lib}: training ...", flush=True)
            libs[lib] = summarise(lib, run_worker(python, lib, settings) | {"settings": settings})
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(res, indent=2) + "\n")
            print(
                f"{lib}: {libs[lib]['seconds_per_epoch']:.1f} s/epoch, test NDCG@10 "
                f"{libs[lib]['test']['NDCG@10']:.4f}",
                flush=True,
            )
    md = markdown(res, a.notes.read_text() if a.notes else "", a.out.name)
    a.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
