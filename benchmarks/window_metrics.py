"""The time-window protocol and the list-level metrics on a real log: popularity against a quickly trained
SASRec.

    # about 3 minutes on one core; writes the results
    taskset -c 1 .venv/bin/python benchmarks/window_metrics.py
    .venv/bin/python benchmarks/window_metrics.py --quick          # smoke run (not saved)

Writes ``benchmarks/results/window_metrics.json`` and a generated ``window_metrics.md``.

Data: MovieLens-100k ``u.data`` (943 users, 1,682 movies, 100,000 ratings, 1997-09 to 1998-04). Split:
the temporal split (time cut-offs at the 80% and 90% quantiles of the timestamps): the models train on
the events before the first cut-off and select their epoch on the validation cases (the first event
after it). Test, two protocols:

* **time-window**: each user with events before the test cut-off ``t`` is asked, at time ``t``, for the
  movies it rates in ``[t, t + 7 days)`` that it had not rated before (RecTools' time-range split with
  ``filter_already_seen``): several targets per user, full ranking over every movie, history excluded;
* **full**: the temporal split's own single target (the user's first event at or after ``t``, requested
  at that event's time), where Recall@k equals HR@k, Precision@k is HR@k / k and MAP@k is MRR cut at k.

List metrics are of the top-10 lists those users are shown: coverage of the catalog, novelty (mean
``-log2 p(i)`` with ``p`` the add-one smoothed share of the training ratings), intra-list diversity over
the 19 genre flags of ``u.item`` (the same vectors for both models), and the mean training popularity
(ARP). Models: ``pop`` and SASRec's ``demo`` preset (full softmax, d 64, window 50) under a training budget.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# ../shared/data from the project root; a worktree one level deeper finds it at /work/shared/data
DATA = next(
    (
        p
        for p in (ROOT.parent / "shared" / "data" / "ml-100k", Path("/work/shared/data/ml-100k"))
        if p.exists()
    ),
    ROOT.parent / "shared" / "data" / "ml-100k",
)
sys.path.insert(0, str(ROOT / "benchmarks"))

FAMILIES = ("HR", "NDCG", "MRR", "Recall", "Precision", "MAP", "Coverage", "Novelty", "Diversity", "ARP")
COLUMNS = (
    "HR@10",
    "NDCG@10",
    "MRR",
    "Recall@10",
    "Precision@10",
    "MAP@10",
    "Coverage@10",
    "Novelty@10",
    "Diversity@10",
    "ARP@10",
)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from attnrec.data.datasets import load_dataset
    from attnrec.data.named_features import ml100k_items
    from attnrec.data.split import EvalSet, temporal_split
    from attnrec.evaluation.list_metrics import feature_rows, training_counts
    from attnrec.evaluation.protocol import Protocol, evaluate, protocol_by_name
    from attnrec.evaluation.window import TargetSets, parse_window, split_window_cases
    from attnrec.models.item_context import ItemFeatures
    from attnrec.recommend import Recommender
    from provenance import git_sha

    torch.set_num_threads(1)
    data = load_dataset(str(DATA / "u.data"))
    split = temporal_split(data)
    genres = ItemFeatures.from_table(ml100k_items(DATA / "u.item", []), data.items, ["genres"])
    counts, vectors = training_counts(split.train), feature_rows(genres.aligned)
    window = parse_window(args.window)
    protocols: dict[str, tuple[Protocol, EvalSet | TargetSets]] = {
        "time-window": (
            protocol_by_name("time-window", window=window),
            split_window_cases(data, split, window),
        ),
        "full": (protocol_by_name("full"), split.test),
    }
    models: dict[str, Any] = {
        "pop": Recommender("pop"),
        "sasrec (demo)": Recommender(
            "sasrec",
            preset="demo",
            train={"threads": 1, "time_budget": args.budget, "max_epochs": args.epochs},
        ),
    }
    rows = []
    for label, rec in models.items():
        start = time.perf_counter()
        rec.fit(data, split, progress=False)
        fit = time.perf_counter() - start
        tr = rec.train_result_
        for pname, (proto, cases) in protocols.items():
            per_case = float(np.mean(cases.targets.lengths())) if isinstance(cases, TargetSets) else 1.0
            res = evaluate(
                rec.score_histories,
                cases,
                proto,
                metrics=FAMILIES,
                data=data.source,
                split=split.describe(),
                popularity=rec.popularity_,
                train_counts=counts,
                item_vectors=vectors,
            )
            rows.append(
                {
                    "model": label,
                    "protocol": pname,
                    "protocol_text": res.describe(),
                    "n_cases": res.n_cases,
                    "targets_per_case": per_case,
                    "metrics": res.metrics,
                    "standard_errors": res.standard_errors,
                    "fit_seconds": round(fit, 1),
                    "epochs": None if tr is None else tr.epochs,
                    "best_epoch": None if tr is None else tr.best_epoch,
                    "stopped": None if tr is None else tr.stopped,
                }
            )
            print(
                f"{label} / {pname}: {res.n_cases} cases, "
                + ", ".join(f"{k} {res.metrics[k]:.4f}" for k in COLUMNS)
            )
    return {
        "command": "taskset -c 1 .venv/bin/python benchmarks/window_metrics.py"
        + (f" --budget {args.budget:g}" if args.budget != 150 else ""),
        "data": {"name": data.source.name, "sha256": data.source.sha256, "split": split.describe()},
        "window": args.window,
        "rows": rows,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores_used": len(os.sched_getaffinity(0)),
            "torch": torch.__version__,
        },
        "git_sha": git_sha(),
        "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(r: dict[str, Any]) -> str:
    """The results table of a record (generated; checked byte for byte by
    tests/benchmarks/test_rerender.py)."""
    d = r["data"]
    lines = [
        "# The time-window protocol and list-level metrics on MovieLens-100k",
        "",
        f"Generated by `{r['command']}` from `window_metrics.json`; do not edit. "
        f"Data `{d['name']}` (sha256 {d['sha256'][:12]}), split {d['split']}; git {r['git_sha'][:10]}, "
        f"{r['machine']['cores_used']} CPU core(s), torch {r['machine']['torch']}, {r['finished']}.",
        "",
        f"- **time-window**: every movie a user rates in the {r['window']} after the test cut-off and had "
        "not rated before, all requested at the cut-off (RecTools' time-range split, `filter_already_seen`); "
        "full ranking over all movies, history excluded.",
        "- **full**: the temporal split's single target (the first rating at or after the cut-off, "
        "requested at its own time): Recall@10 = HR@10, Precision@10 = HR@10 / 10, MAP@10 = MRR cut at 10.",
        "- List metrics of the top-10 lists shown to the same users: Coverage (share of the 1,682 movies), "
        "Novelty (mean -log2 of the add-one smoothed training share), Diversity (intra-list 1 - cosine over "
        "the 19 genre flags, the same vectors for both models), ARP (mean training ratings of the listed "
        "movies).",
        "",
        "| protocol | model | users | targets/user | " + " | ".join(COLUMNS) + " | fit | epochs (best) |",
        "|---|---|---|---|" + "---|" * (len(COLUMNS) + 2),
    ]
    for row in r["rows"]:
        m, se = row["metrics"], row["standard_errors"]
        cells = [f"{m[k]:.4f} ± {se[k]:.4f}" if k in se else f"{m[k]:.4f}" for k in COLUMNS]
        epochs = "" if row["epochs"] is None else f"{row['epochs']} ({row['best_epoch']})"
        lines.append(
            f"| {row['protocol']} | {row['model']} | {row['n_cases']} | {row['targets_per_case']:.1f} | "
            + " | ".join(cells)
            + f" | {row['fit_seconds']:.0f} s | {epochs} |"
        )
    lines += [
        "",
        "± one standard error over the users (coverage, a property of all lists together, has none).",
    ]
    stops = {row["model"]: row["stopped"] for row in r["rows"] if row["epochs"] and row["epochs"] > 1}
    lines += [f"{model} stopped: {why}." for model, why in stops.items()] + [""]
    lines += ["Protocols as recorded:", ""]
    lines += [f"- {row['model']}: {row['protocol_text']}" for row in r["rows"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", default="7d")
    parser.add_argument("--budget", type=float, default=150.0, help="SASRec's training budget in seconds")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="2 epochs, nothing saved")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.budget = 2, 20.0
    record = run(args)
    if args.quick:
        print(markdown(record))
        return
    (RESULTS / "window_metrics.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / "window_metrics.md").write_text(markdown(record))
    print(f"wrote {RESULTS / 'window_metrics.md'}")


if __name__ == "__main__":
    main()
