"""Peer comparison: RecBole's and RecTools' SASRec against attnrec's on ML-1M, same split and hyperparameters.

    nice -n 10 .venv/bin/python benchmarks/peers.py                 # all three, one library at a time
    .venv/bin/python benchmarks/peers.py --only attnrec               # one library (recbole, rectools, attnrec)
    .venv/bin/python benchmarks/peers.py --table                      # rebuild peers.md from peers.json
    .venv/bin/python benchmarks/peers.py --only rectools --data small.txt --max-epochs 2 --out /tmp/p.json
    nice -n 10 .venv/bin/python benchmarks/peers.py --time-cap 2700   # each library trains at most 45 min
    .venv/bin/python benchmarks/peers.py --table --notes benchmarks/results/peers-notes.md  # with the run's notes

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
    "hidden": 64, "n_layers": 2, "n_heads": 1, "max_len": 200, "dropout": 0.1, "attn_dropout": 0.0,
    "lr": 1e-3, "beta2": 0.98, "batch_size": 128, "max_epochs": 200, "eval_every": 2, "patience": 5, "seed": 0,
    "threads": 2, "time_cap": 0.0,
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
                if pos < len(s) - 1 or len(s) < 3:  # the test history (all but the last item) of evaluated users
                    train.write(f"{users[u]},{items[i - 1]},{pos}\n")
    test = {"users": [users[u] for u in split.test.users], "targets": [items[i - 1] for i in split.test.targets]}
    (d / "test.json").write_text(json.dumps(test))
    lengths = seqs.lengths()
    return {"data": data.source.name, "sha256": data.source.sha256, "users": data.n_users, "items": data.n_items,
            "interactions": len(data), "test_users": len(split.test), "split": split.describe(),
            "users_with_3": int((lengths == 3).sum()), "users_below_3": int((lengths < 3).sum())}


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


def _full_ranks(scores: Any, targets: Any, hist_rows: Any, hist_cols: Any, pad: Any) -> Any:
    """attnrec's full-ranking rule (``attnrec.evaluation.protocol``), for the peers' scores.

    ``scores`` is (B, n) over a library's internal item ids; ``pad`` the columns that are no item;
    ``(hist_rows, hist_cols)`` the history entries to exclude. The target stays a candidate even
    when it repeats a history item, and ties count against it. Returns 0-based ranks; a target the
    library does not know (``targets < 0``) gets the largest int64 (a miss at every cut-off).
    """
    import torch

    b = scores.shape[0]
    rows = torch.arange(b)
    known = targets >= 0
    safe = torch.where(known, targets, torch.zeros_like(targets))
    target_scores = scores[rows, safe].clone()
    scores[:, pad] = -torch.inf
    scores[hist_rows, hist_cols] = -torch.inf
    scores[rows, safe] = -torch.inf
    ranks = (scores >= target_scores[:, None]).sum(dim=1)
    return torch.where(known, ranks, torch.full_like(ranks, torch.iinfo(ranks.dtype).max))


def _ranking_metrics(ranks: Any, k: int = 10) -> dict[str, float]:
    import numpy as np

    r = np.asarray(ranks, dtype=np.float64)
    hit = r < k
    return {f"NDCG@{k}": float(np.where(hit, 1.0 / np.log2(r + 2.0), 0.0).mean()) if len(r) else float("nan"),
            f"HR@{k}": float(hit.mean()) if len(r) else float("nan")}


def _versions(*names: str) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


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
             "patience": s["patience"], "seed": s["seed"], "threads": s["threads"], "device": "cpu",
             "beta2": s.get("beta2", 0.98), "time_budget": s.get("time_cap", 0.0)}
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
            "time_cap": float(s.get("time_cap") or 0.0), "peak_rss_mb": _peak_mb(),
            "version": __import__("attnrec").__version__,
            "packages": _versions("torch", "numpy")}


def worker_recbole(s: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    _load = torch.load

    def load(*a: Any, **k: Any) -> Any:  # RecBole's checkpoints hold its pickled Config
        k.setdefault("weights_only", False)
        return _load(*a, **k)

    torch.load = load  # type: ignore[assignment]
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
        # RecBole stops after stopping_step + 1 validations without improvement; attnrec after `patience`.
        "eval_step": s["eval_every"], "stopping_step": s["patience"] - 1,
        "eval_args": {"split": {"LS": "valid_and_test"}, "order": "TO", "group_by": "user", "mode": "full"},
        "metrics": ["Hit", "NDCG"], "topk": [10], "valid_metric": "NDCG@10", "eval_batch_size": 256,
        "use_gpu": False, "device": "cpu", "seed": s["seed"], "reproducibility": True, "show_progress": False,
        "worker": 0,
    })
    init_seed(config["seed"], config["reproducibility"])
    init_logger(config)
    torch.set_num_threads(s["threads"])
    t0 = time.perf_counter()
    dataset = create_dataset(config)
    train_data, valid_data, test_data = data_preparation(config, dataset)
    prep = time.perf_counter() - t0

    # Full histories in RecBole's internal ids (its evaluation inputs keep only the last max_len items).
    uid, iid = dataset.uid_field, dataset.iid_field
    ext: dict[str, list[str]] = {}
    with open(WORK / "data" / "ml1m" / "ml1m.inter") as fh:
        next(fh)
        for line in fh:  # written in time order per user
            u, i, _ = line.rstrip("\n").split("\t")
            ext.setdefault(u, []).append(i)
    seqs = {int(dataset.token2id(uid, u)): dataset.token2id(iid, its) for u, its in ext.items()}
    test_json = json.loads((WORK / "data" / "test.json").read_text())
    evaluated = set(int(x) for x in dataset.token2id(uid, [str(u) for u in test_json["users"]]))

    model = SASRec(config, train_data._dataset).to(config["device"])
    trainer = Trainer(config, model)
    # RecBole builds plain Adam (betas 0.9, 0.999); use the shared setting instead.
    trainer.optimizer = torch.optim.Adam(model.parameters(), lr=s["lr"], betas=(0.9, s.get("beta2", 0.98)))

    def rank_all(loader: Any, drop: int) -> np.ndarray:
        """Ranks of the targets of ``loader`` (validation: drop=2, test: drop=1) under attnrec's rule."""
        model.eval()
        out = []
        with torch.no_grad():
            for batch in loader:
                inter = batch[0]
                users = inter[uid].numpy()
                keep = np.fromiter((int(u) in evaluated for u in users), bool, len(users))
                if not keep.any():
                    continue
                scores = model.full_sort_predict(inter.to(config["device"])).view(len(users), -1).float().cpu()
                rows_kept = np.flatnonzero(keep)
                scores = scores[torch.as_tensor(rows_kept)]
                targets = inter[iid][torch.as_tensor(rows_kept)]
                hist = [seqs[int(users[r])][:-drop] for r in rows_kept]
                # The split must be attnrec's: target = item -drop, input = the last max_len items before it.
                lists, lengths = inter[iid + config["LIST_SUFFIX"]].numpy(), inter[config["ITEM_LIST_LENGTH_FIELD"]].numpy()
                for j, r in enumerate(rows_kept):
                    h, n = hist[j], int(lengths[r])
                    if int(targets[j]) != seqs[int(users[r])][-drop] or n != min(len(h), s["max_len"]) or not (
                            lists[r, :n] == h[len(h) - n:]).all():
                        raise AssertionError(f"RecBole's split differs from attnrec's for user {users[r]}")
                hr = torch.as_tensor(np.repeat(np.arange(len(hist)), [len(h) for h in hist]))
                hc = torch.as_tensor(np.concatenate(hist) if hist else np.zeros(0, np.int64), dtype=torch.long)
                out.append(_full_ranks(scores, targets, hr, hc, [0]).numpy())
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    epochs: list[float] = []
    evals: list[dict[str, Any]] = []
    best: dict[str, Any] = {"NDCG@10": -1.0, "state": None}
    partial: dict[str, Any] = {}
    train_epoch, calculate_loss = trainer._train_epoch, model.calculate_loss
    batches = [0]
    cap = float(s.get("time_cap") or 0.0)
    start = time.perf_counter()

    class TimeUp(Exception):
        pass

    def capped_loss(*a: Any, **k: Any) -> Any:  # called once per training batch
        if cap and time.perf_counter() - start > cap:
            raise TimeUp
        batches[0] += 1
        return calculate_loss(*a, **k)

    def timed_train(*a: Any, **k: Any) -> Any:
        t, batches[0] = time.perf_counter(), 0
        try:
            r = train_epoch(*a, **k)
        except TimeUp:
            partial.update({"seconds": time.perf_counter() - t, "batches": batches[0]})
            raise
        epochs.append(time.perf_counter() - t)
        return r

    def valid(valid_loader: Any, show_progress: bool = False) -> tuple[float, dict[str, float]]:
        t = time.perf_counter()
        ranks = rank_all(valid_loader, drop=2)
        m = _ranking_metrics(ranks)
        evals.append({"epoch": len(epochs), "seconds": time.perf_counter() - t, "at_seconds": time.perf_counter() - start,
                      "NDCG@10": m["NDCG@10"], "HR@10": m["HR@10"], "cases": len(ranks)})
        if best["state"] is None or m["NDCG@10"] > best["NDCG@10"]:  # attnrec's rule: strictly better
            best.update({"NDCG@10": m["NDCG@10"], "state": {k: v.detach().clone() for k, v in model.state_dict().items()}})
        return m["NDCG@10"], {"ndcg@10": m["NDCG@10"], "hit@10": m["HR@10"]}

    trainer._train_epoch, trainer._valid_epoch = timed_train, valid
    model.calculate_loss = capped_loss
    # The best validated weights are kept in memory (as attnrec keeps them), not in RecBole's pickled file.
    try:
        trainer.fit(train_data, valid_data, saved=False, show_progress=False)
    except TimeUp:  # the cap fell inside an epoch: validate the weights reached so far, as a last epoch would
        valid(valid_data)
        evals[-1]["epoch"] = len(epochs) + partial["batches"] / len(train_data)
    fit = time.perf_counter() - start
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    # The restored weights must give the best validation score again (not timed).
    recheck = _ranking_metrics(rank_all(valid_data, drop=2))["NDCG@10"] if evals else None
    t1 = time.perf_counter()
    test_ranks = rank_all(test_data, drop=1)
    test = _ranking_metrics(test_ranks)
    eval_seconds = time.perf_counter() - t1
    t2 = time.perf_counter()
    own = trainer.evaluate(test_data, load_best_model=False, show_progress=False)  # RecBole's protocol: no exclusion
    own_seconds = time.perf_counter() - t2
    best = max(evals, key=lambda e: e["NDCG@10"]) if evals else {"epoch": len(epochs)}
    note = "test metrics scored by peers.py (RecBole's full-sort evaluation does not exclude the history)"
    short = sum(1 for u in evaluated if len(seqs[u]) == 3)
    if short:
        note += f"; {short} users with exactly 3 items are trained on their validation item and not validated"
    return {"epoch_seconds": epochs, "epochs": len(epochs), "best_epoch": best["epoch"], "evals": evals,
            "valid_seconds_each": sum(e["seconds"] for e in evals) / max(len(evals), 1), "prepare_seconds": prep,
            "fit_seconds": fit, "test_eval_seconds": eval_seconds, "test": test, "test_cases": len(test_ranks),
            "best_valid_recheck": recheck,
            "test_own_protocol": {"NDCG@10": float(own["ndcg@10"]), "HR@10": float(own["hit@10"]),
                                  "seconds": own_seconds, "protocol": "full ranking, history not excluded"},
            "train_samples": len(train_data._dataset), "batches_per_epoch": len(train_data),
            "partial_epoch": partial or None, "time_cap": cap,
            "peak_rss_mb": _peak_mb(), "version": recbole.__version__,
            "packages": _versions("torch", "numpy", "scipy", "pandas"), "note": note}


def worker_rectools(s: dict[str, Any]) -> dict[str, Any]:
    import math

    import numpy as np
    import pandas as pd
    import rectools
    import torch
    from pytorch_lightning import Callback, Trainer, seed_everything
    from rectools import Columns
    from rectools.dataset import Dataset
    from rectools.models import SASRecModel
    from rectools.models.nn.item_net import IdEmbeddingsItemNet

    torch.set_num_threads(s["threads"])
    seed_everything(s["seed"], workers=True)
    if s.get("beta2", 0.98) != 0.98:
        raise SystemExit("RecTools' SASRec fixes Adam's betas at (0.9, 0.98)")
    df = pd.read_csv(WORK / "data" / "train.csv", dtype={"user_id": str, "item_id": str})
    df = df.rename(columns={"user_id": Columns.User, "item_id": Columns.Item})
    df[Columns.Weight] = 1.0
    df[Columns.Datetime] = pd.to_datetime(df["position"], unit="s")
    dataset = Dataset.construct(df[[Columns.User, Columns.Item, Columns.Weight, Columns.Datetime]])
    test = json.loads((WORK / "data" / "test.json").read_text())
    test_users, test_targets = [str(u) for u in test["users"]], [str(i) for i in test["targets"]]
    evaluated = set(test_users)
    # train.csv holds each user's test history in time order: its last item is the validation target
    # of an evaluated user, the items before it that user's validation history.
    history = df.groupby(Columns.User, sort=False)[Columns.Item].agg(list).to_dict()
    valid_hist = [history[u][:-1] for u in test_users]
    valid_targets = [history[u][-1] for u in test_users]

    def val_mask(interactions: pd.DataFrame) -> np.ndarray:
        """The last interaction of every evaluated user is its validation target (attnrec's split)."""
        order = interactions.sort_values(Columns.Datetime, ascending=False, kind="stable")
        rank = order.groupby(Columns.User, sort=False).cumcount().reindex(interactions.index)
        return ((rank == 0) & interactions[Columns.User].isin(evaluated)).to_numpy()

    def rank_all(module: Any, hists: list[list[str]], targets: list[str]) -> np.ndarray:
        """Ranks of the targets under attnrec's rule, from RecTools' network (last position's logits)."""
        prep = module.data_preparator
        internal = prep.item_id_map.to_internal.to_dict()
        extra = list(range(prep.n_item_extra_tokens))  # padding (and any other extra token) is no item
        net, width = module.torch_model, s["max_len"]
        out = []
        with torch.no_grad():
            item_embs = net.item_model.get_all_embeddings()
            for lo in range(0, len(targets), 256):
                x = np.zeros((min(256, len(targets) - lo), width), dtype=np.int64)
                rows: list[int] = []
                cols: list[int] = []
                for r, h in enumerate(hists[lo:lo + 256]):
                    ids = [internal[i] for i in h if i in internal]  # as recommend() drops unknown items
                    if ids:
                        x[r, -min(len(ids), width):] = ids[-width:]
                    rows += [r] * len(ids)
                    cols += ids
                sess = net.encode_sessions({"x": torch.as_tensor(x)}, item_embs)[:, -1, :]
                scores = net.similarity_module(sess, item_embs).float()
                tg = torch.tensor([internal.get(t, -1) for t in targets[lo:lo + 256]], dtype=torch.long)
                out.append(_full_ranks(scores, tg, torch.tensor(rows, dtype=torch.long),
                                       torch.tensor(cols, dtype=torch.long), extra).numpy())
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    cap = float(s.get("time_cap") or 0.0)

    class Monitor(Callback):  # type: ignore[misc]
        """Times epochs and validations, validates NDCG@10 under attnrec's protocol, keeps the best
        weights, stops after ``patience`` validations without improvement (RecTools' trainer only
        computes a validation loss, recorded too) and, with a time cap, after the batch that passes it."""

        def __init__(self) -> None:
            self.epochs: list[float] = []
            self.evals: list[dict[str, Any]] = []
            self.best, self.bad, self.best_epoch = -math.inf, 0, 0.0
            self.best_state: dict[str, Any] | None = None
            self.partial: dict[str, Any] | None = None
            self.capped_at: float | None = None
            self._v = time.perf_counter()

        def on_train_start(self, trainer: Any, module: Any) -> None:
            self.start = time.perf_counter()

        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            self._t = self._last = time.perf_counter()
            self._batches = 0

        def on_train_batch_end(self, trainer: Any, module: Any, *a: Any) -> None:
            self._last = time.perf_counter()
            self._batches += 1
            if cap and self.capped_at is None and self._last - self.start > cap:
                self.capped_at = self._last - self.start
                trainer.should_stop = True

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            # Training batches only; validation runs before this hook.
            if self._batches < trainer.num_training_batches:
                self.partial = {"seconds": self._last - self._t, "batches": self._batches}
            else:
                self.epochs.append(self._last - self._t)

        def on_validation_start(self, trainer: Any, module: Any) -> None:
            self._v = time.perf_counter()

        def on_validation_end(self, trainer: Any, module: Any) -> None:
            loss = trainer.callback_metrics.get("val_loss")
            if self.validate(module, trainer.current_epoch + 1, None if loss is None else float(loss)):
                trainer.should_stop = True

        def validate(self, module: Any, epoch: float, val_loss: float | None = None) -> bool:
            """Score the current weights; whether patience has run out."""
            mode = module.training
            module.eval()
            m = _ranking_metrics(rank_all(module, valid_hist, valid_targets))
            module.train(mode)
            self.evals.append({"epoch": epoch, "seconds": time.perf_counter() - self._v,
                               "at_seconds": time.perf_counter() - self.start, "NDCG@10": m["NDCG@10"],
                               "HR@10": m["HR@10"], "val_loss": val_loss})
            if m["NDCG@10"] > self.best:
                self.best, self.bad, self.best_epoch = m["NDCG@10"], 0, epoch
                self.best_state = {k: v.detach().clone() for k, v in module.torch_model.state_dict().items()}
                return False
            self.bad += 1
            return self.bad >= s["patience"]

    def get_trainer() -> Trainer:
        return Trainer(max_epochs=s["max_epochs"], deterministic=True, accelerator="cpu", devices=1,
                       enable_checkpointing=False, logger=False, enable_progress_bar=False,
                       enable_model_summary=False, check_val_every_n_epoch=s["eval_every"],
                       num_sanity_val_steps=0, callbacks=[Monitor()])

    model = SASRecModel(n_blocks=s["n_layers"], n_heads=s["n_heads"], n_factors=s["hidden"],
                        dropout_rate=s["dropout"], session_max_len=s["max_len"], loss="softmax", lr=s["lr"],
                        batch_size=s["batch_size"], epochs=s["max_epochs"], deterministic=True,
                        item_net_block_types=(IdEmbeddingsItemNet,), get_val_mask_func=val_mask,
                        get_trainer_func=get_trainer, recommend_torch_device="cpu")
    t0 = time.perf_counter()
    model.fit(dataset)
    fit = time.perf_counter() - t0
    assert model.fit_trainer is not None
    # fit() trains a deep copy of the trainer, callbacks included.
    mon = next(c for c in model.fit_trainer.callbacks if isinstance(c, Monitor))
    if mon.capped_at is not None and (not mon.evals or mon.evals[-1]["at_seconds"] < mon.capped_at):
        # Stopped inside an epoch by the cap: validate the weights reached so far, as a last epoch would.
        done = (mon.partial or {}).get("batches", 0) / max(model.fit_trainer.num_training_batches, 1)
        mon._v = time.perf_counter()
        mon.validate(model.lightning_model, len(mon.epochs) + done)
        fit = time.perf_counter() - t0
    if mon.best_state is not None:
        model.torch_model.load_state_dict(mon.best_state)
    model.torch_model.eval()
    # The restored weights must give the best validation score again (not timed).
    recheck = _ranking_metrics(rank_all(model.lightning_model, valid_hist, valid_targets))["NDCG@10"] if mon.evals else None
    t1 = time.perf_counter()
    reco = model.recommend(users=test_users, dataset=dataset, k=10, filter_viewed=True)
    eval_seconds = time.perf_counter() - t1
    ranks = {(str(u), str(i)): int(r) for u, i, r in zip(reco[Columns.User], reco[Columns.Item], reco[Columns.Rank],
                                                         strict=True)}
    hr = ndcg = 0.0
    for u, target in zip(test_users, test_targets, strict=True):
        r = ranks.get((u, target))  # 1-based
        if r is not None:
            hr += 1.0
            ndcg += 1.0 / math.log2(r + 1)
    n = len(test_users)
    t2 = time.perf_counter()
    check = _ranking_metrics(rank_all(model.lightning_model, [history[u] for u in test_users], test_targets))
    check["seconds"] = time.perf_counter() - t2
    prep = model.lightning_model.data_preparator
    note = ("validation NDCG@10 (early stopping, best weights) scored by peers.py; RecTools' trainer only "
            "validates a loss; ranks the items of its training windows only")
    if s["attn_dropout"] != s["dropout"]:
        note += f"; attention dropout is its single dropout rate {s['dropout']}"
    return {"epoch_seconds": mon.epochs, "epochs": len(mon.epochs), "best_epoch": mon.best_epoch, "evals": mon.evals,
            "valid_seconds_each": sum(e["seconds"] for e in mon.evals) / max(len(mon.evals), 1),
            "fit_seconds": fit, "test_eval_seconds": eval_seconds, "test": {"NDCG@10": ndcg / n, "HR@10": hr / n},
            "test_cases": n, "test_check": check, "best_valid_recheck": recheck, "catalog_items": len(prep.item_id_map.external_ids)
            - prep.n_item_extra_tokens, "batches_per_epoch": math.ceil(prep.train_dataset.user_id_map.size
                                                                     / s["batch_size"]),
            "partial_epoch": mon.partial, "time_cap": cap,
            "peak_rss_mb": _peak_mb(), "version": rectools.__version__,
            "packages": _versions("torch", "numpy", "pandas", "pytorch-lightning"), "note": note}


# -- report ----------------------------------------------------------------------------------------
def summarise(lib: str, r: dict[str, Any]) -> dict[str, Any]:
    secs = r["epoch_seconds"]
    part = r.get("partial_epoch")
    r["seconds_per_epoch_estimated"] = not secs and bool(part and part["batches"])
    if secs:
        r["seconds_per_epoch"] = sum(secs) / len(secs)
    elif r["seconds_per_epoch_estimated"]:  # no whole epoch within the cap: scale the batches it did
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


def markdown(res: dict[str, Any], notes: str = "") -> str:
    """peers.md from the results in ``res``, with ``notes`` (markdown on how the run went) at the end."""
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
        cap = _time_cap(r)
        never = f"not within the {cap:.0f} s cap" if cap else "never"
        est = " (est.)" if r.get("seconds_per_epoch_estimated") else ""
        part = r.get("partial_epoch")
        epochs = f"{r['epochs']}" + (f" + {part['batches']}/{r['batches_per_epoch']} batches" if part else "")
        best = r.get("best_epoch", "")
        best = f"{best:.2f}" if isinstance(best, float) else best
        lines.append(f"| {lib} | {r.get('version', '')} | {r['seconds_per_epoch']:.1f}{est} | {ratio:.2f} | {epochs} "
                     f"({best}) | {r['test_eval_seconds']:.1f} | {r['total_wall_seconds']:.0f} | "
                     f"{wall:.2f} | {never if reach is None else f'{reach:.0f}'} | {r['peak_rss_mb']:.0f} | "
                     f"{r['test']['NDCG@10']:.4f} | {r['test']['HR@10']:.4f} |")
    caps = {_time_cap(r) for r in libs.values()}
    lines += ["", "Notes: all three validate and test under the same protocol (full ranking, history excluded) and "
              "keep the weights of the best validation NDCG@10; the peers' models are scored by peers.py where the "
              "library cannot do it. RecBole trains on every prefix (one target per sample) with post-LN blocks.",
              *(["- Time cap: each library's training stops once it has run "
                 + " / ".join(f"{c:.0f} s" for c in sorted(caps)) + " (the peers after the batch that passes it, "
                 "then their weights so far are validated as a last epoch would be; attnrec at the end of the epoch "
                 "that passes it). A capped run's test figures are those of its best validated weights within the "
                 "cap, not of a converged model; \"not within the cap\" means its time to NDCG@10 0.18 is longer "
                 "than the cap. Seconds per epoch marked (est.) come from the batches of an unfinished epoch."]
                if any(caps) else []),
              *[f"- {lib}: {r['note']}" for lib, r in libs.items() if r.get("note")],
              *[f"- {lib} under its own protocol ({o['protocol']}): NDCG@10 {o['NDCG@10']:.4f}, HR@10 {o['HR@10']:.4f}"
                for lib, r in libs.items() if (o := r.get("test_own_protocol"))]]
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
        fn = {"recbole": worker_recbole, "rectools": worker_rectools}.get(lib)
        result = fn(settings) if fn else worker_attnrec(settings, settings["data"])
        out.write_text(json.dumps(result, indent=2))
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["recbole", "rectools", "attnrec"], action="append")
    p.add_argument("--data", default=str(ML1M), help="dataset for attnrec.load_dataset (default: the papers' ML-1M)")
    p.add_argument("--max-epochs", type=int, default=SETTINGS["max_epochs"])
    p.add_argument("--threads", type=int, default=SETTINGS["threads"])
    p.add_argument("--attn-dropout", type=float, default=SETTINGS["attn_dropout"],
                   help="attnrec and RecBole; RecTools always uses dropout on attention probabilities")
    p.add_argument("--dropout", type=float, default=SETTINGS["dropout"], help="dropout on hidden states (all three)")
    p.add_argument("--time-cap", type=float, default=SETTINGS["time_cap"],
                   help="seconds of training per library, 0 = none (RecBole's epoch on ML-1M takes over an hour)")
    p.add_argument("--table", action="store_true", help="only rebuild peers.md from peers.json")
    p.add_argument("--out", type=Path, default=RESULTS / "peers.json")
    p.add_argument("--notes", type=Path, help="a markdown file (how and where the run went) to include in peers.md")
    a = p.parse_args(argv)
    res: dict[str, Any] = json.loads(a.out.read_text()) if a.out.exists() else {}
    if not a.table:
        WORK.mkdir(parents=True, exist_ok=True)
        settings = SETTINGS | {"max_epochs": a.max_epochs, "threads": a.threads, "attn_dropout": a.attn_dropout,
                               "dropout": a.dropout, "time_cap": a.time_cap, "data": a.data}
        res["split"] = export(a.data)
        res["settings"] = settings
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        res["machine"] = (f"{os.cpu_count()} cores, run on CPUs {cpus}, load average {os.getloadavg()[0]:.1f} "
                          "at the start")
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
    md = markdown(res, a.notes.read_text() if a.notes else "")
    (a.out.parent / "peers.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
