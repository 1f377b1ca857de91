"""The BERT4Rec paper's studies (Sun et al. 2019, sections 4.5-4.7), one command each.

    python benchmarks/studies.py hidden    --data ml-1m   # hidden size d in 16..256
    python benchmarks/studies.py mask      --data ml-1m   # mask proportion p in 0.1..0.9
    python benchmarks/studies.py maxlen    --data ml-1m   # maximum length N in 10..400
    python benchmarks/studies.py positions --data ml-1m   # with / without positional embeddings
    python benchmarks/studies.py render benchmarks/results/studies/*-demo.json   # redraw

Every point trains BERT4Rec from the data's preset (``ml-1m``, ``beauty`` or ``demo``; ``--preset``
to choose) with one setting changed, selects the epoch on validation NDCG@10 (full ranking) and
reports the test split under full ranking and under the paper's protocol (100 negatives drawn by
popularity). Results go to ``<out>/<study>-<data>.{json,md,png}``.

The full grids take hours on a CPU. ``--values``, ``--max-epochs`` and ``--time-budget`` (seconds
of training per point) shorten a study, ``--short`` picks a small default; a shortened run says so
on the console and in every file it writes. ``--set KEY=VALUE`` changes a model or training
setting for every point, with the rules of ``attnrec train --set``. Every point trains through
attnrec's one experiment runner and its table comes from the one renderer (:mod:`attnrec.experiments`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnrec import Interactions, get_spec
from attnrec.config import resolve_overrides
from attnrec.data import DataSource, from_columns
from attnrec.data.datasets import load_dataset
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL, PAPER_BERT4REC
from attnrec.experiments.runner import RunRequest, count_parameters, run_one
from attnrec.experiments.tables import study_markdown
from attnrec.training.train_config import TrainConfig
from provenance import git_sha  # benchmarks/provenance.py, beside this script

STUDIES: dict[str, dict[str, Any]] = {
    "hidden": {
        "key": "hidden",
        "values": [16, 32, 64, 128, 256],
        "short": [16, 64],
        "label": "hidden size d",
        "log": True,
    },
    "mask": {
        "key": "mask_prob",
        "values": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
        "short": [0.2, 0.6],
        "label": "mask proportion p",
        "log": False,
    },
    "maxlen": {
        "key": "max_len",
        "values": [10, 20, 30, 40, 50, 100, 200, 300, 400],
        "short": [10, 50],
        "label": "maximum length N",
        "log": True,
    },
    "positions": {
        "key": "use_positions",
        "values": [True, False],
        "short": [True, False],
        "label": "positional embedding",
        "log": False,
    },
}
SHORT_EPOCHS = 10  # an epoch cap, not a time budget: points stay comparable on a shared machine


def sample_users(data: Interactions, n: int, seed: int = 0) -> Interactions:
    """The interactions of ``n`` users drawn with ``seed`` (a smaller log for a quick check)."""
    if n >= data.n_users:
        return data
    keep = np.random.default_rng([seed, 77]).choice(data.n_users, n, replace=False)
    rows = np.isin(data.user, keep)
    src = data.source
    name = f"{src.name.split('.')[0]}-{n}users"
    return from_columns(
        data.users.to_external(data.user[rows]),
        data.items.to_external(data.item[rows]),
        None if data.timestamp is None else data.timestamp[rows],
        source=DataSource(name, src.path, src.format, ""),
        item_titles=data.item_titles,
    )


def default_preset(data: Interactions, spec: str) -> str:
    presets = get_spec("bert4rec").presets
    for name in (spec, data.source.name.split(".")[0], "demo" if data.source.format == "demo" else ""):
        if name in presets:
            return name
    return "ml-1m"


def run_study(
    study: str,
    spec: str,
    *,
    values: list[Any] | None = None,
    preset: str | None = None,
    max_epochs: int | None = None,
    time_budget: float = 0.0,
    users: int = 0,
    seed: int = 0,
    out: Path = Path("."),
    extra: dict[str, Any] | None = None,
    threads: int = 0,
    train_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train one BERT4Rec per value of the study's setting and write the table, plot and JSON.

    ``extra`` and ``train_extra`` override the preset's model and training settings for every point.
    """
    st = STUDIES[study]
    full_data = load_dataset(spec)
    preset = preset or default_preset(full_data, spec)
    data = sample_users(full_data, users, seed) if users else full_data
    base = get_spec("bert4rec").presets[preset]
    model_base, train_base = (
        dict(base["model"]) | dict(extra or {}),
        dict(base["train"]) | dict(train_extra or {}),
    )
    chosen = list(values) if values is not None else list(st["values"])
    notes = []
    if chosen != st["values"]:
        notes.append(f"values {chosen} of the paper's {st['values']}")
    if max_epochs is not None and max_epochs < train_base.get("max_epochs", 200):
        notes.append(f"at most {max_epochs} epochs per point (preset: {train_base.get('max_epochs', 200)})")
        train_base["max_epochs"] = max_epochs
    if data is not full_data:
        notes.append(f"{data.n_users} of {full_data.n_users} users (sample, seed {seed})")
    if time_budget > 0:
        notes.append(f"training time budget {time_budget:.0f} s per point")
        train_base["time_budget"] = time_budget
    shortened = "SHORTENED: " + "; ".join(notes) if notes else ""
    if shortened:
        print(shortened, flush=True)
    train_base["seed"] = seed
    if threads:  # torch's default takes every core, which oversubscribes a machine running other jobs
        train_base["threads"] = threads
    split = leave_one_out(data)
    rows = []
    for v in chosen:
        cfg = model_base | {st["key"]: v}
        if study == "maxlen" and model_base.get("sliding_step"):  # keep the authors' step / N ratio
            cfg["sliding_step"] = max(
                1, round(v * model_base["sliding_step"] / model_base.get("max_len", 200))
            )
        t0 = time.perf_counter()
        outcome = run_one(
            RunRequest("bert4rec", None, cfg, train_base, FULL, (FULL, PAPER_BERT4REC)), data, split
        )
        tr = outcome.recommender.train_result_
        assert tr is not None
        full, sampled = outcome.results
        row = {
            "value": v,
            "full": full.metrics,
            "sampled": sampled.metrics,
            "epochs": tr.epochs,
            "best_epoch": tr.best_epoch,
            "train_seconds": round(tr.seconds, 1),
            "stopped": tr.stopped,
            "wall_seconds": round(time.perf_counter() - t0, 1),
            "n_parameters": count_parameters(outcome.recommender),
        }
        rows.append(row)
        print(
            f"{st['key']}={v}: full NDCG@10 {full.metrics['NDCG@10']:.4f} HR@10 {full.metrics['HR@10']:.4f} "
            f"| pop-sampled NDCG@10 {sampled.metrics['NDCG@10']:.4f} HR@10 {sampled.metrics['HR@10']:.4f} | "
            f"{tr.epochs} epochs, {tr.seconds:.0f}s ({tr.stopped})",
            flush=True,
        )
    capped = budget_note(st["key"], rows, train_base)
    if capped:
        shortened = (shortened + "; " if shortened else "SHORTENED: ") + capped
        print(shortened, flush=True)
    result = {
        "study": study,
        "setting": st["key"],
        "label": st["label"],
        "data": dataclasses.asdict(data.source),
        "split": split.name,
        "preset": preset,
        "model_config": model_base,
        "train_config": train_base,
        "protocols": {"full": FULL.describe(), "sampled": PAPER_BERT4REC.describe()},
        "shortened": shortened,
        "rows": rows,
        "git": git_sha(),
        "machine": platform.platform(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
    }
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{study}-{data.source.name.split('.')[0]}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    stem.with_suffix(".md").write_text(study_markdown(result))
    written = [stem.with_suffix(".json"), stem.with_suffix(".md")]
    try:
        written.append(plot(result, stem.with_suffix(".png")))
    except ImportError:
        print("matplotlib is missing (pip install 'attnrec[plot]'): no plot written")
    for p in written:
        print(f"wrote {p}")
    return result


def budget_note(key: str, rows: list[dict[str, Any]], train: dict[str, Any]) -> str:
    """Which points the training time budget cut short (the preset's own budget can, too)."""
    capped = [row["value"] for row in rows if str(row["stopped"]).startswith("time budget")]
    if not capped:
        return ""
    return (
        f"{key} = {', '.join(map(str, capped))} stopped on the {train.get('time_budget', 0):.0f} s training "
        "time budget, not on validation (not converged)"
    )


def render(path: Path) -> list[Path]:
    """Rewrite a study's table and plot from its JSON file (and mark points the budget cut short)."""
    r = json.loads(path.read_text())
    note = budget_note(r["setting"], r["rows"], r["train_config"])
    if note and note not in r["shortened"]:
        r["shortened"] = (r["shortened"] + "; " if r["shortened"] else "SHORTENED: ") + note
        path.write_text(json.dumps(r, indent=2, default=str) + "\n")
    path.with_suffix(".md").write_text(study_markdown(r))
    return [path, path.with_suffix(".md"), plot(r, path.with_suffix(".png"))]


def plot(r: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    labels = [str(row["value"]) for row in r["rows"]]
    numeric = r["study"] != "positions"
    for ax, proto in zip(axes, ("full", "sampled"), strict=True):
        for m in ("HR@10", "NDCG@10"):
            ys = [row[proto][m] for row in r["rows"]]
            if numeric:
                ax.plot([row["value"] for row in r["rows"]], ys, marker="o", label=m)
            else:
                ax.bar([f"{lab}\n{m}" for lab in labels], ys, label=m)
        if numeric and STUDIES[r["study"]]["log"]:
            ax.set_xscale("log", base=2)
        ax.set_title("full ranking" if proto == "full" else "100 popularity-sampled negatives", fontsize=9)
        ax.set_xlabel(r["label"], fontsize=8)
        ax.legend(fontsize=7)
    title = f"BERT4Rec on {r['data']['name']}: {r['label']}"
    if r["shortened"]:
        title += " (SHORTENED budget)"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        return float(text)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "study",
        choices=[*STUDIES, "all", "render"],
        help="a study, all four, or render: rewrite the table and plot of the study JSON files that follow",
    )
    p.add_argument("files", nargs="*", type=Path, metavar="FILE", help="render only: study JSON files")
    p.add_argument("--data", default="demo", help="demo, a named dataset (ml-1m, beauty) or a file")
    p.add_argument("--preset", help="BERT4Rec preset to start from [default: the data's]")
    p.add_argument("--values", help="comma-separated subset of the study's values (shortens it)")
    p.add_argument("--max-epochs", type=int, help="cap on epochs per point (shortens it)")
    p.add_argument(
        "--time-budget", type=float, default=0.0, help="seconds of training per point (shortens it)"
    )
    p.add_argument(
        "--users", type=int, default=0, help="train and test on a sample of this many users (shortens it)"
    )
    p.add_argument(
        "--short", action="store_true", help=f"a quick check: two values, <= {SHORT_EPOCHS} epochs per point"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="other settings for every point, as attnrec train's --set: model.KEY, train.KEY "
        "or a key only one of the two has",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--threads", type=int, default=0, help="torch threads for training [default: torch's, all cores]"
    )
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/studies"))
    a = p.parse_args(argv)
    if a.study == "render":
        if not a.files:
            p.error("render needs the study JSON files to redraw")
        for f in a.files:
            print("wrote", *render(f))
        return
    if a.files:
        p.error(
            f"unexpected arguments after {a.study!r}: {' '.join(map(str, a.files))} (only render takes files)"
        )
    # The CLI's own rules: model.KEY / train.KEY, or a bare key that only one of the two configs has.
    over = resolve_overrides({"model": get_spec("bert4rec").config_cls, "train": TrainConfig}, a.set)
    extra, train_extra = ({k: _value(v) for k, v in over[section].items()} for section in ("model", "train"))
    for study in STUDIES if a.study == "all" else [a.study]:
        values = (
            [_value(v) for v in a.values.split(",")]
            if a.values
            else (STUDIES[study]["short"] if a.short else None)
        )
        max_epochs = a.max_epochs or (SHORT_EPOCHS if a.short else None)
        print(f"== study {study} on {a.data}", flush=True)
        run_study(
            study,
            a.data,
            values=values,
            preset=a.preset,
            max_epochs=max_epochs,
            time_budget=a.time_budget,
            users=a.users,
            seed=a.seed,
            out=a.out,
            extra=extra,
            threads=a.threads,
            train_extra=train_extra,
        )


if __name__ == "__main__":
    main()
