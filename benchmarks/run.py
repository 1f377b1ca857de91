"""Benchmark runner: one TOML config in, one JSON result out; tables generated from result files.

    python benchmarks/run.py benchmarks/configs/ml-1m/sasrec-bce-paper.toml
    python benchmarks/run.py --table            # regenerate benchmarks/results/README.md
    python benchmarks/run.py --state-dir /scratch/state CONFIG.toml   # resumable training

A config has a ``[run]`` table (name, data, format, model, preset, split, valid_protocol,
protocols, save) and optional ``[model]`` / ``[train]`` tables that override the preset. Data
paths are relative to the repository root. Uses only attnrec's public API.

With ``--state-dir`` the training state (model, optimizer, best weights, early stopping, RNG) is
kept in ``<state-dir>/<run name>/`` after every epoch, and a run started again with the same
state directory resumes exactly where it stopped: a killed run loses at most one epoch, and a
run that ended on its ``time_budget`` continues when the config's budget is raised (the budget
counts the training time of every session). The result's ``train.history`` holds every epoch
of every session, and its fit time is the training loop's clock summed over the sessions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

import tomllib
import torch

import attnrec
from attnrec.data.datasets import load_dataset
from attnrec.data.split import leave_one_out, parse_split, temporal_split
from attnrec.evaluation.protocol import Protocol
from attnrec.evaluation.published import (
    best_full_ranking,
    full_ranking_figures,
    published_metrics,
)
from attnrec.training.loop import STATE_JSON
from provenance import git_sha  # benchmarks/provenance.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "runs"
PROTOCOLS = {
    "full": Protocol(candidates="full"),
    "sampled-uniform": Protocol(candidates="sampled", n_negatives=100, sampler="uniform"),
    "sampled-popularity": Protocol(candidates="sampled", n_negatives=100, sampler="popularity"),
}
RUN_KEYS = {"name", "data", "format", "model", "preset", "split", "valid_users", "valid_protocol", "protocols", "save",
            "notes"}


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "attnrec": attnrec.__version__,
    }


def run(config_path: Path, out_dir: Path = RUNS, progress: bool = False, state_dir: Path | None = None) -> Path:
    """Train and evaluate one configuration; write ``<out_dir>/<name>.json``.

    ``state_dir``: keep a resumable training state in ``state_dir/<name>`` (see the module doc).
    """
    with open(config_path, "rb") as fh:
        cfg = tomllib.load(fh)
    spec = cfg.get("run", {})
    unknown = set(spec) - RUN_KEYS
    if unknown:
        raise SystemExit(f"{config_path}: unknown [run] keys {sorted(unknown)}; valid: {sorted(RUN_KEYS)}")
    name = spec.get("name", config_path.stem)
    data_path = spec["data"]
    if not data_path.startswith("demo"):
        data_path = str((ROOT / data_path).resolve()) if not Path(data_path).is_absolute() else data_path
    t_start, sha = time.perf_counter(), git_sha()  # the code that runs, not HEAD at the end
    data = load_dataset(data_path, format=spec.get("format", "auto"))
    if spec.get("split", "leave-one-out") == "temporal":
        if spec.get("valid_users"):
            raise SystemExit(f"{config_path}: valid_users applies to the leave-one-out split only")
        split = temporal_split(data)
    else:  # valid_users: validate on a sample of users, the rest train on their validation item too
        split = leave_one_out(data, valid_users=int(spec.get("valid_users", 0)))
    rec = attnrec.Recommender(spec["model"], cfg.get("model", {}), cfg.get("train", {}), preset=spec.get("preset"))
    valid_protocol = PROTOCOLS[spec.get("valid_protocol", "full")]
    t_fit = time.perf_counter()
    run_state = state_dir / name if state_dir is not None else None
    resumed = run_state is not None and (run_state / STATE_JSON).exists()
    if resumed:
        logging.info("%s: resuming from the training state in %s", name, run_state)
    rec.fit(data, split, valid_protocol=valid_protocol, progress=progress, state_dir=run_state)
    tr = rec.train_result_
    # A resumed fit's wall time covers one session only; the loop's own clock spans them all.
    fit_seconds = tr.seconds if resumed and tr else time.perf_counter() - t_fit
    evaluations = {}
    for pname in spec.get("protocols", ["full"]):
        res = rec.evaluate(split.test, PROTOCOLS[pname], split=split.describe(), target="test")
        evaluations[pname] = res.to_dict()
        published = published_metrics(rec.name, data.source.sha256, PROTOCOLS[pname], split.name)
        if published:
            evaluations[pname]["published"] = {"paper": published}
        logging.info("%s %s: %s", name, pname, {k: round(v, 4) for k, v in res.metrics.items()})
    result = {
        "name": name,
        "config_file": str(config_path.relative_to(ROOT)) if config_path.is_relative_to(ROOT) else str(config_path),
        "model": rec.name,
        "preset": spec.get("preset"),
        "model_config": attnrec.config.config_to_dict(rec.config),
        "train_config": attnrec.config.config_to_dict(rec.train_config),
        "data": {"name": data.source.name, "path": spec["data"], "sha256": data.source.sha256,
                 "users": data.n_users, "items": data.n_items, "interactions": len(data)},
        "split": split.describe(),
        "valid_protocol": valid_protocol.describe(),
        "evaluations": evaluations,
        "train": tr.to_dict() if tr else None,
        "fit_seconds": fit_seconds,
        "wall_seconds": time.perf_counter() - t_start,
        "seconds_per_epoch": tr.seconds_per_epoch if tr else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "machine": machine(),
        "git_sha": sha,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "notes": spec.get("notes", ""),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{name}.json"
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    if spec.get("save"):
        rec.save(ROOT / "runs" / name)
    return out


# Section 3 of published-results.md: full ranking, history excluded, leave-one-out, same file.
METRICS = ("HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR")
SIDE_BY_SIDE = ("bert4rec", "sasrec")


def split_note(split: str, named: bool = True) -> str:
    """A heading's note for a split other than the default leave-one-out (``named``: say which split)."""
    if split == "leave-one-out":
        return ""
    name = f", split {split}" if named else ""
    base, params = parse_split(split)
    if base == "leave-one-out" and params.get("valid_users"):
        return (f"{name}: validation on {params['valid_users']:.0f} sampled users, every other user also trains on its "
                "validation item (the BERT4Rec code's and the RecTools benchmark's protocol); same test cases")
    return name


def side_by_side(results: list[dict[str, Any]]) -> list[str]:
    """BERT4Rec and SASRec per dataset: each model's run with the best validation score, on test.

    Runs are chosen on validation (the monitored metric under full ranking), never on test, and
    shown under full ranking and the BERT4Rec paper's popularity-sampled protocol, each beside the
    published figures it is comparable with.
    """
    lines = ["## BERT4Rec and SASRec side by side", "",
             "Per dataset and model, the run with the best validation NDCG@10 (full ranking); test figures. "
             "Full: full ranking over all items, history excluded. Pop-sampled: 100 popularity-sampled negatives "
             "(the BERT4Rec paper's protocol).", ""]
    by_data: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in results:
        tr = r.get("train") or {}
        if (r["model"] not in SIDE_BY_SIDE or tr.get("best_value") is None or "full" not in r["evaluations"]
                or r.get("valid_protocol", "").split(",")[0] != "full ranking over all items"
                or r["train_config"].get("monitor") != "NDCG@10"):
            continue
        # Validation scores of different splits are not comparable: each split has its own rows.
        best = by_data.setdefault((r["data"]["sha256"], r.get("split", "leave-one-out")), {})
        if r["model"] not in best or tr["best_value"] > best[r["model"]]["train"]["best_value"]:
            best[r["model"]] = r
    for (sha, split), best in sorted(by_data.items(), key=lambda kv: (next(iter(kv[1].values()))["data"]["name"],
                                                                      kv[0][1])):
        dname = next(iter(best.values()))["data"]["name"]
        lines += [f"### {dname} (sha256 {sha[:12]}...){split_note(split)}", "",
                  "| model | run | valid NDCG@10 | full HR@10 | full NDCG@10 | pop-sampled HR@10 | pop-sampled NDCG@10"
                  " | pop-sampled MRR | epochs | fit time |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for model in SIDE_BY_SIDE:
            if model not in best:
                continue
            r = best[model]
            full, pop = r["evaluations"]["full"]["metrics"], r["evaluations"].get("sampled-popularity", {})
            pm = pop.get("metrics", {})
            cells = [f"{full['HR@10']:.4f}", f"{full['NDCG@10']:.4f}"] + [
                f"{pm[k]:.4f}" if k in pm else "" for k in ("HR@10", "NDCG@10", "MRR")]
            tr = r["train"]
            lines.append(f"| {model} | {r['name']} | {tr['best_value']:.4f} | " + " | ".join(cells)
                         + f" | {tr['epochs']} (best {tr['best_epoch']}) | {r['fit_seconds'] / 60:.1f} min |")
            paper = (pop.get("published") or {}).get("paper", {})
            fr = best_full_ranking(model, sha)
            if paper or fr is not None:
                where = "; ".join(([f"full: {fr.source}"] if fr else []) + (["pop-sampled: BERT4Rec paper"] if paper else []))
                lines.append(
                    f"| {model}, published | {where} | | {'' if fr is None else f'{fr.hr10:.4f}'}"
                    f" | {'' if fr is None else f'{fr.ndcg10:.4f}'} | "
                    + " | ".join(f"{paper[k]:.4f}" if k in paper else "" for k in ("HR@10", "NDCG@10", "MRR"))
                    + " | | |")
        lines.append("")
    return lines if by_data else []


def table(runs_dir: Path = RUNS) -> str:
    """Markdown tables of every result file, grouped by dataset and protocol, with published figures."""
    results = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*.json"))]
    lines = ["# Benchmark results", "",
             "Generated by `python benchmarks/run.py --table` from `benchmarks/results/runs/*.json`; do not edit.",
             "Split: leave-one-out (last item test, second-to-last validation, test history includes it), unless a "
             "heading names another.",
             "Model selection (early stopping) uses the validation split only; numbers below are on test.", ""]
    lines += side_by_side(results)
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for r in results:
        for ev in r["evaluations"].values():
            key = (r["data"]["name"], ev["protocol_text"].split(" (seed")[0], r.get("split", "leave-one-out"))
            groups.setdefault(key, []).append((r, ev))
    for (dname, ptext, split), rows in sorted(groups.items()):
        sha = rows[0][0]["data"]["sha256"][:12]
        lines += [f"## {dname} (sha256 {sha}...), {ptext}{split_note(split, named=False)}", "",
                  "| run | model | " + " | ".join(METRICS) + " | epochs | s/epoch | fit time | peak RSS |",
                  "|---|---|" + "---|" * len(METRICS) + "---|---|---|---|"]
        for r, ev in rows:
            m = ev["metrics"]
            tr = r.get("train") or {}
            lines.append(
                f"| {r['name']} | {r['model']} | " + " | ".join(f"{m.get(k, float('nan')):.4f}" for k in METRICS)
                + f" | {tr.get('epochs', '')} (best {tr.get('best_epoch', '')}) | {r['seconds_per_epoch'] or 0:.1f}"
                f" | {r['fit_seconds'] / 60:.1f} min | {r['peak_rss_mb']:.0f} MB |"
            )
            for src, pub in (ev.get("published") or {}).items():
                lines.append(f"| published: {src} | {r['model']} | "
                             + " | ".join(f"{pub[k]:.4f}" if k in pub else "" for k in METRICS) + " | | | | |")
        published = full_ranking_figures(rows[0][0]["data"]["sha256"]) if "full ranking" in ptext else []
        if published:
            lines.append("Published on this file under full ranking (HR@10 / NDCG@10; not in the table's runs): "
                         + "; ".join(f.text() for f in published) + ".")
        lines.append("")
    lines += ["## Machines and versions", ""]
    for r in results:
        mc = r["machine"]
        lines.append(f"- {r['name']}: {mc['cpu']}, {mc['cores']} cores ({mc['torch_threads']} torch threads), "
                     f"CUDA {mc['cuda']}, torch {mc['torch']}, git {r['git_sha'][:10]}, finished {r['finished']}"
                     + (f". {r['notes']}" if r.get("notes") else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", type=Path, help="TOML run configs")
    parser.add_argument("--table", action="store_true", help="regenerate benchmarks/results/README.md")
    parser.add_argument("--out", type=Path, default=RUNS,
                        help="where result JSON files go; another folder than the default gets its own README.md table")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="keep a resumable training state in STATE_DIR/<run name>; resume from it if present")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    for c in args.configs:
        print(run(c.resolve(), args.out, args.progress, args.state_dir))
    if args.table or args.configs:  # the committed table is only ever made from the committed runs
        readme = RESULTS / "README.md" if args.out.resolve() == RUNS.resolve() else args.out / "README.md"
        readme.parent.mkdir(parents=True, exist_ok=True)
        readme.write_text(table(args.out))


if __name__ == "__main__":
    main()
