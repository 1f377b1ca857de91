"""Peer comparison: RecBole's and RecTools' SASRec against attnrec's on ML-1M, same split and hyperparameters.

    nice -n 10 .venv/bin/python benchmarks/peers.py                 # all three, one library at a time
    .venv/bin/python benchmarks/peers.py --only attnrec               # one library (recbole, rectools, attnrec)
    .venv/bin/python benchmarks/peers.py --table                      # rebuild peers.md from peers.json

Status: prepared, not yet run here (the installs and the trainings take hours of the 2 shared cores;
the lead schedules them). The attnrec path has been smoke-tested on the demo data; the RecBole and
RecTools workers follow those libraries' documented APIs (RecBole 1.2.1, RecTools 0.19) but have
not been executed.

What it does, one library at a time (never concurrently, so the timings do not disturb each other):

1. Data: the papers' ML-1M file (``../shared/data/ml-1m/ml-1m.txt.gz``; one ``user item`` line per
   interaction in time order) is loaded by attnrec and split leave-one-out (last item test, the one
   before validation, the test history includes it). The same sequences are written for the peers
   under ``/tmp/attnrec-peers/data``: an atomic ``.inter`` file for RecBole (its own ``LS``
   ``valid_and_test`` split on the ``timestamp`` = position order gives the same split) and, for
   RecTools, the all-but-last interactions (``train.csv``) with the test targets (``test.json``).
2. Environments: each peer gets its own virtual environment under ``/tmp/attnrec-peers/<lib>-venv``
   with the same torch version as attnrec's (``pip install torch==X``; the CPU wheel), then
   ``recbole==1.2.1`` (with numpy < 2, scipy < 1.14 and pandas < 2.2, which that release predates)
   or ``rectools[torch]==0.19.0``.
3. Training, in a fresh process per library (peak RSS is that process's ``ru_maxrss``): SASRec with
   d=64, 2 blocks, 1 head, max length 200, dropout 0.2 on hidden states and attention
   probabilities, point-wise FFN of width d with ReLU, full-softmax cross-entropy, Adam lr 1e-3,
   batch 128, at most 200 epochs, validation every 2 epochs, stop after 5 evaluations without
   improvement, seed 0, ``--threads`` torch threads. Validation selects on NDCG@10 under full
   ranking for attnrec and RecBole; RecTools' trainer can only early-stop on its validation loss.
4. Test: full ranking over all items with the user's history excluded, NDCG@10 and HR@10 (RecBole
   computes them itself; RecTools' top-10 lists are scored here with the same formula as attnrec).

Known differences that no setting removes (recorded in the table's notes): RecBole's SASRec trains
on every prefix of every sequence (one target per sample, so an "epoch" is ~165x more samples than
a shifted-sequence epoch) and uses post-LayerNorm blocks; RecTools matches the authors' pre-LN
shifted-sequence training. Seconds per epoch are therefore reported together with total wall
time to the final model and the time at which validation NDCG@10 first reached 0.18.

Writes ``benchmarks/results/peers.json`` (one entry per library, updated after each) and a
generated ``peers.md`` with the ratios to attnrec.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
WORK = Path(os.environ.get("ATTNREC_PEERS_DIR", "/tmp/attnrec-peers"))
ML1M = ROOT.parent / "shared" / "data" / "ml-1m" / "ml-1m.txt.gz"
SETTINGS: dict[str, Any] = {
    "hidden": 64, "n_layers": 2, "n_heads": 1, "max_len": 200, "dropout": 0.2, "attn_dropout": 0.2,
    "lr": 1e-3, "batch_size": 128, "max_epochs": 200, "eval_every": 2, "patience": 5, "seed": 0, "threads": 2,
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
                if pos < len(s) - 1 or len(s) < 3:
                    train.write(f"{users[u]},{items[i - 1]},{pos}\n")
    test = {"users": [users[u] for u in split.test.users], "targets": [items[i - 1] for i in split.test.targets]}
    (d / "test.json").write_text(json.dumps(test))
    return {"data": data.source.name, "sha256": data.source.sha256, "users": data.n_users, "items": data.n_items,
            "interactions": len(data), "test_users": len(split.test), "split": split.describe()}


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
        code = subprocess.call([str(python), __file__, "--worker", lib, json.dumps(settings), str(out)],
                               env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=WORK)
    if code != 0 or not out.exists():
        raise SystemExit(f"{lib} failed (exit {code}); see {log}")
    res: dict[str, Any] = json.loads(out.read_text())
    res["process_wall_seconds"] = time.perf_counter() - t0
    return res


# -- workers (run inside each library's own environment: stdlib, numpy, torch and the library only) --
def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    model = {k: s[k] for k in ("hidden", "n_layers", "n_heads", "max_len", "dropout", "attn_dropout")} | {"loss": "ce"}
    train = {"lr": s["lr"], "batch_size": s["batch_size"], "max_epochs": s["max_epochs"], "eval_every": s["eval_every"],
             "patience": s["patience"], "seed": s["seed"], "threads": s["threads"], "device": "cpu"}
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
            evals.append({"epoch": h["epoch"], "at_seconds": clock, "NDCG@10": h["valid"]["NDCG@10"],
                          "HR@10": h["valid"]["HR@10"]})
    return {"epoch_seconds": [h["train_seconds"] for h in tr.history], "epochs": tr.epochs, "best_epoch": tr.best_epoch,
            "valid_seconds_each": valid_each, "evals": evals, "fit_seconds": fit, "test_eval_seconds": eval_seconds,
            "test": {"NDCG@10": test["NDCG@10"], "HR@10": test["HR@10"]}, "stopped": tr.stopped,
            "peak_rss_mb": _peak_mb(), "version": __import__("attnrec").__version__}


def worker_recbole(s: dict[str, Any]) -> dict[str, Any]:
    import torch

    _load = torch.load

    def load(*a: Any, **k: Any) -> Any:  # RecBole reloads its own checkpoint (a pickled config) at the end
        k.setdefault("weights_only", False)
        return _load(*a, **k)

    torch.load = load  # type: ignore[assignment]
    torch.set_num_threads(s["threads"])
    import recbole
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_logger, init_seed

    config = Config(model="SASRec", dataset="ml1m", config_dict={
        "data_path": str(WORK / "data"), "checkpoint_dir": str(WORK / "recbole-saved"),
        "USER_ID_FIELD": "user_id", "ITEM_ID_FIELD": "item_id", "TIME_FIELD": "timestamp",
        "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
        "user_inter_num_interval": "[0,inf)", "item_inter_num_interval": "[0,inf)",
        "MAX_ITEM_LIST_LENGTH": s["max_len"],
        "n_layers": s["n_layers"], "n_heads": s["n_heads"], "hidden_size": s["hidden"], "inner_size": s["hidden"],
        "hidden_dropout_prob": s["dropout"], "attn_dropout_prob": s["attn_dropout"], "hidden_act": "relu",
        "layer_norm_eps": 1e-8, "initializer_range": 0.02, "loss_type": "CE", "train_neg_sample_args": None,
        "learning_rate": s["lr"], "train_batch_size": s["batch_size"], "epochs": s["max_epochs"],
        "eval_step": s["eval_every"], "stopping_step": s["patience"],
        "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "group_by": "user", "mode": "full"},
        "metrics": ["Hit", "NDCG"], "topk": [10], "valid_metric": "NDCG@10", "eval_batch_size": 256,
        "use_gpu": False, "device": "cpu", "seed": s["seed"], "reproducibility": True, "show_progress": False,
        "worker": 0,
    })
    init_seed(config["seed"], config["reproducibility"])
    init_logger(config)
    t0 = time.perf_counter()
    dataset = create_dataset(config)
    train_data, valid_data, test_data = data_preparation(config, dataset)
    prep = time.perf_counter() - t0
    model = SASRec(config, train_data.dataset).to(config["device"])
    trainer = Trainer(config, model)
    epochs: list[float] = []
    evals: list[dict[str, Any]] = []
    train_epoch, valid_epoch = trainer._train_epoch, trainer._valid_epoch
    start = time.perf_counter()

    def timed_train(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        r = train_epoch(*a, **k)
        epochs.append(time.perf_counter() - t)
        return r

    def timed_valid(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        score, result = valid_epoch(*a, **k)
        evals.append({"epoch": len(epochs), "seconds": time.perf_counter() - t, "at_seconds": time.perf_counter() - start,
                      "NDCG@10": float(result["ndcg@10"]), "HR@10": float(result["hit@10"])})
        return score, result

    trainer._train_epoch, trainer._valid_epoch = timed_train, timed_valid
    trainer.fit(train_data, valid_data, saved=True, show_progress=False)
    fit = time.perf_counter() - start
    t1 = time.perf_counter()
    test = trainer.evaluate(test_data, load_best_model=True, show_progress=False)
    eval_seconds = time.perf_counter() - t1
    best = max(evals, key=lambda e: e["NDCG@10"]) if evals else {"epoch": len(epochs)}
    return {"epoch_seconds": epochs, "epochs": len(epochs), "best_epoch": best["epoch"], "evals": evals,
            "valid_seconds_each": sum(e["seconds"] for e in evals) / max(len(evals), 1), "prepare_seconds": prep,
            "fit_seconds": fit, "test_eval_seconds": eval_seconds,
            "test": {"NDCG@10": float(test["ndcg@10"]), "HR@10": float(test["hit@10"])},
            "train_samples": len(train_data.dataset), "peak_rss_mb": _peak_mb(), "version": recbole.__version__}


def worker_rectools(s: dict[str, Any]) -> dict[str, Any]:
    import math

    import numpy as np
    import pandas as pd
    import rectools
    import torch
    from pytorch_lightning import Callback, Trainer, seed_everything
    from pytorch_lightning.callbacks import EarlyStopping
    from rectools import Columns
    from rectools.dataset import Dataset
    from rectools.models import SASRecModel
    from rectools.models.nn.item_net import IdEmbeddingsItemNet

    torch.set_num_threads(s["threads"])
    seed_everything(s["seed"], workers=True)
    df = pd.read_csv(WORK / "data" / "train.csv", dtype={"user_id": str, "item_id": str})
    df = df.rename(columns={"user_id": Columns.User, "item_id": Columns.Item})
    df[Columns.Weight] = 1.0
    df[Columns.Datetime] = pd.to_datetime(df["position"], unit="s")
    dataset = Dataset.construct(df[[Columns.User, Columns.Item, Columns.Weight, Columns.Datetime]])

    def val_mask(interactions: pd.DataFrame) -> np.ndarray:
        """The last training interaction of every user is the validation target (attnrec's split)."""
        order = interactions.sort_values(Columns.Datetime, ascending=False, kind="stable")
        rank = order.groupby(Columns.User, sort=False).cumcount()
        return (rank.reindex(interactions.index) == 0).to_numpy()

    class Timer(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.epochs: list[float] = []
            self.evals: list[dict[str, Any]] = []
            self.start = time.perf_counter()

        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            self._t = time.perf_counter()

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            self.epochs.append(time.perf_counter() - self._t)

        def on_validation_epoch_start(self, trainer: Any, module: Any) -> None:
            self._v = time.perf_counter()

        def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
            loss = trainer.callback_metrics.get("val_loss")
            self.evals.append({"epoch": len(self.epochs), "seconds": time.perf_counter() - self._v,
                               "at_seconds": time.perf_counter() - self.start,
                               "val_loss": None if loss is None else float(loss)})

    timer = Timer()

    def get_trainer() -> Trainer:
        return Trainer(max_epochs=s["max_epochs"], deterministic=True, accelerator="cpu", devices=1,
                       enable_checkpointing=False, logger=False, enable_progress_bar=False,
                       enable_model_summary=False, check_val_every_n_epoch=s["eval_every"],
                       num_sanity_val_steps=0,
                       callbacks=[timer, EarlyStopping(monitor="val_loss", mode="min", patience=s["patience"])])

    model = SASRecModel(n_blocks=s["n_layers"], n_heads=s["n_heads"], n_factors=s["hidden"],
                        dropout_rate=s["dropout"], session_max_len=s["max_len"], loss="softmax", lr=s["lr"],
                        batch_size=s["batch_size"], epochs=s["max_epochs"], deterministic=True,
                        item_net_block_types=(IdEmbeddingsItemNet,), get_val_mask_func=val_mask,
                        get_trainer_func=get_trainer, recommend_torch_device="cpu")
    t0 = time.perf_counter()
    model.fit(dataset)
    fit = time.perf_counter() - t0
    test = json.loads((WORK / "data" / "test.json").read_text())
    t1 = time.perf_counter()
    reco = model.recommend(users=test["users"], dataset=dataset, k=10, filter_viewed=True)
    eval_seconds = time.perf_counter() - t1
    ranks = {(str(u), str(i)): int(r) for u, i, r in zip(reco[Columns.User], reco[Columns.Item], reco[Columns.Rank],
                                                         strict=True)}
    hr = ndcg = 0.0
    for u, target in zip(test["users"], test["targets"], strict=True):
        r = ranks.get((str(u), str(target)))
        if r is not None:
            hr += 1.0
            ndcg += 1.0 / math.log2(r + 1)
    n = len(test["users"])
    return {"epoch_seconds": timer.epochs, "epochs": len(timer.epochs), "evals": timer.evals,
            "valid_seconds_each": sum(e["seconds"] for e in timer.evals) / max(len(timer.evals), 1),
            "fit_seconds": fit, "test_eval_seconds": eval_seconds, "test": {"NDCG@10": ndcg / n, "HR@10": hr / n},
            "peak_rss_mb": _peak_mb(), "version": rectools.__version__,
            "note": "early stopping on validation loss (RecTools' trainer has no NDCG validation)"}


# -- report ----------------------------------------------------------------------------------------
def summarise(lib: str, r: dict[str, Any]) -> dict[str, Any]:
    secs = r["epoch_seconds"]
    r["seconds_per_epoch"] = sum(secs) / len(secs) if secs else float("nan")
    r["total_wall_seconds"] = r["fit_seconds"] + r["test_eval_seconds"] + r.get("prepare_seconds", 0.0)
    r["seconds_to_valid_ndcg_0.18"] = _first_reaching(r.get("evals", []))
    return r


def markdown(res: dict[str, Any]) -> str:
    libs = res.get("libraries", {})
    lines = ["# SASRec on ML-1M: attnrec vs RecBole vs RecTools", "",
             "Generated by `benchmarks/peers.py` from `peers.json`; do not edit.", ""]
    if "split" in res:
        sp = res["split"]
        lines += [f"Data: {sp['data']} (sha256 {sp['sha256'][:12]}), {sp['users']:,} users, {sp['items']:,} items, "
                  f"{sp['interactions']:,} interactions; split {sp['split']}; test on {sp['test_users']:,} users, "
                  "full ranking, history excluded.", "",
                  f"Settings: {json.dumps(res.get('settings', {}))}. Machine: {res.get('machine', '')}.", ""]
    if not libs:
        return "\n".join(lines + ["No results yet: run `benchmarks/peers.py`."]) + "\n"
    base = libs.get("attnrec")
    lines += ["| library | version | s/epoch | x attnrec s/epoch | epochs (best) | test eval s | total wall s | "
              "x attnrec wall | valid NDCG@10 >= 0.18 after s | peak RSS MB | test NDCG@10 | test HR@10 |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for lib, r in libs.items():
        ratio = r["seconds_per_epoch"] / base["seconds_per_epoch"] if base else float("nan")
        wall = r["total_wall_seconds"] / base["total_wall_seconds"] if base else float("nan")
        reach = r.get("seconds_to_valid_ndcg_0.18")
        lines.append(f"| {lib} | {r.get('version', '')} | {r['seconds_per_epoch']:.1f} | {ratio:.2f} | {r['epochs']} "
                     f"({r.get('best_epoch', '')}) | {r['test_eval_seconds']:.1f} | {r['total_wall_seconds']:.0f} | "
                     f"{wall:.2f} | {'-' if reach is None else f'{reach:.0f}'} | {r['peak_rss_mb']:.0f} | "
                     f"{r['test']['NDCG@10']:.4f} | {r['test']['HR@10']:.4f} |")
    lines += ["", "Notes: RecBole trains on every prefix (one target per sample); RecTools early-stops on its "
              "validation loss; attnrec and RecBole select on validation NDCG@10.",
              *[f"- {lib}: {r['note']}" for lib, r in libs.items() if r.get("note")]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        lib, settings, out = argv[1], json.loads(argv[2]), Path(argv[3])
        torch_seed = settings["seed"]
        import random

        random.seed(torch_seed)
        fn = {"recbole": worker_recbole, "rectools": worker_rectools}.get(lib)
        res = fn(settings) if fn else worker_attnrec(settings, settings["data"])
        out.write_text(json.dumps(res, indent=2))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["recbole", "rectools", "attnrec"], action="append")
    p.add_argument("--data", default=str(ML1M), help="dataset for attnrec.load_dataset (default: the papers' ML-1M)")
    p.add_argument("--max-epochs", type=int, default=SETTINGS["max_epochs"])
    p.add_argument("--threads", type=int, default=SETTINGS["threads"])
    p.add_argument("--attn-dropout", type=float, default=SETTINGS["attn_dropout"],
                   help="attnrec and RecBole; RecTools always uses dropout on attention probabilities")
    p.add_argument("--table", action="store_true", help="only rebuild peers.md from peers.json")
    p.add_argument("--out", type=Path, default=RESULTS / "peers.json")
    a = p.parse_args(argv)
    res: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {}
    if not a.table:
        WORK.mkdir(parents=True, exist_ok=True)
        settings = SETTINGS | {"max_epochs": a.max_epochs, "threads": a.threads, "attn_dropout": a.attn_dropout,
                               "data": a.data}
        res["split"] = export(a.data)
        res["settings"] = settings
        res["machine"] = f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start"
        libs = res.setdefault("libraries", {})
        for lib in a.only or ["recbole", "rectools", "attnrec"]:
            print(f"{lib}: preparing ...", flush=True)
            python = Path(sys.executable) if lib == "attnrec" else venv_python(lib)
            print(f"{lib}: training ...", flush=True)
            libs[lib] = summarise(lib, run_worker(python, lib, settings) | {"settings": settings})
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps(res, indent=2) + "\n")
            print(f"{lib}: {libs[lib]['seconds_per_epoch']:.1f} s/epoch, test NDCG@10 {libs[lib]['test']['NDCG@10']:.4f}",
                  flush=True)
    (a.out.parent / "peers.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
