"""Does the plain command hold on a user's own file? The data-chosen defaults against popularity and presets.

    taskset -c 0 python benchmarks/defaults.py --budget 300     # -> benchmarks/results/defaults.{json,md}

For each real log it runs what ``attnrec train --data FILE --time-budget B`` runs (the same reader,
the default leave-one-out split with every user validated, SASRec with the settings chosen from the
data) and scores the test users under full ranking, history excluded, beside the popularity row. The
comparator is the best committed result on the same file and split (any model, any preset, from
``benchmarks/results/runs``); a file with none is also run with the ``paper-sparse`` preset, the
documented recipe for short sequences, under the same budget. ``--no-auto`` runs (the defaults before
they were chosen from the data) are the last rows, when the budget allows.

Each finished run is written to the JSON at once, and a rerun skips the runs it holds, so a cut-off
run resumes. One torch thread; the time budget is the training loop's (wall clock).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from attnrec import Recommender
from attnrec.cli._common import load_data
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL
from provenance import ROOT, git_sha  # benchmarks/provenance.py, beside this script

SHARED = ROOT.parent / "shared" / "data"
RUNS = ROOT / "benchmarks" / "results" / "runs"
OUT = ROOT / "benchmarks" / "results" / "defaults"
# name -> path under ../shared/data; none of these was used to choose the rules' thresholds except
# ml-latest-small and ml-100k, whose committed ID-only runs the rules were read from.
FILES = {
    "ml-latest-small": "ml-latest-small/ratings.csv.gz",
    "ml-100k": "ml-100k/u.data",
    "movietweetings-100k": "movietweetings-100k/ratings.dat.gz",
    "amazon-musical-instruments": "amazon-musical-instruments/reviews_Musical_Instruments_5.json.gz",
    "taobao-sample": "taobao-sample/UserBehavior_head_814users.csv.gz",
    "ciao": "ciao/ratings.csv.gz",
    # the papers' files, each with committed runs of tuned presets (trained for tens of minutes)
    "ml-1m": "ml-1m/ml-1m.txt.gz",
    "beauty": "beauty/beauty.txt.gz",
    "amazon-toys": "amazon-toys/Toys_and_Games.txt.gz",
    "amazon-sports": "amazon-sports/Sports_and_Outdoors.txt.gz",
    "otto-sample": "otto-sample/train.jsonl",
}
METRICS = ("NDCG@10", "HR@10")


def best_committed(sha256: str) -> dict[str, Any] | None:
    """The committed run with the highest full-ranking test NDCG@10 on this file under leave-one-out."""
    best: dict[str, Any] | None = None
    for path in sorted(RUNS.glob("*.json")):
        rec = json.loads(path.read_text())
        full = rec.get("evaluations", {}).get("full")
        if rec.get("data", {}).get("sha256") != sha256 or rec.get("split") != "leave-one-out" or not full:
            continue
        value = full["metrics"]["NDCG@10"]
        if best is None or value > best["NDCG@10"]:
            best = {"run": rec["name"], "NDCG@10": value, "HR@10": full["metrics"]["HR@10"]}
    return best


def run_one(name: str, path: Path, variant: str, budget: float) -> dict[str, Any]:
    data = load_data(str(path))
    split = leave_one_out(data)
    train = {"time_budget": budget, "threads": 1}
    if variant == "auto":
        rec = Recommender("sasrec", train=train, auto=True)
    elif variant == "no-auto":
        rec = Recommender("sasrec", train=train, auto=False)
    else:
        rec = Recommender("sasrec", train=train, preset=variant)
    start = time.perf_counter()
    rec.fit(data, split, progress=False)
    seconds = time.perf_counter() - start
    test = rec.evaluate(split.test, FULL)
    pop = Recommender("pop").fit(data, split, progress=False).evaluate(split.test, FULL)
    tr = rec.train_result_
    assert tr is not None
    return {
        "file": name,
        "variant": variant,
        "sha256": data.source.sha256,
        "users": data.n_users,
        "items": data.n_items,
        "interactions": len(data),
        "settings": rec.auto_.model | rec.auto_.train if rec.auto_ else {},
        "reasons": list(rec.auto_.reasons) if rec.auto_ else [],
        "test": {m: test.metrics[m] for m in METRICS},
        "test_se": {m: test.standard_errors.get(m) for m in METRICS},
        "popularity": {m: pop.metrics[m] for m in METRICS},
        "epochs": tr.epochs,
        "best_epoch": tr.best_epoch,
        "stopped": tr.stopped,
        "fit_seconds": seconds,
        "budget": budget,
        "git_sha": git_sha(),
    }


def render(results: list[dict[str, Any]], budget: float) -> str:
    lines = [
        "# The plain command on real files: data-chosen defaults against popularity and the best preset",
        "",
        "Written by `python benchmarks/defaults.py` (see its docstring). Protocol: the CLI's default split",
        "(leave-one-out, every user validated), test on each user's last event under full ranking with the",
        f"history excluded; SASRec; training stopped by the rules or the {budget:.0f} s budget, one torch",
        "thread on a 2-core machine shared with other work (times are wall clock). `best committed` is the",
        "highest test NDCG@10 of any committed run on the same file and split (`benchmarks/results/runs`);",
        "a file without one is compared with the `paper-sparse` preset run under the same budget.",
        "",
        "| file | users / items / events | chosen | NDCG@10 | HR@10 | popularity NDCG@10 | x pop "
        "| best preset NDCG@10 | share of best | epochs (best), stop | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_file: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        by_file.setdefault(r["file"], {})[r["variant"]] = r
    for name, runs in by_file.items():
        auto = runs.get("auto")
        if auto is None:
            continue
        ref = best_committed(auto["sha256"])
        preset = runs.get("paper-sparse")
        if ref is None and preset is not None:
            ref = {"run": "paper-sparse (this script)", "NDCG@10": preset["test"]["NDCG@10"]}
        s = auto["settings"]
        chosen = f"{s.get('loss')} n={s.get('max_len')} p={s.get('dropout')}"
        ndcg, pop = auto["test"]["NDCG@10"], auto["popularity"]["NDCG@10"]
        share = (
            f"{ndcg / ref['NDCG@10']:.0%} of {ref['run']}"
            if ref and ref["NDCG@10"] > 0
            else f"the comparator {ref['run']} scores 0"
            if ref
            else "no comparator yet"
        )
        times_pop = f"{ndcg / pop:.2f}" if pop > 0 else "-"
        lines.append(
            f"| {name} | {auto['users']:,} / {auto['items']:,} / {auto['interactions']:,} | {chosen} "
            f"| {ndcg:.4f} ± {auto['test_se']['NDCG@10']:.4f} | {auto['test']['HR@10']:.4f} | {pop:.4f} "
            f"| {times_pop} | {ref['NDCG@10']:.4f} | {share} "
            f"| {auto['epochs']} ({auto['best_epoch']}), {auto['stopped']} | {auto['fit_seconds']:.0f} |"
            if ref
            else f"| {name} | {auto['users']:,} / {auto['items']:,} / {auto['interactions']:,} | {chosen} "
            f"| {ndcg:.4f} | {auto['test']['HR@10']:.4f} | {pop:.4f} | {times_pop} | - | {share} "
            f"| {auto['epochs']} ({auto['best_epoch']}), {auto['stopped']} | {auto['fit_seconds']:.0f} |"
        )
    others = [r for r in results if r["variant"] != "auto"]
    if others:
        lines += [
            "",
            "Other runs under the same budget:",
            "",
            "| file | variant | NDCG@10 | HR@10 | epochs (best), stop |",
        ]
        lines.append("|---|---|---|---|---|")
        for r in others:
            lines.append(
                f"| {r['file']} | {r['variant']} | {r['test']['NDCG@10']:.4f} | {r['test']['HR@10']:.4f} "
                f"| {r['epochs']} ({r['best_epoch']}), {r['stopped']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=300.0, help="training seconds per run")
    parser.add_argument("--files", default=",".join(FILES), help="comma-separated names of FILES")
    parser.add_argument("--variants", default="auto,paper-sparse,no-auto")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    json_path = args.out.with_suffix(".json")
    results: list[dict[str, Any]] = json.loads(json_path.read_text()) if json_path.exists() else []
    for variant in args.variants.split(","):
        for name in args.files.split(","):
            if any(r["file"] == name and r["variant"] == variant for r in results):
                continue
            path = SHARED / FILES[name]
            if variant == "paper-sparse" and best_committed_for(path) is not None:
                continue  # the committed result is the comparator
            results.append(run_one(name, path, variant, args.budget))
            json_path.write_text(json.dumps(results, indent=1) + "\n")
            args.out.with_suffix(".md").write_text(render(results, args.budget))
            print(f"{name} {variant}: NDCG@10 {results[-1]['test']['NDCG@10']:.4f}", flush=True)


def best_committed_for(path: Path) -> dict[str, Any] | None:
    return best_committed(load_data(str(path)).source.sha256 or "")


if __name__ == "__main__":
    main()
