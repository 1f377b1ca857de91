"""PETER / PETER+ against the authors' reference implementation (lileipisces/PETER), issue 22.

    taskset -c 0 .venv/bin/python benchmarks/peter_reference.py --reference /path/to/PETER \\
        [--config benchmarks/configs/peter-reference.toml] [--quick] [--state-dir DIR]

For every seed (split seed = training seed) it builds ``benchmarks/peter.py``'s records and random
8:1:1 split, exports them in the reference's input format (``reviews.pickle`` + an index folder),
runs the reference's ``main.py`` from the user's checkout in a subprocess (CPU; a launcher makes its
``torch.load`` default to ``weights_only=False`` and seeds Python's ``random``, which its batch
shuffling uses, without editing its files) and trains attnrec's PETER with the same sizes,
optimiser, learning-rate rule, vocabulary size, word cap and epoch budget. Both implementations'
test explanations are scored by attnrec's metrics against the same references, with the looping
share (:func:`attnrec.evaluation.text_metrics.looping_share`); attnrec's models also under each
decoding of the config. Every (implementation, model, seed) cell is kept in ``DIR/state.json`` as
it finishes, so a stopped run continues where it stopped, and a second process with the same arguments
(e.g. under ``taskset -c 1``) runs the cells the first has not claimed; with the default state dir also in the
committed ``benchmarks/results/peter_reference_state.json``, from which a fresh checkout resumes. Writes
``benchmarks/results/peter_reference.{json,md}`` (``--quick``: under the state dir).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnrec.data.reviews import ReviewData, ReviewSplit, random_split, write_peter
from attnrec.data.schema import DataError
from attnrec.evaluation.text_metrics import explanation_metrics, looping_share, mae, rmse
from attnrec.recommend import Explainer
from peter import ROOT, review_data
from peter_reference_report import markdown  # benchmarks/peter_reference_report.py, beside this script

MODELS = {"PETER": False, "PETER+": True}  # name -> use_feature
REFERENCE_FILES = ("main.py", "module.py", "utils.py", "rouge.py", "bleu.py")  # utils.py imports the last two
REFERENCE_DECODING = "greedy (its own)"

# Run as ``python -c LAUNCHER REF SEED THREADS MAIN_ARGS...`` with cwd REF: the reference saves whole
# modules with torch.save and reloads them with a plain torch.load, which torch >= 2.6 refuses
# (weights_only=True by default); its batches are shuffled by Python's unseeded ``random``.
LAUNCHER = """\
import functools, random, runpy, sys
import torch
ref, seed, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.load = functools.partial(torch.load, weights_only=False)
random.seed(seed)
sys.path.insert(0, ref)
sys.argv = [ref + '/main.py'] + sys.argv[4:]
runpy.run_path(ref + '/main.py', run_name='__main__')
"""


class BenchError(Exception):
    """A problem with the inputs or the reference run, reported as one line."""


def reference_argv(
    data_dir: Path, checkpoint: Path, cfg: dict[str, Any], seed: int, use_feature: bool
) -> list[str]:
    """The reference ``main.py`` arguments of one run: the config's sizes, schedule and budget, on CPU."""
    m, t, d = cfg["model"], cfg["train"], cfg["data"]
    argv = [
        "--data_path",
        str(data_dir / "reviews.pickle"),
        "--index_dir",
        str(data_dir / "1"),
        "--emsize",
        str(m["emsize"]),
        "--nhead",
        str(m["n_heads"]),
        "--nhid",
        str(m["ffn"]),
        "--nlayers",
        str(m["n_layers"]),
        "--dropout",
        str(m["dropout"]),
        "--lr",
        str(t["lr"]),
        "--clip",
        str(t["grad_clip"]),
        "--epochs",
        str(t["max_epochs"]),
        "--batch_size",
        str(t["batch_size"]),
        "--seed",
        str(seed),
        "--checkpoint",
        str(checkpoint),
        "--outf",
        "generated.txt",
        "--vocab_size",
        str(d["max_vocab"]),
        "--endure_times",
        str(t["max_lr_decays"]),
        "--rating_reg",
        str(m["rating_weight"]),
        "--context_reg",
        str(m["context_weight"]),
        "--text_reg",
        str(m["text_weight"]),
        "--words",
        str(d["max_words"]),
        "--peter_mask",
    ]
    return argv + (["--use_feature"] if use_feature else [])


def reference_command(reference: Path, argv: list[str], seed: int, threads: int) -> list[str]:
    """The subprocess command that runs the reference's ``main.py`` with ``argv`` through :data:`LAUNCHER`."""
    return [sys.executable, "-c", LAUNCHER, str(reference), str(seed), str(threads), *argv]


def export_reference_input(data: ReviewData, split: ReviewSplit, directory: Path) -> Path:
    """``directory/reviews.pickle`` (dicts: user, item, rating, template = (feature, adj, text, sentiment))
    and ``directory/1/{train,validation,test}.index`` (one line of record numbers separated by single
    spaces)."""
    return write_peter(data, directory, [split])


def parse_generated(text: str) -> list[tuple[list[str], list[str], list[str]]]:
    """(reference, context words, generated) tokens of each test record of the reference's output file.

    The file holds blocks of three lines and a blank line; a line is empty when the model's first word
    was ``<eos>``, so blocks are read by line number, not by splitting on blank lines.
    """
    lines = text.split("\n")
    if len(lines) % 4 != 1 or lines[-1] != "":
        raise BenchError(
            f"generated text: {len(lines) - 1} lines, not blocks of 4 (reference, context, generated, blank)"
        )
    return [
        (lines[k].split(), lines[k + 1].split(), lines[k + 2].split()) for k in range(0, len(lines) - 1, 4)
    ]


_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\]: (.*)$")


def parse_log(stdout: str) -> dict[str, Any]:
    """Seconds of each epoch (train + validation, from the log's timestamps) and the metrics it printed."""
    starts: list[datetime] = []
    seconds: list[float] = []
    printed: dict[str, float] = {}
    for line in stdout.splitlines():
        m = _STAMP.match(line.strip())
        if m is None:
            continue
        t, msg = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f"), m.group(2)
        if re.fullmatch(r"epoch \d+", msg):
            starts.append(t)
        elif msg.endswith("on validation") and starts:
            seconds.append((t - starts[-1]).total_seconds())
        elif (kv := re.fullmatch(r"([A-Za-z0-9_/-]+) +(-?\d+\.\d+)", msg)) is not None:
            printed[kv.group(1)] = float(kv.group(2))
    return {"epochs": len(starts), "epoch_seconds": seconds, "printed": printed}


def score(
    refs: list[list[str]], generated: list[list[str]], true_f: list[str], feats: list[str], cap: int
) -> dict[str, float]:
    """attnrec's text metrics and the looping share (percent) of ``generated`` against ``refs``."""
    return explanation_metrics(refs, generated, true_f, feats) | {
        "looping": 100.0 * looping_share(generated, cap)
    }


def scoring_targets(
    data: ReviewData, split: ReviewSplit, cap: int
) -> tuple[list[list[str]], list[str], list[str]]:
    """The references (the test sentences' first ``cap`` words), ground-truth features and feature set."""
    return (
        [data.tokens(int(i))[:cap] for i in split.test],
        [data.feature[int(i)] for i in split.test],
        sorted(data.features()),
    )


def run_reference(
    reference: Path,
    data: ReviewData,
    split: ReviewSplit,
    cfg: dict[str, Any],
    seed: int,
    use_feature: bool,
    work: Path,
) -> dict[str, Any]:
    """Train and test the reference in a subprocess; its generated test explanations scored by attnrec."""
    data_dir = work.parent / f"data-seed{seed}"
    if not (data_dir / "1" / "test.index").exists():
        export_reference_input(data, split, data_dir)
    work.mkdir(parents=True, exist_ok=True)
    threads = int(cfg["train"].get("threads", 1))
    cmd = reference_command(reference, reference_argv(data_dir, work, cfg, seed, use_feature), seed, threads)
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    env = os.environ | {
        "OMP_NUM_THREADS": str(threads),
        "PYTHONDONTWRITEBYTECODE": "1",
        "CUDA_VISIBLE_DEVICES": "",
    }
    p = subprocess.run(cmd, cwd=reference, capture_output=True, text=True, env=env)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter() - t0
    (work / "reference.log").write_text(p.stdout + p.stderr)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(
            f"the reference run failed (exit {p.returncode}): {last}; log in {work / 'reference.log'}"
        )
    log = parse_log(p.stdout)
    blocks = parse_generated((work / "generated.txt").read_text(encoding="utf-8"))
    refs, true_f, feats = scoring_targets(data, split, cfg["data"]["max_words"])
    if len(blocks) != len(refs):
        raise BenchError(f"the reference generated {len(blocks)} explanations for {len(refs)} test records")
    metrics = score(refs, [b[2] for b in blocks], true_f, feats, cfg["data"]["max_words"])
    metrics |= {"RMSE": log["printed"]["RMSE"], "MAE": log["printed"]["MAE"]}  # clipped to 1-5 as attnrec's
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "decodings": {REFERENCE_DECODING: metrics},
        "epochs": log["epochs"],
        "epoch_seconds": float(np.mean(log["epoch_seconds"])) if log["epoch_seconds"] else float("nan"),
        "cpu_seconds": cpu,
        "cpu_seconds_per_epoch": cpu / max(log["epochs"], 1),
        "wall_seconds": wall,
        "printed": log["printed"],
        "reference_text_mismatches": sum(b[0] != r for b, r in zip(blocks, refs, strict=True)),
        "examples": [" ".join(b[2]) for b in blocks[:5]],
    }


def run_attnrec(
    data: ReviewData, split: ReviewSplit, cfg: dict[str, Any], seed: int, use_feature: bool
) -> dict[str, Any]:
    """Train attnrec's PETER (the paper's rating head and checkpoint) and score each configured decoding."""
    cap = cfg["data"]["max_words"]
    model = cfg["model"] | {"max_words": cap, "use_feature": use_feature}
    ex = Explainer(
        "peter",
        model,
        cfg["train"] | {"seed": seed, "device": "cpu"},
        preset=None,
        max_vocab=cfg["data"]["max_vocab"],
    )
    c0 = time.process_time()
    ex.fit(data, split, progress=False)
    refs, true_f, feats = scoring_targets(data, split, cap)
    out: dict[str, dict[str, float]] = {}
    cpu = 0.0
    for name, n in cfg["decoding"].items():
        pred, gen = ex.predict(data, split.test, decoding=ex.decoding.but(no_repeat_ngram=int(n)))
        if not out:  # the whole-run CPU time, as the reference's: training, validation, one test decoding
            cpu = time.process_time() - c0
        truth = data.rating[split.test]
        out[name] = score(refs, gen, true_f, feats, cap) | {
            "RMSE": rmse(pred, truth, data.rating_range),
            "MAE": mae(pred, truth, data.rating_range),
        }
    tr = ex.train_result_
    assert tr is not None
    return {
        "decodings": out,
        "epochs": tr.epochs,
        "best_epoch": tr.best_epoch,
        "stopped": tr.stopped,
        "epoch_seconds": tr.seconds_per_epoch,
        "cpu_seconds": cpu,
        "cpu_seconds_per_epoch": cpu / max(tr.epochs, 1),
    }


def effective_config(cfg: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The config with ``[quick]`` applied (fewer records and seeds, a tiny model, one epoch)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items()}
    if quick:
        q = cfg["quick"]
        out["data"] |= {"seeds": q["seeds"], "records": q["records"]}
        out["model"] |= {"emsize": q["emsize"], "ffn": q["ffn"]}
        out["train"] |= {"max_epochs": q["max_epochs"]}
    return out


@contextlib.contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """An exclusive lock on ``state_dir``: processes sharing it read and write its state one at a time."""
    with open(state_dir / "state.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _merge(state: dict[str, Any], state_file: Path) -> None:
    """Adds the cells other processes saved in ``state_file`` to ``state`` (call under :func:`_locked`)."""
    if state_file.exists():
        state["cells"] = json.loads(state_file.read_text()).get("cells", {}) | state["cells"]


def _alive(pid: int) -> bool:
    """Whether ``pid`` is another running process."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _claim(state_dir: Path, state: dict[str, Any], key: str) -> bool:
    """Whether this process should run cell ``key``: not done, and not being run by another live process.

    A claim is a file holding the claimant's pid; the claim of a process that has ended (a run that was
    cut off) is taken over.
    """
    claim = state_dir / "claims" / key.replace("/", "_").replace("+", "-plus")
    with _locked(state_dir):
        _merge(state, state_dir / "state.json")
        if key in state["cells"]:
            return False
        if claim.exists() and claim.read_text().strip().isdigit() and _alive(int(claim.read_text())):
            return False
        claim.parent.mkdir(exist_ok=True)
        claim.write_text(str(os.getpid()))
        return True


def run(
    cfg: dict[str, Any], reference: Path, state_dir: Path, quick: bool, keep: Path | None = None
) -> dict[str, Any]:
    """Every missing (implementation, model, seed) cell, saved to ``state_dir/state.json`` as each ends.

    Several processes may share ``state_dir`` (one per core): each runs the cells no live process has
    claimed, and every write keeps the cells the others saved.

    ``keep``: a second copy of the state, written with it (the committed
    ``benchmarks/results/peter_reference_state.json``: a run cut off with its machine resumes from it
    when ``state_dir`` has no state yet). Cells hold metrics and five example outputs, never data.
    """
    cfg = effective_config(cfg, quick)
    path, data = review_data(cfg)
    if "records" in cfg["data"]:
        data = data.take(np.arange(min(cfg["data"]["records"], len(data))))
    info = {
        "file": path.name,
        "sha256": data.source.sha256,
        "records": len(data),
        "users": data.n_users,
        "items": data.n_items,
        "features": len(data.features()),
    }
    fingerprint = {"config": cfg, "data": info}
    state_file = state_dir / "state.json"
    state_dir.mkdir(parents=True, exist_ok=True)
    with _locked(state_dir):
        source = state_file if state_file.exists() else keep if keep is not None and keep.exists() else None
        state: dict[str, Any] = json.loads(source.read_text()) if source is not None else {}
    if state and state.get("fingerprint") != json.loads(json.dumps(fingerprint)):
        raise BenchError(f"{source} was made with another config or data; use another --state-dir")
    state |= {"fingerprint": fingerprint, "cells": state.get("cells", {})}
    state["reference_files"] = {
        f: hashlib.sha256((reference / f).read_bytes()).hexdigest() for f in REFERENCE_FILES
    }
    for seed in cfg["data"]["seeds"]:
        split = random_split(data, seed)
        for model, use_feature in MODELS.items():
            for impl in ("reference", "attnrec"):
                key = f"{impl}/{model}/{seed}"
                if not _claim(state_dir, state, key):
                    continue
                print(f"{key}: running", flush=True)
                if impl == "reference":
                    cell = run_reference(
                        reference,
                        data,
                        split,
                        cfg,
                        seed,
                        use_feature,
                        state_dir / f"reference-{model.replace('+', '-plus')}-seed{seed}",
                    )
                else:
                    cell = run_attnrec(data, split, cfg, seed, use_feature)
                with _locked(state_dir):  # keeps the cells another process saved meanwhile
                    _merge(state, state_file)
                    state["cells"][key] = cell | {
                        "split": [len(split.train), len(split.valid), len(split.test)]
                    }
                    for f in [
                        state_file,
                        *([keep] if keep is not None else []),
                    ]:  # a stopped run resumes here
                        f.write_text(json.dumps(state, indent=1, default=str) + "\n")
                print(
                    f"{key}: "
                    + json.dumps({k: round(v, 3) for k, v in next(iter(cell["decodings"].values())).items()}),
                    flush=True,
                )
    with _locked(state_dir):
        _merge(state, state_file)
    return state | {
        "quick": quick,
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--reference",
        help="a checkout of lileipisces/PETER (main.py, module.py, utils.py, rouge.py, bleu.py)",
    )
    ap.add_argument("--config", default=str(ROOT / "benchmarks/configs/peter-reference.toml"))
    ap.add_argument(
        "--quick", action="store_true", help="a smoke test: [quick] of the config, results in the state dir"
    )
    ap.add_argument(
        "--state-dir",
        help="where cells, exports and reference runs are kept (default runs/peter-reference[-quick])",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results"))
    ap.add_argument("--render", metavar="JSON", help="only rewrite the markdown of a results JSON file")
    args = ap.parse_args()
    try:
        if args.render:
            path = Path(args.render)
            path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))
            return
        if not args.reference:
            raise BenchError("--reference DIR is required (a checkout of lileipisces/PETER)")
        reference = Path(args.reference).resolve()
        missing = [f for f in REFERENCE_FILES if not (reference / f).is_file()]
        if missing:
            raise BenchError(f"{reference}: not a PETER checkout, it lacks {', '.join(missing)}")
        with open(args.config, "rb") as fh:
            cfg = tomllib.load(fh)
        state_dir = Path(args.state_dir or ROOT / ("runs/peter-reference" + ("-quick" if args.quick else "")))
        keep = (
            None if args.quick or args.state_dir else ROOT / "benchmarks/results/peter_reference_state.json"
        )
        results = run(cfg, reference, state_dir.resolve(), args.quick, keep)
        out = state_dir if args.quick else Path(args.out)
        name = "peter_reference-quick" if args.quick else "peter_reference"
        (out / f"{name}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
        (out / f"{name}.md").write_text(markdown(results))
        print((out / f"{name}.md").read_text())
    except (BenchError, DataError, OSError, tomllib.TOMLDecodeError, KeyError) as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
