"""The RecBole worker of the peer comparison (``benchmarks/peers.py``): SASRec trained and scored inside
RecBole's own environment (standard library, numpy, torch and RecBole only; never attnrec).

Run as ``peers.py --worker recbole SETTINGS OUT``; the settings are those of ``peers.SETTINGS``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from peer_common import WORK, full_ranks, peak_mb, ranking_metrics, versions


def worker_recbole(s: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    _load = torch.load

    def load(*a: Any, **k: Any) -> Any:  # RecBole's checkpoints hold its pickled Config
        k.setdefault("weights_only", False)
        return _load(*a, **k)

    torch.load = load
    import recbole
    from recbole.config import Config
    from recbole.data import create_dataset, data_preparation
    from recbole.model.sequential_recommender import SASRec
    from recbole.trainer import Trainer
    from recbole.utils import init_logger, init_seed

    config = Config(
        model="SASRec",
        dataset="ml1m",
        config_dict={
            "data_path": str(WORK / "data"),
            "checkpoint_dir": str(WORK / "recbole-saved"),
            "USER_ID_FIELD": "user_id",
            "ITEM_ID_FIELD": "item_id",
            "TIME_FIELD": "timestamp",
            "load_col": {"inter": ["user_id", "item_id", "timestamp"]},
            "user_inter_num_interval": "[0,inf)",
            "item_inter_num_interval": "[0,inf)",
            "MAX_ITEM_LIST_LENGTH": s["max_len"],
            "n_layers": s["n_layers"],
            "n_heads": s["n_heads"],
            "hidden_size": s["hidden"],
            "inner_size": s["hidden"],
            "hidden_dropout_prob": s["dropout"],
            "attn_dropout_prob": s["attn_dropout"],
            "hidden_act": "relu",
            "layer_norm_eps": 1e-8,
            "initializer_range": 0.02,
            "loss_type": "CE",
            "train_neg_sample_args": None,
            "learning_rate": s["lr"],
            "train_batch_size": s["batch_size"],
            "epochs": s["max_epochs"],
            # RecBole stops after stopping_step + 1 validations without improvement; attnrec after `patience`.
            "eval_step": s["eval_every"],
            "stopping_step": s["patience"] - 1,
            "eval_args": {
                "split": {"LS": "valid_and_test"},
                "order": "TO",
                "group_by": "user",
                "mode": "full",
            },
            "metrics": ["Hit", "NDCG"],
            "topk": [10],
            "valid_metric": "NDCG@10",
            "eval_batch_size": 256,
            "use_gpu": False,
            "device": "cpu",
            "seed": s["seed"],
            "reproducibility": True,
            "show_progress": False,
            "worker": 0,
        },
    )
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
                scores = (
                    model.full_sort_predict(inter.to(config["device"])).view(len(users), -1).float().cpu()
                )
                rows_kept = np.flatnonzero(keep)
                scores = scores[torch.as_tensor(rows_kept)]
                targets = inter[iid][torch.as_tensor(rows_kept)]
                hist = [seqs[int(users[r])][:-drop] for r in rows_kept]
                # The split must be attnrec's: target = item -drop, input = the last max_len items before it.
                lists, lengths = (
                    inter[iid + config["LIST_SUFFIX"]].numpy(),
                    inter[config["ITEM_LIST_LENGTH_FIELD"]].numpy(),
                )
                for j, r in enumerate(rows_kept):
                    h, n = hist[j], int(lengths[r])
                    if (
                        int(targets[j]) != seqs[int(users[r])][-drop]
                        or n != min(len(h), s["max_len"])
                        or not (lists[r, :n] == h[len(h) - n :]).all()
                    ):
                        raise AssertionError(f"RecBole's split differs from attnrec's for user {users[r]}")
                hr = torch.as_tensor(np.repeat(np.arange(len(hist)), [len(h) for h in hist]))
                hc = torch.as_tensor(
                    np.concatenate(hist) if hist else np.zeros(0, np.int64), dtype=torch.long
                )
                out.append(full_ranks(scores, targets, hr, hc, [0]).numpy())
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
        m = ranking_metrics(ranks)
        evals.append(
            {
                "epoch": len(epochs),
                "seconds": time.perf_counter() - t,
                "at_seconds": time.perf_counter() - start,
                "NDCG@10": m["NDCG@10"],
                "HR@10": m["HR@10"],
                "cases": len(ranks),
            }
        )
        if best["state"] is None or m["NDCG@10"] > best["NDCG@10"]:  # attnrec's rule: strictly better
            best.update(
                {
                    "NDCG@10": m["NDCG@10"],
                    "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
                }
            )
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
    recheck = ranking_metrics(rank_all(valid_data, drop=2))["NDCG@10"] if evals else None
    t1 = time.perf_counter()
    test_ranks = rank_all(test_data, drop=1)
    test = ranking_metrics(test_ranks)
    eval_seconds = time.perf_counter() - t1
    t2 = time.perf_counter()
    own = trainer.evaluate(
        test_data, load_best_model=False, show_progress=False
    )  # RecBole's protocol: no exclusion
    own_seconds = time.perf_counter() - t2
    best = max(evals, key=lambda e: e["NDCG@10"]) if evals else {"epoch": len(epochs)}
    note = "test metrics scored by peers.py (RecBole's full-sort evaluation does not exclude the history)"
    short = sum(1 for u in evaluated if len(seqs[u]) == 3)
    if short:
        note += f"; {short} users with exactly 3 items are trained on their validation item and not validated"
    return {
        "epoch_seconds": epochs,
        "epochs": len(epochs),
        "best_epoch": best["epoch"],
        "evals": evals,
        "valid_seconds_each": sum(e["seconds"] for e in evals) / max(len(evals), 1),
        "prepare_seconds": prep,
        "fit_seconds": fit,
        "test_eval_seconds": eval_seconds,
        "test": test,
        "test_cases": len(test_ranks),
        "best_valid_recheck": recheck,
        "test_own_protocol": {
            "NDCG@10": float(own["ndcg@10"]),
            "HR@10": float(own["hit@10"]),
            "seconds": own_seconds,
            "protocol": "full ranking, history not excluded",
        },
        "train_samples": len(train_data._dataset),
        "batches_per_epoch": len(train_data),
        "partial_epoch": partial or None,
        "time_cap": cap,
        "peak_rss_mb": peak_mb(),
        "version": recbole.__version__,
        "packages": versions("torch", "numpy", "scipy", "pandas"),
        "note": note,
    }
