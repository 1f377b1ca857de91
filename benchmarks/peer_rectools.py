"""The RecTools worker of the peer comparison (``benchmarks/peers.py``): SASRec trained and scored inside
RecTools's own environment (standard library, numpy, torch and RecTools only; never attnrec).

Run as ``peers.py --worker rectools SETTINGS OUT``; the settings are those of ``peers.SETTINGS``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from peer_common import WORK, full_ranks, peak_mb, ranking_metrics, versions


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
        return np.asarray((rank == 0) & interactions[Columns.User].isin(evaluated), dtype=bool)

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
                for r, h in enumerate(hists[lo : lo + 256]):
                    ids = [internal[i] for i in h if i in internal]  # as recommend() drops unknown items
                    if ids:
                        x[r, -min(len(ids), width) :] = ids[-width:]
                    rows += [r] * len(ids)
                    cols += ids
                sess = net.encode_sessions({"x": torch.as_tensor(x)}, item_embs)[:, -1, :]
                scores = net.similarity_module(sess, item_embs).float()
                tg = torch.tensor([internal.get(t, -1) for t in targets[lo : lo + 256]], dtype=torch.long)
                out.append(
                    full_ranks(
                        scores,
                        tg,
                        torch.tensor(rows, dtype=torch.long),
                        torch.tensor(cols, dtype=torch.long),
                        extra,
                    ).numpy()
                )
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
            m = ranking_metrics(rank_all(module, valid_hist, valid_targets))
            module.train(mode)
            self.evals.append(
                {
                    "epoch": epoch,
                    "seconds": time.perf_counter() - self._v,
                    "at_seconds": time.perf_counter() - self.start,
                    "NDCG@10": m["NDCG@10"],
                    "HR@10": m["HR@10"],
                    "val_loss": val_loss,
                }
            )
            if m["NDCG@10"] > self.best:
                self.best, self.bad, self.best_epoch = m["NDCG@10"], 0, epoch
                self.best_state = {k: v.detach().clone() for k, v in module.torch_model.state_dict().items()}
                return False
            self.bad += 1
            return self.bad >= int(s["patience"])

    def get_trainer() -> Trainer:
        return Trainer(
            max_epochs=s["max_epochs"],
            deterministic=True,
            accelerator="cpu",
            devices=1,
            enable_checkpointing=False,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            check_val_every_n_epoch=s["eval_every"],
            num_sanity_val_steps=0,
            callbacks=[Monitor()],
        )

    model = SASRecModel(
        n_blocks=s["n_layers"],
        n_heads=s["n_heads"],
        n_factors=s["hidden"],
        dropout_rate=s["dropout"],
        session_max_len=s["max_len"],
        loss="softmax",
        lr=s["lr"],
        batch_size=s["batch_size"],
        epochs=s["max_epochs"],
        deterministic=True,
        item_net_block_types=(IdEmbeddingsItemNet,),
        get_val_mask_func=val_mask,
        get_trainer_func=get_trainer,
        recommend_torch_device="cpu",
    )
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
    recheck = (
        ranking_metrics(rank_all(model.lightning_model, valid_hist, valid_targets))["NDCG@10"]
        if mon.evals
        else None
    )
    t1 = time.perf_counter()
    reco = model.recommend(users=test_users, dataset=dataset, k=10, filter_viewed=True)
    eval_seconds = time.perf_counter() - t1
    ranks = {
        (str(u), str(i)): int(r)
        for u, i, r in zip(reco[Columns.User], reco[Columns.Item], reco[Columns.Rank], strict=True)
    }
    hr = ndcg = 0.0
    for u, target in zip(test_users, test_targets, strict=True):
        r = ranks.get((u, target))  # 1-based
        if r is not None:
            hr += 1.0
            ndcg += 1.0 / math.log2(r + 1)
    n = len(test_users)
    t2 = time.perf_counter()
    check = ranking_metrics(rank_all(model.lightning_model, [history[u] for u in test_users], test_targets))
    check["seconds"] = time.perf_counter() - t2
    prep = model.lightning_model.data_preparator
    note = (
        "validation NDCG@10 (early stopping, best weights) scored by peers.py; RecTools' trainer only "
        "validates a loss; ranks the items of its training windows only"
    )
    if s["attn_dropout"] != s["dropout"]:
        note += f"; attention dropout is its single dropout rate {s['dropout']}"
    return {
        "epoch_seconds": mon.epochs,
        "epochs": len(mon.epochs),
        "best_epoch": mon.best_epoch,
        "evals": mon.evals,
        "valid_seconds_each": sum(e["seconds"] for e in mon.evals) / max(len(mon.evals), 1),
        "fit_seconds": fit,
        "test_eval_seconds": eval_seconds,
        "test": {"NDCG@10": ndcg / n, "HR@10": hr / n},
        "test_cases": n,
        "test_check": check,
        "best_valid_recheck": recheck,
        "catalog_items": len(prep.item_id_map.external_ids) - prep.n_item_extra_tokens,
        "batches_per_epoch": math.ceil(prep.train_dataset.user_id_map.size / s["batch_size"]),
        "partial_epoch": mon.partial,
        "time_cap": cap,
        "peak_rss_mb": peak_mb(),
        "version": rectools.__version__,
        "packages": versions("torch", "numpy", "pandas", "pytorch-lightning"),
        "note": note,
    }
