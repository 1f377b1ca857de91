"""GRU4Rec and GRU4Rec+: packed recurrence, CE / BPR-max / TOP1-max; chain, beats POP, persistence."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from baseline_kit import (
    chain,
    demo,
    fit,
    successor_accuracy,
)

from attnrec import Recommender
from attnrec.models.gru4rec import GRU4Rec, GRU4RecConfig, GRU4RecPlus, GRU4RecPlusConfig


def small(**over: object) -> GRU4Rec:
    torch.manual_seed(0)
    cfg = GRU4RecConfig(**({"hidden": 8, "emb_dim": 6, "max_len": 12, "dropout": 0.0} | over))  # type: ignore[arg-type]
    return GRU4Rec(cfg, n_users=3, n_items=20).eval()


def test_state_ignores_left_padding_and_batch_neighbours() -> None:
    model = small(n_layers=2)
    items = [3, 7, 1, 9]
    with torch.no_grad():
        short = model.encode(torch.tensor([[0] * 2 + items]))[0, -1]
        long = model.encode(torch.tensor([[0] * 8 + items]))[0, -1]
        batch = model.encode(torch.tensor([[0] * 8 + items, [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]))
    torch.testing.assert_close(short, long)
    torch.testing.assert_close(batch[0, -1], long)
    # the state after item t depends only on items up to t (a recurrence, not attention)
    with torch.no_grad():
        changed = model.encode(torch.tensor([[0] * 8 + items[:3] + [19]]))
    torch.testing.assert_close(changed[0, -2], batch[0, -2])


def test_sampled_losses_mask_accidental_hits() -> None:
    seq = torch.tensor([[0, 0, 3, 4, 5]])
    target = torch.tensor([[0, 0, 4, 5, 6]])
    # every negative but one equals some target: the loss must only see the remaining item 9
    negative = torch.tensor([4, 5, 6, 9])
    for loss in ("bpr-max", "top1-max"):
        torch.manual_seed(0)
        plus = GRU4RecPlus(GRU4RecPlusConfig(hidden=8, emb_dim=6, max_len=5, dropout=0.0, loss=loss), 2, 20)
        got = plus.loss({"seq": seq, "target": target, "negative": negative})
        h = plus.encode(seq)[seq.gt(0) & target.gt(0)]
        pos = target[seq.gt(0) & target.gt(0)]
        r_pos = (h * plus.out_emb(pos)).sum(-1) + plus.out_bias[pos]
        r_neg = torch.stack(
            [(h * plus.out_emb.weight[n]).sum(-1) + plus.out_bias[n] for n in (4, 5, 6, 9)], 1
        )
        hit = torch.tensor([[n == p for n in (4, 5, 6, 9)] for p in pos.tolist()])
        s = r_neg.masked_fill(hit, -torch.inf).softmax(-1)
        if loss == "bpr-max":
            want = (
                -torch.log((s * torch.sigmoid(r_pos[:, None] - r_neg)).sum(-1)) + (s * r_neg**2).sum(-1)
            ).mean()
        else:
            want = (s * (torch.sigmoid(r_neg - r_pos[:, None]) + torch.sigmoid(r_neg**2))).sum(-1).mean()
        torch.testing.assert_close(got, want)


def test_config_and_registration() -> None:
    assert Recommender("gru4rec").config.loss == "ce"
    assert Recommender("gru4rec-plus").config.loss == "bpr-max"
    assert Recommender("gru4rec-plus", config={"loss": "top1-max"}).config.loss == "top1-max"
    with pytest.raises(ValueError, match="loss"):
        GRU4RecConfig(loss="top1")


@pytest.mark.parametrize(
    "name,loss", [("gru4rec", "ce"), ("gru4rec-plus", "bpr-max"), ("gru4rec-plus", "top1-max")]
)
def test_recovers_a_deterministic_chain(name: str, loss: str) -> None:
    data = chain()
    rec = fit(name, data, config={"loss": loss}, epochs=20, batch_size=32)
    assert successor_accuracy(rec, data) == 1.0


def test_sampled_negatives_follow_popularity() -> None:
    data, split = demo()
    model = GRU4RecPlus(GRU4RecPlusConfig(n_negatives=4000, sample_alpha=1.0), data.n_users, data.n_items)
    neg = next(model.train_batches(split.train, 64, np.random.default_rng(0)))["negative"].numpy()
    counts = np.bincount(split.train.items, minlength=data.n_items + 1)
    assert (neg > 0).all()
    top = np.argsort(-counts)[:10]
    assert np.isin(neg, top).mean() > 2 * 10 / data.n_items  # the head is over-represented
