"""FLOPs of one training epoch of SASRec, BERT4Rec, gSASRec, eSASRec or HSTU, this machine's matmul peak, and
the fraction achieved.

    nice -n 10 .venv/bin/python benchmarks/flops.py        # writes benchmarks/results/flops.{json,md}
    .venv/bin/python benchmarks/flops.py --step-study      # steps and peak in turns: flops_steps.{json,md}
    .venv/bin/python benchmarks/flops.py --step-study --models sasrec sasrec-fast --rounds 5 \
        --out flops_fast_kernels

FLOP count (analytic; a multiply-add is 2 FLOPs; matrix products only - layer norms, softmax,
dropout and embedding look-ups are O(T d) per position and left out). Every training sequence is
computed at its padded width ``T`` (``max_len``; with BERT4Rec's ``length_chunks``, the width of
its chunk); ``d`` is the width, ``L`` the blocks, ``f``
the FFN width (SASRec ``d``, BERT4Rec ``4d``), ``R`` the training rows of the epoch, ``N`` the
predicted positions (SASRec: real next-item targets; BERT4Rec: masked positions, counted from the
epoch's actual Cloze masking), ``I`` the catalog size, ``S`` the sampled negatives::

    encoder, forward, per row   = L * (8 T d^2  +  4 T^2 d  +  4 T d f)     # Q,K,V,O; QK^T and AV; FFN
        eSASRec (LiGR)          = L * (8 T d^2  +  4 T^2 d  +  4 T d^2  +  6 T d m d)
                                                                       # + 2 gates, SwiGLU (m x)
        HSTU                    = L * (4 T d H (dv + dqk)  +  2 T^2 H (dqk + dv)  +  2 T H dv d)
                                                                       # f1; QK^T, AV; f2
    output, forward             = 2 N d (I + 1)    full softmax  (BERT4Rec adds 2 N d^2 for its projection)
                                = 2 N d (S + 1)    sampled softmax (S: negatives per position), 4 N d for BCE
                                = 2 N d (k + 1)    gSASRec's gBCE with k negatives
    training = 3 x forward (backward = grads of inputs and of weights)

These are the model's FLOPs (the usual convention of a fraction of peak: work a faster kernel could
skip is not counted). The chunked full softmax computes its gradients in its forward pass, so it
does exactly that; until commit "Chunked full-softmax cross-entropy computes its gradients in the
forward pass" it recomputed its logits in backward (4 x its output forward), and the fractions of
runs older than that were reported with the recomputation counted (36.6% for ``ml-1m-sasrec-ce``
then, 31.1% by this count).

``R`` and ``N`` are counted by running the model's own ``train_batches`` for the epoch (numpy only).

Peak: the best of several float32 ``torch.mm`` products (square 512-2048) at 1 and at all threads,
per CPU second of the process (x threads), which other jobs on a shared machine disturb much less
than the rate per wall second (also recorded).
Achieved fraction: for every result of the benchmark runner (``benchmarks/results/runs/*.json``) of
SASRec or BERT4Rec, FLOPs per epoch / its seconds per epoch (training only) / the peak at the
run's thread count. The runs' seconds per epoch are wall seconds, so on a shared machine the
fraction is a lower bound. Without run files the FLOP counts of the ML-1M configurations are still
reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from flops_report import markdown, steps_markdown  # benchmarks/flops_report.py, beside this script
from provenance import git_sha  # benchmarks/provenance.py, beside this script

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ML1M = ROOT / ".." / "shared" / "data" / "ml-1m" / "ml-1m.txt.gz"
# The configuration: max length 200, hidden 64, 2 blocks, batch 128, full cross-entropy.
# Name -> (registered model, settings); the 2023-25 models at their ML-1M presets' model settings.
REFERENCE: dict[str, tuple[str, dict[str, Any]]] = {
    "sasrec": ("sasrec", {"hidden": 64, "n_layers": 2, "n_heads": 1, "max_len": 200, "loss": "ce"}),
    "bert4rec": ("bert4rec", {"hidden": 64, "n_layers": 2, "n_heads": 2, "max_len": 200, "loss": "ce"}),
    "gsasrec": ("gsasrec", {}),
    "esasrec": ("esasrec", {"negatives": "sequence"}),
    "hstu": ("hstu", {"negatives": "sequence"}),
    "hstu-large": ("hstu", {"n_layers": 8, "n_heads": 2, "dqk": 25, "dv": 25, "negatives": "sequence"}),
}


# The benchmark runs' ML-1M SASRec (sasrec-ce-full.toml): dropout 0.2 and no attention dropout.
STEP_CONFIG = REFERENCE["sasrec"][1] | {"dropout": 0.2, "attn_dropout": 0.0}
# Step-study entries beyond REFERENCE (the same FLOPs, another kernel or precision): name -> (registered
# model, settings, train.amp). SASRec with its CPU kernels on, in float32 and under bfloat16 autocast.
_FAST = STEP_CONFIG | {"fast_ce": True, "fast_dropout": True}
STEP_VARIANTS: dict[str, tuple[str, dict[str, Any], str]] = {
    "sasrec-fast": ("sasrec", _FAST, "none"),
    "sasrec-fast-bf16": ("sasrec", _FAST, "bf16"),
}


def count_epoch(
    model_name: str, model_config: dict[str, Any], train: Any, batch_size: int, seed: int = 0, epoch: int = 1
) -> dict[str, int]:
    """Rows, predicted positions and FLOPs of one training epoch (see the module docstring)."""
    from attnrec.config import config_from_dict
    from attnrec.models.registry import get_spec

    spec = get_spec(model_name)
    cfg: Any = config_from_dict(spec.config_cls, dict(model_config))  # whichever model's config dataclass
    model = spec.cls(cfg, train.n_users, train.n_items)
    out = {"rows": 0, "positions": 0, "encoder_flops": 0, "output_flops": 0, "flops": 0}
    for batch in model.train_batches(train, batch_size, np.random.default_rng([seed, epoch])):
        for k, v in batch_flops(model_name, cfg, model, batch, train.n_items + 1).items():
            out[k] += v
    return out


def layer_flops(model_name: str, cfg: Any, t: int) -> int:
    """Forward FLOPs of one encoder layer over one row of padded width ``t`` (the module docstring)."""
    d: int = cfg.hidden
    if model_name == "hstu":  # f1 (U, V, Q, K), Q K^T and A V per head, f2
        hv, hqk = int(cfg.n_heads * cfg.dv), int(cfg.n_heads * cfg.dqk)
        return 2 * t * d * 2 * (hv + hqk) + 2 * t * t * (hqk + hv) + 2 * t * hv * d
    attention = 8 * t * d * d + 4 * t * t * d  # Q, K, V, O; Q K^T and A V
    if model_name == "esasrec":  # + two gates and the SwiGLU's three matrices
        return attention + 4 * t * d * d + 6 * t * d * d * int(cfg.ff_multiplier)
    return attention + 4 * t * d * (4 * d if model_name == "bert4rec" else d)  # + the FFN


def batch_flops(model_name: str, cfg: Any, model: Any, batch: Any, items: int) -> dict[str, int]:
    """Rows, predicted positions and training FLOPs of one batch (the module docstring's formula)."""
    d = cfg.hidden
    positions = int((batch["target" if "target" in batch else "labels"] > 0).sum())
    encoder = 0
    chunks = (
        model.chunks.split(batch["seq"])
        if model_name == "bert4rec"
        else [(batch["seq"], batch["seq"].shape[1])]
    )
    for part, t in chunks:  # t: the padded width the encoder computes
        encoder += len(part) * cfg.n_layers * layer_flops(model_name, cfg, t)
    loss = "gbce" if model_name == "gsasrec" else getattr(cfg, "loss", "ce")
    if loss == "ce":
        out = 2 * positions * d * items
    elif loss == "sampled_ce":
        out = 2 * positions * d * (cfg.n_negatives + cfg.in_batch_negatives + 1)
    elif loss == "gbce":  # the positive and k negatives per position
        out = 2 * positions * d * (cfg.n_negatives + 1)
    else:
        out = 4 * positions * d
    if model_name == "bert4rec":
        out += 2 * positions * d * d
    return {
        "rows": len(batch["seq"]),
        "positions": positions,
        "encoder_flops": 3 * encoder,
        "output_flops": 3 * out,
        "flops": 3 * encoder + 3 * out,
    }


def step_study(
    train: Any,
    model_name: str,
    model_config: dict[str, Any],
    steps: int = 8,
    rounds: int = 3,
    seed: int = 0,
    amp: str = "none",
) -> dict[str, Any]:
    """Training steps and the matmul peak measured in turns in one process on one thread, so both see the
    same machine (a busy sibling core lowers both alike); per round: the peak, the CPU seconds of
    ``steps`` optimizer steps (forward, backward, Adam) after one warm-up step, and their fraction.

    ``amp`` is a ``train.amp`` value: the forward and the loss run under the training loop's autocast
    (:func:`attnrec.training.step.amp_autocast`); the fraction is still taken of the float32 peak (the
    issue's yardstick), and each round also records the matmul peak in that precision
    (``bf16_peak_gflops`` for bf16) so the reader sees both."""
    from attnrec.config import config_from_dict
    from attnrec.models.registry import get_spec
    from attnrec.training.step import AMP_DTYPES, amp_autocast

    spec = get_spec(model_name)
    cfg: Any = config_from_dict(spec.config_cls, dict(model_config))  # whichever model's config dataclass
    torch.manual_seed(seed)
    model = spec.cls(cfg, train.n_users, train.n_items).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = []
    for b in model.train_batches(train, 128, np.random.default_rng(seed)):
        batches.append(b)
        if len(batches) == steps + 1:
            break
    flops = sum(batch_flops(model_name, cfg, model, b, train.n_items + 1)["flops"] for b in batches[1:])

    low = AMP_DTYPES.get(amp)

    def step(batch: Any) -> None:
        opt.zero_grad(set_to_none=True)
        with amp_autocast("cpu", low):
            loss = model.loss(batch)
        loss.backward()
        opt.step()

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    out: list[dict[str, float]] = []
    try:
        for _ in range(rounds):
            peak = matmul_peak(1, sizes=(1024, 2048), repeat=2)["peak_gflops"]
            step(batches[0])
            c = time.process_time()
            for b in batches[1:]:
                step(b)
            seconds = (time.process_time() - c) / steps
            achieved = flops / steps / seconds / 1e9
            row = {
                "peak_gflops": peak,
                "cpu_seconds_per_step": seconds,
                "achieved_gflops": achieved,
                "fraction_of_peak": achieved / peak,
            }
            if low is not None:
                row[f"{amp}_peak_gflops"] = matmul_peak(1, sizes=(1024, 2048), repeat=2, dtype=low)[
                    "peak_gflops"
                ]
            out.append(row)
    finally:
        torch.set_num_threads(old)
    return {
        "model": model_name,
        "config": model_config,
        "amp": amp,
        "steps": steps,
        "flops_per_step": flops / steps,
        "rounds": out,
        "median_fraction": median_fraction(out),
        "load_average": os.getloadavg()[0],
    }


def median_fraction(rounds: list[dict[str, float]]) -> float:
    """The median (the upper one of an even count) of the rounds' fractions of the peak."""
    fractions = sorted(r["fraction_of_peak"] for r in rounds)
    return fractions[len(fractions) // 2]


def matmul_peak(
    threads: int,
    sizes: tuple[int, ...] = (512, 1024, 2048),
    repeat: int = 3,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """Best GFLOP/s of square ``torch.mm`` at ``threads`` threads (float32 unless ``dtype``).

    Two rates: per wall second, and per CPU second of this process times ``threads`` (what the
    threads would do with their cores to themselves). On a shared machine the wall rate is lowered
    by the other jobs; the CPU-time rate much less, so it is the one used as the peak.
    """
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    try:
        for n in sizes:
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            torch.mm(a, b)  # warm-up
            walls, cpus = [], []
            for _ in range(repeat):
                t, c = time.perf_counter(), time.process_time()
                torch.mm(a, b)
                walls.append(time.perf_counter() - t)
                cpus.append(time.process_time() - c)
            wall[str(n)] = 2 * n**3 / min(walls) / 1e9
            cpu[str(n)] = 2 * n**3 / max(min(cpus), 1e-9) / 1e9 * threads
    finally:
        torch.set_num_threads(old)
    return {
        "threads": threads,
        "gflops_by_size": cpu,
        "wall_gflops_by_size": wall,
        "peak_gflops": max(cpu.values()),
        "wall_peak_gflops": max(wall.values()),
    }


def evaluation_seconds(path: Path, threads: int, repeat: int = 7) -> dict[str, Any]:
    """Best wall and CPU seconds of full-ranking evaluation of every ML-1M test user (history excluded)
    with the reference SASRec (d 64, 2 blocks, max length 200; weights do not change the cost)."""
    from attnrec.data.datasets import load_dataset
    from attnrec.data.split import leave_one_out
    from attnrec.evaluation.protocol import evaluate, protocol_by_name
    from attnrec.models.sasrec import SASRec, SASRecConfig

    cases = leave_one_out(load_dataset(str(path))).test
    torch.manual_seed(0)
    model = SASRec(
        SASRecConfig(hidden=64, n_layers=2, n_heads=1, max_len=200, loss="ce"),
        int(cases.users.max()) + 1,
        cases.histories.n_items,
    ).eval()

    def scorer(users: np.ndarray, histories: Any, request_time: np.ndarray | None = None) -> torch.Tensor:
        return model.score(model.score_inputs(users, histories, request_time))

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    walls, cpus = [], []
    try:
        evaluate(scorer, cases, protocol_by_name("full"))  # warm-up
        for _ in range(repeat):
            t, c = time.perf_counter(), time.process_time()
            evaluate(scorer, cases, protocol_by_name("full"))
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
    finally:
        torch.set_num_threads(old)
    return {
        "threads": threads,
        "users": len(cases),
        "wall_seconds": min(walls),
        "cpu_seconds": min(cpus),
        "load_average": os.getloadavg()[0],
    }


def highest_peaks(peaks: dict[int, dict[str, Any]], previous: Path) -> dict[str, dict[str, Any]]:
    """Per thread count, the higher of this measurement's peak and the highest one ``previous`` (the
    committed ``flops.json``) recorded, with the date it was measured. Runs are set against it: their
    seconds were measured at other times, and this machine's peak swings with the host's load (63 to
    92 GFLOP/s at 1 thread within a day, with nothing else of ours running), so a low peak of the
    day would inflate every fraction; the highest is the conservative choice."""
    today = time.strftime("%Y-%m-%d")
    out = {str(t): {"peak_gflops": v["peak_gflops"], "measured": today} for t, v in peaks.items()}
    old = json.loads(previous.read_text()) if previous.exists() else {}
    earlier = old.get("best_peaks") or {
        t: {"peak_gflops": v["peak_gflops"], "measured": "an earlier flops.json"}
        for t, v in old.get("peaks", {}).items()
    }
    for t, v in earlier.items():
        if t in out and v["peak_gflops"] > out[t]["peak_gflops"]:
            out[t] = v
    if "1" in out:  # t cores cannot exceed t times one: CPU seconds undercount idle threads at small sizes
        for t, v in out.items():
            if v["peak_gflops"] > int(t) * out["1"]["peak_gflops"]:
                out[t] = {
                    "peak_gflops": int(t) * out["1"]["peak_gflops"],
                    "measured": f"{t} x the 1-thread peak",
                }
    return out


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def _train_of(path: Path) -> Any:
    from attnrec.data.datasets import load_dataset
    from attnrec.data.split import leave_one_out

    return leave_one_out(load_dataset(str(path))).train


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=Path, default=RESULTS / "runs")
    p.add_argument("--data", type=Path, default=ML1M, help="ML-1M file for the reference FLOP counts")
    p.add_argument("--other-load", default="other jobs were running", help="what else ran (recorded)")
    p.add_argument(
        "--step-study",
        action="store_true",
        help="only the interleaved step study (training steps and the peak in turns): flops_steps.{json,md}",
    )
    p.add_argument(
        "--models",
        nargs="+",
        choices=list(REFERENCE) + list(STEP_VARIANTS),
        default=list(REFERENCE),
        help="the step study's models (default: those of REFERENCE)",
    )
    p.add_argument(
        "--rounds", type=int, default=3, help="step study: rounds per model, the models taking turns"
    )
    p.add_argument(
        "--out", default="flops_steps", help="step study: result files benchmarks/results/OUT.{json,md}"
    )
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.step_study:
        train = _train_of(a.data)
        entries = {
            name: STEP_VARIANTS[name] if name in STEP_VARIANTS else (*REFERENCE[name], "none")
            for name in a.models
        }
        studies: dict[str, dict[str, Any]] = {}
        for _ in range(
            a.rounds
        ):  # rounds outer, models inner: each model's rounds spread over the same stretch
            for name, (model, cfg, amp) in entries.items():
                one = step_study(
                    train, model, STEP_CONFIG if name == "sasrec" else cfg, rounds=1, amp=amp
                ) | {"name": name}
                if name in studies:
                    one["rounds"] = studies[name]["rounds"] + one["rounds"]
                studies[name] = one | {"median_fraction": median_fraction(one["rounds"])}
        for name, st in studies.items():
            print(f"{name}: {st['median_fraction']:.1%}", flush=True)
        study = {
            "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "torch": torch.__version__},
            "other_load": a.other_load,
            "git_sha": git_sha(),
            "out": a.out,
            "studies": list(studies.values()),
        }
        (RESULTS / f"{a.out}.json").write_text(json.dumps(study, indent=2, default=float) + "\n")
        (RESULTS / f"{a.out}.md").write_text(steps_markdown(study))
        print(steps_markdown(study))
        return
    load0 = os.getloadavg()
    peaks = {t: matmul_peak(t) for t in sorted({1, os.cpu_count() or 1})}
    best = highest_peaks(peaks, RESULTS / "flops.json")
    res: dict[str, Any] = {
        "peaks": {str(t): v for t, v in peaks.items()},
        "best_peaks": best,
        "reference": {},
        "runs": [],
        "machine": {
            "cpu": _cpu(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "load_average_at_start": load0,
        },
        "other_load": a.other_load,
    }
    trains: dict[str, Any] = {}
    if a.data.exists():
        trains[str(a.data.resolve())] = _train_of(a.data)
        for name, (model, cfg) in REFERENCE.items():
            res["reference"][name] = count_epoch(model, cfg, trains[str(a.data.resolve())], 128) | {
                "model": model,
                "config": cfg,
            }
        res["evaluation"] = [evaluation_seconds(a.data, t) for t in sorted({1, os.cpu_count() or 1})]
    models = {m for m, _ in REFERENCE.values()}
    for f in sorted(a.runs.glob("*.json")) if a.runs.exists() else []:
        run = json.loads(f.read_text())
        if run.get("model") not in models or not run.get("seconds_per_epoch"):
            continue
        if run["train_config"].get("device") not in (None, "auto", "cpu"):
            continue  # a GPU's seconds against the CPU's peak would mean nothing
        path = Path(run["data"]["path"])
        path = path if path.is_absolute() else (ROOT / path)
        if not path.exists() or path.resolve() != a.data.resolve():
            continue  # runs on the reference file only (ML-1M)
        key = str(path.resolve())
        trains.setdefault(key, _train_of(path))
        tc = run["train_config"]
        counted = count_epoch(
            run["model"], run["model_config"], trains[key], tc["batch_size"], tc.get("seed", 0)
        )
        threads = int(tc.get("threads") or run["machine"].get("torch_threads") or 1)
        peak = (
            best[str(threads)]["peak_gflops"] if str(threads) in best else matmul_peak(threads)["peak_gflops"]
        )
        achieved = counted["flops"] / run["seconds_per_epoch"] / 1e9
        res["runs"].append(
            {
                "run": run["name"],
                "model": run["model"],
                "file": str(f.relative_to(ROOT)),
                "threads": threads,
                "seconds_per_epoch": run["seconds_per_epoch"],
                "achieved_gflops": achieved,
                "peak_gflops": peak,
                "fraction_of_peak": achieved / peak,
                "amp": tc.get("amp", "none"),
                "machine": run.get("machine", {}),
                "notes": run.get("notes", ""),
            }
            | counted
        )
    res["load_average_at_end"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "flops.json").write_text(json.dumps(res, indent=2, default=float) + "\n")
    (RESULTS / "flops.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
