"""Does ``fast_dropout`` cost quality? Three training seeds with it on and off, on two files.

    taskset -c 1 python benchmarks/fast_dropout.py      # -> benchmarks/results/fast_dropout.{json,md}
    python benchmarks/fast_dropout.py --render          # only rewrite the .md from the .json

``fast_dropout`` draws SASRec's dropout masks from 16-bit random integers instead of ``nn.Dropout``'s
stream: the same distribution (to 1/32768), other masks. The question is whether the plain command
(``attnrec train --data FILE``: SASRec with the settings chosen from the data, ``fast_ce`` on) trains to
the same quality with it. Each file is split leave-one-out as the CLI splits it; every run of a file
trains the same fixed number of epochs (``--epochs``, about what the slow setting does in 50-60 s on
one free core), validating after each and keeping the best validated weights, so that both settings do
the same work and only the masks differ; test users are scored under full ranking, history excluded.
Training seeds 0, 1, 2 for each setting, one torch thread, the runs interleaved (seed by seed, off then
on) so that a change of machine load falls on both.

Each finished run is written to the JSON at once and a rerun skips the runs it holds (resumable).
The decision rule (in the .md): fast_dropout costs quality on a file when its mean test NDCG@10 or
HR@10 is below the slow setting's by more than the seed spread (the larger of the two settings'
standard deviations over seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
OUT = ROOT / "benchmarks" / "results" / "fast_dropout"
FILES = {"ml-100k": "ml-100k/u.data", "ml-latest-small": "ml-latest-small/ratings.csv.gz"}
SEEDS = (0, 1, 2)
METRICS = ("NDCG@10", "HR@10")


def run_one(name: str, path: Path, fast: bool, seed: int, epochs: int) -> dict[str, Any]:
    data = load_data(str(path))
    split = leave_one_out(data)
    train = {"max_epochs": epochs, "min_epochs": epochs, "threads": 1, "seed": seed}
    rec = Recommender("sasrec", {"fast_dropout": fast}, train, auto=True)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    rec.fit(data, split, progress=False)
    seconds = time.perf_counter() - start
    test = rec.evaluate(split.test, FULL)
    tr = rec.train_result_
    assert tr is not None and rec.config is not None
    return {
        "file": name,
        "fast_dropout": fast,
        "seed": seed,
        "epochs": tr.epochs,
        "best_epoch": tr.best_epoch,
        "fit_seconds": seconds,
        "test": {m: test.metrics[m] for m in METRICS},
        "model_config": {k: v for k, v in vars(rec.config).items() if k in ("loss", "fast_ce", "max_len")}
        | {"dropout": rec.config.dropout},  # type: ignore[attr-defined]
        "loadavg_1min": max(load, os.getloadavg()[0]),
        "git_sha": git_sha(),
    }


def summary(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    out: dict[bool, Any] = {}
    for fast in (False, True):
        mine = [r for r in rows if r["file"] == name and r["fast_dropout"] is fast]
        out[fast] = {
            m: (
                statistics.mean(r["test"][m] for r in mine),
                statistics.stdev(r["test"][m] for r in mine) if len(mine) > 1 else 0.0,
            )
            for m in METRICS
        } | {"seconds": statistics.mean(r["fit_seconds"] for r in mine), "n": len(mine)}
    loss = {m: out[False][m][0] - out[True][m][0] > max(out[False][m][1], out[True][m][1]) for m in METRICS}
    return {"off": out[False], "on": out[True], "loss_beyond_spread": loss}


def render(report: dict[str, Any]) -> str:
    rows = report["rows"]
    lines = [
        "# fast_dropout on and off: three training seeds a file",
        "",
        "Written by `benchmarks/fast_dropout.py` (protocol in its docstring): the plain command's SASRec "
        "(settings chosen from the data, `fast_ce` on), leave-one-out, test under full ranking with the "
        f"history excluded; {report['epochs_note']}; one torch thread pinned to one core "
        "(`taskset -c 1`) while another job ran on the other core of the 2-core machine.",
        "",
        "| file | fast_dropout | seed | epochs (best) | NDCG@10 | HR@10 | fit s | load avg |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['file']} | {'on' if r['fast_dropout'] else 'off'} | {r['seed']} | {r['epochs']} "
            f"({r['best_epoch']}) | {r['test']['NDCG@10']:.4f} | {r['test']['HR@10']:.4f} | "
            f"{r['fit_seconds']:.1f} | {r['loadavg_1min']:.1f} |"
        )
    lines += [
        "",
        "Mean ± standard deviation over the seeds; `loss beyond spread`: the off mean minus the on mean "
        "exceeds the larger standard deviation.",
        "",
        "| file | metric | off | on | on - off | loss beyond spread | fit s off / on |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    complete, costs = True, False
    for name in FILES:
        if not any(r["file"] == name for r in rows):
            continue  # not run here (--files)
        if {r["fast_dropout"] for r in rows if r["file"] == name} != {False, True}:
            complete = False
            continue
        s = summary(rows, name)
        for m in METRICS:
            (a, sa), (b, sb) = s["off"][m], s["on"][m]
            lines.append(
                f"| {name} | {m} | {a:.4f} ± {sa:.4f} | {b:.4f} ± {sb:.4f} | {b - a:+.4f} | "
                f"{'yes' if s['loss_beyond_spread'][m] else 'no'} | "
                f"{s['off']['seconds']:.1f} / {s['on']['seconds']:.1f} |"
            )
        complete = complete and s["off"]["n"] == s["on"]["n"] == len(SEEDS)
        costs = costs or any(s["loss_beyond_spread"].values())
    if not complete:
        decision = "incomplete (not every run is in)"
    elif costs:
        decision = "fast_dropout costs quality beyond the seed spread: it stays off by default"
    else:
        decision = "no quality loss beyond the seed spread on any file run: fast_dropout can be the default"
    lines += ["", f"Decision: {decision}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--epochs",
        default="ml-100k=12,ml-latest-small=12",
        help="FILE=EPOCHS for each file: every run of that file trains exactly this many epochs",
    )
    ap.add_argument("--files", default=",".join(FILES), help="which of the files to run, comma-separated")
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    json_path, md_path = Path(args.out + ".json"), Path(args.out + ".md")
    epochs = {k: int(v) for k, v in (x.split("=") for x in args.epochs.split(","))}
    report: dict[str, Any] = (
        json.loads(json_path.read_text())
        if json_path.exists()
        else {"rows": [], "epochs": epochs, "torch": torch.__version__}
    )
    ran = {r["file"] for r in report["rows"]} or set(args.files.split(","))
    report["epochs_note"] = "epochs per file: " + ", ".join(
        f"{k} {v}" for k, v in report["epochs"].items() if k in ran
    )
    if not args.render:
        torch.set_num_threads(1)
        for seed in SEEDS:
            for name, rel in FILES.items():
                if name not in args.files.split(","):
                    continue
                for fast in (False, True):
                    if any(
                        r["file"] == name and r["fast_dropout"] is fast and r["seed"] == seed
                        for r in report["rows"]
                    ):
                        continue
                    row = run_one(name, SHARED / rel, fast, seed, report["epochs"][name])
                    print(
                        f"{name} fast_dropout={fast} seed={seed}: NDCG@10 {row['test']['NDCG@10']:.4f} "
                        f"HR@10 {row['test']['HR@10']:.4f} in {row['fit_seconds']:.1f}s",
                        flush=True,
                    )
                    report["rows"].append(row)
                    json_path.write_text(json.dumps(report, indent=2))
                    md_path.write_text(render(report))
    md_path.write_text(render(report))


if __name__ == "__main__":
    main()
