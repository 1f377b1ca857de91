"""Item features inside SASRec and BERT4Rec: they change scores only through the declared paths.

The item table (input embedding and output layer) is fused from ID and feature vectors; an item's
features reach other items' scores only through the sequence encoder (when the item is in the
history), DIF-SR adds attention logits only, and SASRec stays causal with every option.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from attnrec.data.features import FeatureTable
from attnrec.data.schema import IdMap
from attnrec.models.bert4rec import BERT4Rec, BERT4RecConfig
from attnrec.models.item_context import ItemFeatures, ModelContext
from attnrec.models.sasrec import SASRec, SASRecConfig
from synthetic_logs import ring_log

N_ITEMS = 12


def item_table(n: int = N_ITEMS) -> FeatureTable:
    """Item ``i{k}``: category ``k % 3``, tags {k % 4, k % 5 + 10} (item 11 has none), price k (missing for
    5)."""
    return FeatureTable.from_frame(
        pd.DataFrame(
            {
                "item_id": [f"i{k}" for k in range(n)],
                "category": [f"c{k % 3}" for k in range(n)],
                "tags": [[] if k == 11 else [f"t{k % 4}", f"t{k % 5 + 10}"] for k in range(n)],
                "price": [np.nan if k == 5 else float(k) for k in range(n)],
            }
        ),
        "item_id",
        {"category": "categorical", "tags": "multi", "price": "numeric"},
    )


def context(fields: tuple[str, ...] = ()) -> ModelContext:
    items = IdMap(np.array([f"i{k}" for k in range(N_ITEMS)], dtype=object), 1)
    return ModelContext(ItemFeatures.from_table(item_table(), items, fields))


def sasrec(**over: object) -> SASRec:
    torch.manual_seed(0)
    cfg = SASRecConfig(hidden=16, max_len=8, n_heads=2, dropout=0.0, loss="ce", **over)  # type: ignore[arg-type]
    return SASRec(cfg, 5, N_ITEMS, context()).eval()


SEQ = torch.tensor([[0, 0, 3, 1, 4, 7, 2, 9]])


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"item_features": "mean"}, "item_features must be one of"),
        ({"id_dropout": 0.5}, "id_dropout drops ID embeddings"),
        ({"item_features": "sum", "id_dropout": 1.0}, r"id_dropout must be in \[0, 1\)"),
        ({"item_features": "sum", "sparse_embedding": True}, "sparse_embedding cannot be combined"),
    ],
)
def test_inconsistent_feature_settings_are_refused(bad: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SASRecConfig(**bad)  # type: ignore[arg-type]


def test_features_asked_for_without_feature_data_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs item features, but the data has none"):
        SASRec(SASRecConfig(item_features="sum"), 5, N_ITEMS)
    with pytest.raises(ValueError, match="unknown field"):
        context(("colour",))


def test_feature_vectors_follow_the_fields_meaning() -> None:
    model = sasrec(item_features="sum")
    assert model.item_ctx is not None
    cat, tags, price = model.item_ctx.fields
    tabs = model.item_ctx.field_tables()  # (3, 13, D)
    e = tags.proj.weight
    # item i0 (row 1): tags t0, t10 -> the mean of their two embeddings; i11 (row 12) has no tags -> zero
    codes = tags.codes[1][tags.codes[1] > 0]
    assert len(codes) == 2
    assert torch.allclose(tabs[1, 1], e[codes].mean(0))
    assert torch.equal(tabs[1, 12], torch.zeros(16))
    assert torch.equal(tabs[2, 6], torch.zeros(16))  # i5's price is missing: no contribution
    assert not torch.equal(tabs[2, 7], torch.zeros(16))
    assert torch.equal(tabs[:, 0], torch.zeros(3, 16))  # padding has no features
    assert torch.allclose(
        model.item_vectors(), model.item_emb.weight + tabs.sum(0) * (torch.arange(13) > 0)[:, None]
    )


@pytest.mark.parametrize("mode", ["sum", "concat", "gate"])
def test_an_items_features_change_its_own_row_and_nothing_else_outside_the_encoder(mode: str) -> None:
    model = sasrec(item_features=mode)
    assert model.item_ctx is not None
    before_table = model.item_vectors().detach().clone()
    query_before = model.query_vectors({"seq": SEQ}).detach().clone()  # item 5 is not in this history
    cat = model.item_ctx.fields[0]
    cat.codes[5] = cat.codes[6]  # item i4 (row 5) takes another category; its tags and price stay
    after_table = model.item_vectors().detach()
    others = torch.arange(13) != 5
    assert not torch.allclose(after_table[5], before_table[5])
    assert torch.equal(after_table[others], before_table[others])
    assert torch.equal(model.query_vectors({"seq": SEQ}), query_before)  # the history's encoding is unchanged
    # ... so only item 5's score moves
    s0, s1 = query_before @ before_table.T, query_before @ after_table.T
    assert torch.equal(s0[:, others], s1[:, others]) and not torch.allclose(s0[:, 5], s1[:, 5])


@pytest.mark.parametrize(
    "over",
    [
        {"item_features": "sum"},
        {"item_features": "concat"},
        {"item_features": "gate"},
        {"difsr": True},
        {"item_features": "gate", "difsr": True},
    ],
)
def test_sasrec_stays_causal_with_features(over: dict[str, object]) -> None:
    model = sasrec(**over)
    later = SEQ.clone()
    later[0, -1] = 11  # only the last item changes
    h0, h1 = model.encode(SEQ), model.encode(later)
    assert torch.allclose(h0[:, :-1], h1[:, :-1], atol=1e-6)
    assert not torch.allclose(h0[:, -1], h1[:, -1])


def test_difsr_reads_features_in_attention_only() -> None:
    model = sasrec(difsr=True)
    assert model.item_ctx is not None
    assert torch.equal(model.item_vectors(), model.item_emb.weight)  # the output layer is the ID embedding
    h0 = model.encode(SEQ)
    model.item_ctx.fields[0].codes[3] = model.item_ctx.fields[0].codes[
        2
    ]  # an item in the history changes category
    assert not torch.allclose(model.encode(SEQ)[:, -1], h0[:, -1])  # ... which its attention logits see


def test_id_dropout_draws_in_training_only() -> None:
    model = sasrec(item_features="sum", id_dropout=0.5)
    feat = model.item_ctx.field_tables().sum(0) if model.item_ctx is not None else None
    assert feat is not None
    assert torch.equal(model.item_vectors(), model.item_vectors())  # eval: no dropping
    model.train()
    torch.manual_seed(1)
    t = model.item_vectors()
    dropped = torch.isclose(t, feat).all(1)[1:]  # rows whose ID vector was zeroed
    assert 0 < int(dropped.sum()) < N_ITEMS


@pytest.mark.parametrize(
    "model_name, over",
    [
        ("sasrec", {"loss": "bce", "item_features": "sum", "id_dropout": 0.3}),
        ("sasrec", {"loss": "ce", "item_features": "concat"}),
        ("sasrec", {"loss": "sampled_ce", "n_negatives": 5, "item_features": "gate", "difsr": True}),
        ("bert4rec", {"item_features": "sum", "id_dropout": 0.3}),
        ("bert4rec", {"loss": "sampled_ce", "n_negatives": 5, "item_features": "gate"}),
    ],
)
def test_every_option_trains(model_name: str, over: dict[str, object]) -> None:
    data = ring_log(n_users=30, n_items=N_ITEMS)
    ctx = ModelContext(ItemFeatures.from_table(item_table(), data.items))
    torch.manual_seed(0)
    model: SASRec | BERT4Rec
    if model_name == "sasrec":
        model = SASRec(SASRecConfig(hidden=16, max_len=8, **over), data.n_users, data.n_items, ctx)  # type: ignore[arg-type]
    else:
        model = BERT4Rec(BERT4RecConfig(hidden=16, max_len=8, **over), data.n_users, data.n_items, ctx)  # type: ignore[arg-type]
    assert model.item_ctx is not None
    emb0 = model.item_ctx.fields[0].proj.weight.detach().clone()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _, batch in zip(
        range(3), model.train_batches(data.sequences(), 8, np.random.default_rng(0)), strict=False
    ):
        opt.zero_grad()
        loss = model.loss(batch)
        assert torch.isfinite(loss)
        loss.backward()
        opt.step()
    assert not torch.equal(model.item_ctx.fields[0].proj.weight, emb0)  # the feature embeddings learn
    model.eval()
    scores = model.score(model.score_inputs(np.arange(3), data.sequences().take(np.arange(3))))
    assert torch.isfinite(scores[:, 1:]).all()


def test_bert4rec_mask_token_keeps_its_own_row_with_features() -> None:
    torch.manual_seed(0)
    model = BERT4Rec(BERT4RecConfig(hidden=16, max_len=8, item_features="sum"), 5, N_ITEMS, context()).eval()
    seq = torch.tensor([[0, 3, 4, model.mask_id]])
    x = model.item_emb.weight[model.mask_id] + model.pos_emb.weight[-1]  # type: ignore[union-attr]
    assert torch.allclose(model.embed({"seq": seq})[0, -1], model.ln_emb(x))
    assert model.item_vectors().shape == (N_ITEMS + 1, 16)


def test_new_items_are_encoded_with_the_training_codes() -> None:
    spec = context().item_features
    assert spec is not None
    new = FeatureTable.from_frame(
        pd.DataFrame(
            {
                "item_id": ["n1", "n2"],
                "category": ["c2", "unseen"],
                "tags": [["t1", "zz"], ["t3"]],
                "price": [5.5, np.nan],
            }
        ),
        "item_id",
        {"category": "categorical", "tags": "multi", "price": "numeric"},
    )
    rows = spec.encode(new)
    old = spec.aligned
    assert rows.categorical["category"].tolist() == [
        old.categorical["category"][3],
        0,
    ]  # c2 as item i2; unseen -> 0
    assert rows.multi["tags"].shape[1] == old.multi["tags"].shape[1]
    assert rows.multi["tags"][0].tolist()[:2] == [
        old.multi["tags"][2][0],
        0,
    ]  # t1 as item i1's first tag; zz -> 0
    mean, std = spec.stats["price"]
    assert rows.numeric["price"][0] == pytest.approx((5.5 - mean) / std)
    assert rows.present["price"].tolist() == [True, False]
    again = ItemFeatures.from_json(spec.to_json(), N_ITEMS + 1)
    assert dataclasses.replace(again, aligned=spec.aligned) == spec
    assert again.encode(new).categorical["category"].tolist() == rows.categorical["category"].tolist()


def test_the_scoring_table_is_kept_while_its_inputs_stay() -> None:
    model = sasrec(item_features="gate")
    assert model.item_ctx is not None
    with torch.inference_mode():
        first = model.item_vectors()
        assert model.item_vectors() is first  # one tensor while the weights stay (no recompute per request)
        first._version  # a normal tensor: similar-item caches key on its version  # noqa: B018
    model.item_ctx.fields[0].codes[5] = model.item_ctx.fields[0].codes[6]  # an in-place change of an input
    with torch.inference_mode():
        again = model.item_vectors()
    assert again is not first and not torch.equal(again[5], first[5])
    assert torch.equal(again, model.item_vectors().detach())  # the kept table is the computed one


def test_feature_fields_choose_the_fields_read() -> None:
    from attnrec.models.item_context import feature_settings

    cfg = SASRecConfig(item_features="sum", feature_fields="category, tags")
    assert feature_settings(cfg) == ("sum", ("category", "tags"), False)
    model = SASRec(cfg, 5, N_ITEMS, context(feature_settings(cfg)[1]))
    assert model.item_ctx is not None and [f.kind for f in model.item_ctx.fields] == ["categorical", "multi"]
