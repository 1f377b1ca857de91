"""Faithfulness of per-recommendation attributions: deletion and insertion curves (issue #22).

    python benchmarks/faithfulness.py --state-dir runs/faithfulness-state   # all cells of the config
    python benchmarks/faithfulness.py --quick --config my.toml              # a few users, smoke check
    python benchmarks/faithfulness.py --table                               # redraw .md/.png from .json

For every saved model the config lists (``[[models]]``: dataset, model label, model directory) and a
seeded sample of users with at least ``min_history`` stored history events, the target is the
model's top-1 item (history excluded; ``targets = 3`` explains the top 3). Each method of
:func:`attnrec.evaluation.attribution.attribute` ranks the events of the model's window, and so do
two baselines: ``random`` (a permutation seeded by ``(seed, user, target rank)``) and ``recency``
(newest first). Then, with ``s_m`` the target's score after the change and ``s_ref`` the mean score
of the candidates (the catalogue minus the user's full history) for the full history:

* deletion: the history without its ``m`` top-ranked events (an older event outside the window slides
  in, as serving would see it), at shares of the window ``W``: ``m = ceil(x * W)`` for ``x`` in
  ``deletion`` (0.05 ... 0.5; at most ``W - 1``, one event stays), so a 200-event ML-1M window and a
  6-event Beauty history are compared at the same shares. Normalised score ``f(x) = (s_m - s_ref) /
  (s_full - s_ref)``: 1 = unchanged, 0 = the target is worth an average candidate. Deletion AUC =
  trapezoid area under ``(0, 1), (x, f(x))`` divided by the span of ``x`` (lower = more faithful).
  Besides the curve: top-1 / top-3 drop = ``1 - f`` after removing exactly the 1 / 3 top-ranked
  events, and the target's rank among the candidates after removing the top 3.
* insertion: the history is only the ``m = ceil(x * W)`` top-ranked events (``x`` in ``insertion``),
  in chronological order; ``g(x)`` normalised as ``f``; insertion AUC = trapezoid area over the
  ``x`` divided by their span (higher = more faithful).

An integer step in ``deletion`` / ``insertion`` is an absolute count instead of a share.
All variants of one user (every method, target and ``m``) are scored in one batched forward pass.
Means over users come with a 95% percentile-bootstrap interval over users (a user's targets are
averaged first). A method the model cannot support (e.g. integrated gradients without the
``EmbeddingInputs`` capability) is reported as ``n/a`` with the reason.

``--state-dir`` keeps every cell's finished users (``<dataset>--<model>.json``): a cut-off run
continues where it stopped; ``--time-budget`` seconds stops cleanly between users and writes what is
finished (unfinished cells are marked partial). ``--table`` regenerates the markdown and the plot
from the JSON (:mod:`faithfulness_report`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.evaluation.attribution import METHODS, AttributionError, attribute
from attnrec.recommend import Recommender, load
from faithfulness_report import markdown, plot  # benchmarks/faithfulness_report.py, beside this script
from provenance import git_sha  # benchmarks/provenance.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CONFIG = ROOT / "benchmarks" / "configs" / "faithfulness.toml"
BASELINES = ("random", "recency")
PROTOCOL: dict[str, Any] = {
    "users": 200,
    "min_history": 5,
    "seed": 0,
    "targets": 1,
    "deletion": [0.05, 0.1, 0.2, 0.3, 0.5],
    "insertion": [0.05, 0.1, 0.2, 0.3, 0.5],
    "head": 0.1,
    "steps": 32,
    "bootstrap": 1000,
    "methods": list(METHODS),
    "baselines": list(BASELINES),
    "default_method": "greedy",
}
SUMMARY_ONLY = frozenset({"head", "bootstrap", "default_method"})
"""Protocol keys that only change the summary: a state made under other values is still valid."""
QUICK: dict[str, int] = {"users": 8, "steps": 8, "bootstrap": 200}
# rows the model encodes per explanation (W = window length): what attribution.py does per method
PASSES = {
    "attention": "2 passes, 2 rows",
    "rollout": "2 passes, 2 rows",
    "occlusion": "2 passes, 1 + W rows",
    "greedy": "~log2(W) + 1 passes, <= W rows each",
    "integrated_gradients": "2 passes, steps + 2 rows (K backward)",
    "random": "0",
    "recency": "0",
}


# -- pure protocol functions (tested in tests/benchmarks/test_faithfulness.py) -----------------------
def random_order(events: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The window's history positions ``events`` in a random order drawn from ``rng``."""
    return rng.permutation(np.asarray(events))


def recency_order(events: np.ndarray) -> np.ndarray:
    """The window's history positions, newest first."""
    return np.sort(np.asarray(events))[::-1]


def counts(steps: Sequence[float], window: int) -> list[int]:
    """Events to remove/keep per curve step: an int is a count, a float in (0, 1) a share of the window
    ``W`` (``ceil(share * W)``, at least 1), so long and short windows are compared at the same shares."""
    return [int(m) if float(m).is_integer() and m >= 1 else max(1, int(np.ceil(m * window))) for m in steps]


TOP = (1, 3)
"""The absolute removals reported besides the curve: the top-1 and top-3 ranked events."""


def deletion_histories(history: np.ndarray, order: np.ndarray, ms: Sequence[int]) -> list[np.ndarray]:
    """For each ``m``: ``history`` without the first ``min(m, W - 1)`` positions of ``order``
    (``W = len(order)``)."""
    cap = len(order) - 1  # one event stays: an empty history has no score
    return [np.delete(history, order[: min(m, cap)]) for m in ms]


def insertion_histories(history: np.ndarray, order: np.ndarray, ms: Sequence[int]) -> list[np.ndarray]:
    """For each ``m``: only the first ``min(m, W)`` positions of ``order``, in chronological order."""
    return [history[np.sort(order[: min(m, len(order))])] for m in ms]


def normalised(scores: np.ndarray, full: float, reference: float) -> np.ndarray:
    """``(s - s_ref) / (s_full - s_ref)``: 1 = the full history's score, 0 = an average candidate's."""
    return (np.asarray(scores, dtype=np.float64) - reference) / (full - reference)


def auc(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Trapezoid area under ``(xs, ys)`` divided by the span of ``xs`` (the curve's mean height)."""
    x, y = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    return float(((y[1:] + y[:-1]) * np.diff(x)).sum() / 2 / (x[-1] - x[0]))


def deletion_auc(ms: Sequence[int], curve: Sequence[float]) -> float:
    """Deletion AUC of the normalised curve at ``ms``, with ``f(0) = 1`` prepended."""
    return auc([0, *ms], [1.0, *curve])


def rank_of(scores: np.ndarray, target: int, candidates: np.ndarray) -> int:
    """1 + the number of ``candidates`` (a boolean mask over items) scored strictly above ``target``."""
    return 1 + int((scores[candidates] > scores[target]).sum())


def bootstrap(values: np.ndarray, rng: np.random.Generator, n: int, level: float = 0.95) -> dict[str, float]:
    """Mean, standard error and percentile-bootstrap interval (``n`` resamples) of ``values``."""
    v = np.asarray(values, dtype=np.float64)
    means = v[rng.integers(0, len(v), size=(n, len(v)))].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    se = float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0
    return {"mean": float(v.mean()), "se": se, "lo": float(lo), "hi": float(hi)}


def sample_users(histories: Sequences, n: int, min_history: int, seed: int) -> list[int]:
    """``n`` users (sorted) with at least ``min_history`` events, drawn with ``seed``; all if fewer."""
    eligible = np.flatnonzero(np.diff(histories.offsets) >= min_history)
    rng = np.random.default_rng([seed, 1])
    chosen = eligible if len(eligible) <= n else rng.choice(eligible, n, replace=False)
    return sorted(int(u) for u in chosen)


# -- one user -----------------------------------------------------------------------------------------
def _rows(histories: list[np.ndarray], n_items: int) -> Sequences:
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in histories])]).astype(np.int64)
    return Sequences(offsets, np.concatenate(histories).astype(np.int64), n_items)


def _score(rec: Recommender, user: int, histories: list[np.ndarray]) -> np.ndarray:
    """Scores ``(B, I + 1)`` of ``histories`` for ``user``, in one batched forward pass."""
    assert rec.items_ is not None
    users = np.full(len(histories), user)
    return rec.score_histories(users, _rows(histories, len(rec.items_))).double().cpu().numpy()


def _window(rec: Recommender, user: int, history: np.ndarray) -> np.ndarray:
    """History positions of the events the model reads (its input tokens that are items)."""
    assert rec.items_ is not None
    seq = rec.core.score_inputs(np.array([user]), _rows([history], len(rec.items_)))["seq"][0].numpy()
    w = int(((seq > 0) & (seq <= len(rec.items_))).sum())
    return np.arange(len(history) - w, len(history))


def _orders(
    rec: Recommender,
    user: int,
    history: np.ndarray,
    events: np.ndarray,
    targets: np.ndarray,
    p: dict[str, Any],
    na: dict[str, str],
) -> tuple[dict[str, list[np.ndarray]], dict[str, float]]:
    """Per method: the ranked history positions (of the window ``events``) per target, and seconds per
    explanation."""
    assert rec.items_ is not None
    orders: dict[str, list[np.ndarray]] = {}
    seconds: dict[str, float] = {}
    for method in p["methods"]:
        if method in na:
            continue
        try:
            a = attribute(
                rec.core,
                history,
                targets,
                n_items=len(rec.items_),
                method=method,
                user=user,
                steps=p["steps"],
                device=rec.device,
            )
        except AttributionError as e:  # a capability the model lacks: the same for every user
            na[method] = str(e)
            continue
        orders[method] = [a.events[a.ranking(k)] for k in range(len(targets))]
        seconds[method] = a.seconds / len(targets)
    for method in p["baselines"]:
        start = time.perf_counter()
        if method == "random":
            orders[method] = [
                random_order(events, np.random.default_rng([p["seed"], user, k])) for k in range(len(targets))
            ]
        else:
            orders[method] = [recency_order(events)] * len(targets)
        seconds[method] = (time.perf_counter() - start) / len(targets)
    return orders, seconds


def evaluate_user(rec: Recommender, user: int, p: dict[str, Any], na: dict[str, str]) -> dict[str, Any]:
    """Deletion and insertion curves of every method for ``user``'s top ``p["targets"]`` items."""
    assert rec.histories_ is not None
    h = rec.histories_
    history = h.items[h.offsets[user] : h.offsets[user + 1]].astype(np.int64)
    full = _score(rec, user, [history])[0]
    candidates = np.ones(len(full), dtype=bool)
    candidates[0] = False  # padding
    candidates[history] = False
    masked = np.where(candidates, full, -np.inf)
    targets = np.argsort(-masked, kind="stable")[: p["targets"]]
    reference = float(full[candidates].mean())
    events = _window(rec, user, history)
    orders, seconds = _orders(rec, user, history, events, targets, p, na)
    dm, im = counts(p["deletion"], len(events)), counts(p["insertion"], len(events))
    dt = [*TOP, *dm]  # top-1 / top-3 first, then the curve's steps
    variants = [
        v
        for method in orders
        for order in orders[method]
        for v in deletion_histories(history, order, dt) + insertion_histories(history, order, im)
    ]
    scores = _score(rec, user, variants)  # one batched forward pass for every method, target and m
    out: dict[str, Any] = {"user": user, "window": len(events), "methods": {}}
    row = 0
    for method, per_target in orders.items():
        rec_m: dict[str, list[Any]] = {
            "deletion": [],
            "insertion": [],
            "top": [],
            "deletion_rank": [],
            "raw_drop": [],
        }
        for k, _ in enumerate(per_target):
            t = int(targets[k])
            top, d = scores[row : row + len(TOP)], scores[row + len(TOP) : row + len(dt)]
            i = scores[row + len(dt) : row + len(dt) + len(im)]
            row += len(dt) + len(im)
            rec_m["top"].append(normalised(top[:, t], full[t], reference).tolist())
            rec_m["deletion"].append(normalised(d[:, t], full[t], reference).tolist())
            rec_m["insertion"].append(normalised(i[:, t], full[t], reference).tolist())
            rec_m["deletion_rank"].append([rank_of(s, t, candidates) for s in top])
            rec_m["raw_drop"].append((full[t] - top[:, t]).tolist())
        out["methods"][method] = rec_m | {"seconds": seconds[method]}
    return out


# -- summaries ----------------------------------------------------------------------------------------
def summarise(records: list[dict[str, Any]], p: dict[str, Any], na: dict[str, str]) -> dict[str, Any]:
    """Per method: means over users (targets averaged per user first) with bootstrap intervals."""
    dm, im = p["deletion"], p["insertion"]
    top1, top3 = TOP.index(1), TOP.index(3)
    out: dict[str, Any] = {m: {"status": "n/a", "reason": r} for m, r in na.items()}
    head = [x for x in dm if x <= p["head"]]  # the curve's head: the few events an explanation names
    users: dict[str, list[int]] = {}
    kept: dict[str, dict[str, np.ndarray]] = {}
    for method in [*p["methods"], *p["baselines"]]:
        rs = [r["methods"][method] for r in records if method in r["methods"]]
        if method in na or not rs:
            continue
        rng = np.random.default_rng([p["seed"], 2])  # the same resamples for every method
        dele = np.array([np.mean(r["deletion"], 0) for r in rs])  # (U, len(dm))
        ins = np.array([np.mean(r["insertion"], 0) for r in rs])
        tops = np.array([np.mean(r["top"], 0) for r in rs])  # (U, len(TOP))
        ranks = np.array([np.mean(r["deletion_rank"], 0) for r in rs])
        per_user = {
            "deletion_auc": np.array([deletion_auc(dm, c) for c in dele]),
            "deletion_auc_head": np.array([deletion_auc(head, c[: len(head)]) for c in dele]),
            "insertion_auc": np.array([auc(im, c) for c in ins]),
            "top1_drop": 1 - tops[:, top1],
            "top3_drop": 1 - tops[:, top3],
            "rank_after_top3": ranks[:, top3],
            "raw_top1_drop": np.array([np.mean(r["raw_drop"], 0)[top1] for r in rs]),
            "ms_per_explanation": 1000 * np.array([r["seconds"] for r in rs]),
        }
        out[method] = {k: bootstrap(v, rng, p["bootstrap"]) for k, v in per_user.items()}
        out[method] |= {
            "status": "ok",
            "users": len(rs),
            "median_rank_after_top3": float(np.median(ranks[:, top3])),
            "deletion_curve": dele.mean(0).round(6).tolist(),
            "insertion_curve": ins.mean(0).round(6).tolist(),
            "forward_passes": PASSES.get(method, ""),
        }
        users[method] = [r["user"] for r in records if method in r["methods"]]
        kept[method] = per_user
    default = p["default_method"]
    for base in p["baselines"]:  # paired: the same users, so their per-user differences are compared
        if default in kept and base in kept and users[default] == users[base]:
            rng = np.random.default_rng([p["seed"], 3])
            out[default].setdefault("paired", {})[base] = {
                k: bootstrap(kept[default][k] - kept[base][k], rng, p["bootstrap"])
                for k in ("deletion_auc", "deletion_auc_head", "insertion_auc")
            }
    return out


# -- the run ------------------------------------------------------------------------------------------
def read_config(path: Path, quick: bool) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The protocol (defaults, the config's ``[protocol]``, then ``--quick``'s cuts) and the model list."""
    cfg = tomllib.loads(path.read_text())
    p = PROTOCOL | dict(cfg.get("protocol", {}))
    if quick:
        p |= {k: min(v, p[k]) for k, v in QUICK.items()} | {"quick": True}
    return p, list(cfg["models"])


def _cell_state(state_dir: Path | None, key: str, p: dict[str, Any]) -> dict[str, Any]:
    path = None if state_dir is None else state_dir / f"{key}.json"
    if path is not None and path.exists():
        st = json.loads(path.read_text())
        same = {k: v for k, v in st["protocol"].items() if k not in SUMMARY_ONLY}
        if same != {k: v for k, v in p.items() if k not in SUMMARY_ONLY}:
            raise SystemExit(f"error: {path} was made with another protocol; use another --state-dir")
        return dict(st)
    return {"protocol": p, "records": [], "na": {}, "done": False}


def run_cell(
    entry: dict[str, str], p: dict[str, Any], state_dir: Path | None, deadline: float, device: str
) -> dict[str, Any]:
    """One (dataset, model) cell, resumed from ``state_dir`` and stopped at ``deadline`` (``time.time()``)."""
    key = f"{entry['data']}--{entry['model']}"
    st = _cell_state(state_dir, key, p)
    path = Path(entry["path"]) if Path(entry["path"]).is_absolute() else ROOT / entry["path"]
    rec = load(path, device)
    assert isinstance(rec, Recommender) and rec.histories_ is not None and rec.items_ is not None
    users = sample_users(rec.histories_, p["users"], p["min_history"], p["seed"])
    done = {r["user"] for r in st["records"]}
    for u in users:
        if u in done:
            continue
        if time.time() > deadline:
            print(f"{key}: time budget reached after {len(st['records'])} of {len(users)} users", flush=True)
            break
        st["records"].append(evaluate_user(rec, u, p, st["na"]))
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            (state_dir / f"{key}.json").write_text(json.dumps(st))
    st["done"] = len(st["records"]) == len(users)
    if state_dir is not None:
        (state_dir / f"{key}.json").write_text(json.dumps(st))
    print(f"{key}: {len(st['records'])} of {len(users)} users", flush=True)
    return {
        "data": entry["data"],
        "model": entry["model"],
        "path": entry["path"],
        "model_name": rec.name,
        "n_items": len(rec.items_),
        "max_len": rec.max_len,
        "users": len(st["records"]),
        "users_planned": len(users),
        "complete": st["done"],
        "methods": summarise(st["records"], p, st["na"]),
    }


def run(
    config: Path,
    *,
    quick: bool = False,
    state_dir: Path | None = None,
    time_budget: float = 0.0,
    device: str = "cpu",
) -> dict[str, Any]:
    """Every cell of ``config``; returns the result object that :func:`markdown` renders."""
    p, models = read_config(config, quick)
    start = time.time()
    deadline = start + time_budget if time_budget > 0 else float("inf")
    cpus = sorted(os.sched_getaffinity(0))
    res: dict[str, Any] = {
        "benchmark": "faithfulness",
        "protocol": p,
        "config": str(config.relative_to(ROOT) if config.is_relative_to(ROOT) else config),
        "git_sha": git_sha(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"run on CPUs {cpus}, {torch.get_num_threads()} torch threads, device {device}",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "numpy": np.__version__,
        },
        "cells": [run_cell(e, p, state_dir, deadline, device) for e in models],
    }
    res["seconds"] = round(time.time() - start, 1)
    res["load_average"] = [round(x, 1) for x in os.getloadavg()]  # other jobs inflate the ms per explanation
    return res


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=CONFIG, help="protocol and [[models]] (TOML)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for faithfulness.{json,md,png} (default benchmarks/results; --quick: "
        "runs/faithfulness-quick)",
    )
    parser.add_argument("--quick", action="store_true", help=f"cut the protocol to {QUICK} (a smoke check)")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="keep finished users per cell; resume from them"
    )
    parser.add_argument(
        "--time-budget", type=float, default=0.0, help="stop cleanly after this many seconds (0: none)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (1: leave the other cores alone)"
    )
    parser.add_argument(
        "--table", action="store_true", help="only regenerate the .md and .png from the .json"
    )
    a = parser.parse_args(argv)
    out = a.out or (ROOT / "runs" / "faithfulness-quick" if a.quick else RESULTS)
    result = out / "faithfulness.json"
    if a.table:
        res = json.loads(result.read_text())
    else:
        torch.set_num_threads(a.threads)
        res = run(
            a.config.resolve(),
            quick=a.quick,
            state_dir=a.state_dir,
            time_budget=a.time_budget,
            device=a.device,
        )
        out.mkdir(parents=True, exist_ok=True)
        result.write_text(json.dumps(res, indent=2) + "\n")
    (out / "faithfulness.md").write_text(markdown(res))
    try:
        plot(res, out / "faithfulness.png")
    except ImportError:
        print("matplotlib is missing (pip install 'attnrec[plot]'): no plot written")
    print(markdown(res))


if __name__ == "__main__":
    main()
