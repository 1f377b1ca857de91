"""eSASRec: a LiGR layer computed by hand, causality, the sampled softmax against the full one, and that it
learns."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnrec import Recommender
from attnrec.data.schema import Interactions, Sequences
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL
from attnrec.models.esasrec import ESASRec, ESASRecConfig, LiGRLayer
from attnrec.models.nn.layers import FastDropout
from attnrec.models.nn.masks import causal_mask
from attnrec.models.objectives.kernels import sampled_softmax_cross_entropy
from causality import assert_causal
from position_negatives import position_batch

SMALL = {"hidden": 16, "n_layers": 2, "n_heads": 2, "max_len": 12, "dropout": 0.1, "n_negatives": 8}


def _model(**over: object) -> ESASRec:
    torch.manual_seed(0)
    return ESASRec(ESASRecConfig(**(SMALL | over)), n_users=5, n_items=30).eval()  # type: ignore[arg-type]


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def _ln2(a: float, b: float, eps: float = 1e-5) -> tuple[float, float]:
    """LayerNorm (no affine) of a 2-vector: (+-d, -+d) / sqrt(d^2 + eps) with d half the difference."""
    d = (a - b) / 2
    return d / math.sqrt(d * d + eps), -d / math.sqrt(d * d + eps)


def test_ligr_layer_by_hand() -> None:
    """d = 2, one head, two positions, weights set so every step is plain arithmetic.

    q = k = 0 (attention is uniform over the allowed keys), v = out = I, the attention gate G1 = I
    (so it reads x itself), SwiGLU W1 = W3 = W2 = I (f = SiLU(z) * z = z^2 sigmoid(z)), and the FFN
    gate G2 = 0 with bias (0, ln 3), i.e. sigmoid = (1/2, 3/4).
    """
    layer = LiGRLayer(
        ESASRecConfig(hidden=2, n_heads=1, n_layers=1, max_len=4, dropout=0.0, ff_multiplier=1)
    ).eval()
    eye = torch.eye(2)
    with torch.no_grad():
        for lin in (layer.attn.q, layer.attn.k):
            lin.weight.zero_()
            lin.bias.zero_()
        for lin in (layer.attn.v, layer.attn.out, layer.gate_attn):
            lin.weight.copy_(eye)
            lin.bias.zero_()
        for lin in (layer.ffn.w1, layer.ffn.w3, layer.ffn.w2):
            lin.weight.copy_(eye)
        layer.gate_ffn.weight.zero_()
        layer.gate_ffn.bias.copy_(torch.tensor([0.0, math.log(3.0)]))
        x = torch.tensor([[[2.0, 0.0], [0.0, 2.0]]])  # (1, 2, 2)
        got, weights = layer(x, causal_mask(torch.tensor([[1, 2]])), need_weights=True)
        last, _ = layer(x, causal_mask(torch.tensor([[1, 2]])), last=1)

    z0, z1 = _ln2(2.0, 0.0), _ln2(0.0, 2.0)  # LN(x): the attention's queries, keys and values
    a0 = z0  # position 0 sees only itself
    a1 = ((z0[0] + z1[0]) / 2, (z0[1] + z1[1]) / 2)  # position 1: the mean of both values (= 0)
    h0 = (2.0 + _sigmoid(2.0) * a0[0], 0.0 + _sigmoid(0.0) * a0[1])  # gate sigmoid(x), not of LN(x)
    h1 = (0.0 + _sigmoid(0.0) * a1[0], 2.0 + _sigmoid(2.0) * a1[1])
    out = []
    for h in (h0, h1):
        y = _ln2(*h)
        f = (y[0] ** 2 * _sigmoid(y[0]), y[1] ** 2 * _sigmoid(y[1]))  # SiLU(y) * y
        out.append([h[0] + 0.5 * f[0], h[1] + 0.75 * f[1]])
    torch.testing.assert_close(got, torch.tensor([out]), rtol=0, atol=1e-5)
    torch.testing.assert_close(weights, torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]]))
    torch.testing.assert_close(last, got[:, 1:])


def test_causal_future_items_do_not_change_past_outputs() -> None:
    assert_causal(_model().encode)


def test_scoring_state_is_the_full_pass_last_row_and_ignores_padding() -> None:
    m = _model(n_layers=3, max_len=10, dropout=0.3)
    hist = Sequences.from_lists([[3, 7, 1], [4], list(range(1, 9))], 30)
    batch = m.score_inputs(np.arange(3), hist)  # padded to the longest history, 8
    with torch.no_grad():
        full = m.encode(batch["seq"])[:, -1, :]  # (B, D) every position in every layer
        torch.testing.assert_close(m.query_vectors(batch), full, rtol=1e-5, atol=1e-6)
        wide = m.score({"seq": torch.from_numpy(hist.padded(10))})  # more padding, same scores
        m.item_emb.weight[0].normal_()  # whatever the padding vector holds, nothing changes
        torch.testing.assert_close(m.score(batch), wide, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wide[:, 1:], (full @ m.item_vectors().T)[:, 1:], rtol=1e-5, atol=1e-5)
    assert torch.isneginf(wide[:, 0]).all()


def test_attention_never_looks_ahead_nor_at_padding() -> None:
    m = _model()
    seq = torch.tensor([[0, 0, 0, 3, 7, 1, 9, 4, 2, 8, 5, 6], [0] * 9 + [4, 5, 6]])
    with torch.no_grad():
        maps = m.attention_weights(seq)
    real = seq > 0
    assert len(maps) == 2 and maps[0].shape == (2, 2, 12, 12)
    for w in maps:
        assert torch.allclose(w.sum(-1), torch.ones(2, 2, 12))
        assert w.triu(1).abs().max() == 0
        for b in range(2):
            assert w[b][:, real[b]][:, :, ~real[b]].abs().max() == 0


def test_sampled_softmax_over_every_item_is_the_full_softmax() -> None:
    torch.manual_seed(0)
    h, emb = torch.randn(6, 4), torch.randn(9, 4)  # 8 items + padding row
    target = torch.tensor([1, 8, 3, 3, 5, 2])
    every = torch.arange(1, 9)  # each item drawn once: the target too, masked as an accidental hit
    pos_logit, neg_logit = (h * emb[target]).sum(-1), h @ emb[every].T
    full = F.cross_entropy(h @ emb[1:].T, target - 1)
    torch.testing.assert_close(sampled_softmax_cross_entropy(pos_logit, neg_logit, target, every), full)
    same_q = torch.full((8,), math.log(3.0))  # a constant log-Q correction changes nothing
    got = sampled_softmax_cross_entropy(
        pos_logit, neg_logit, target, every, torch.full((6,), math.log(3.0)), same_q
    )
    torch.testing.assert_close(got, full)
    # and through the model: sampled_ce with every item as a negative is its ce loss
    ce = _model(loss="ce", dropout=0.0)
    sampled = _model(loss="sampled_ce", dropout=0.0)
    sampled.load_state_dict(ce.state_dict())
    batch = next(
        iter(
            ce.train_batches(
                Sequences.from_lists([[1, 2, 3, 4, 5], [6, 7, 8]], 30), 8, np.random.default_rng(0)
            )
        )
    )
    with torch.no_grad():
        torch.testing.assert_close(sampled.loss(batch | {"negative": torch.arange(1, 31)}), ce.loss(batch))


def test_batches_share_negatives_and_shift_targets() -> None:
    m = _model(n_negatives=20)
    train = Sequences.from_lists([[1, 2, 3, 4], [5, 6]], 30)
    batch = next(iter(m.train_batches(train, 8, np.random.default_rng(0))))
    assert batch["negative"].shape == (20,) and set(batch) == {
        "seq",
        "target",
        "negative",
    }  # uniform: no log-Q
    for seq, tgt in zip(batch["seq"], batch["target"], strict=True):
        real = tgt > 0
        assert torch.equal(seq[real][1:], tgt[real][:-1])
    pop = _model(sampler="popularity")
    assert {"neg_logq", "target_logq"} <= set(
        next(iter(pop.train_batches(train, 8, np.random.default_rng(0))))
    )


def test_save_load_gives_identical_scores(ring: Interactions, tmp_path: Path) -> None:
    split = leave_one_out(ring)
    rec = Recommender("esasrec", SMALL, {"max_epochs": 1, "batch_size": 64}).fit(ring, split, progress=False)
    loaded = Recommender.load(rec.save(tmp_path / "esasrec"))
    assert loaded.config == rec.config
    rows = np.arange(8)
    users, hist = split.test.users[rows], split.test.histories.take(rows)
    torch.testing.assert_close(rec.score_histories(users, hist), loaded.score_histories(users, hist))


@pytest.mark.slow
def test_onnx_export_of_the_encoder_matches_torch(ring: Interactions, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from attnrec.serving.export import export_onnx, parity, session

    rec = Recommender("esasrec", SMALL, {"max_epochs": 1, "batch_size": 64}).fit(ring, progress=False)
    sess = session(export_onnx(rec, tmp_path / "esasrec.onnx"), threads=1)
    assert sess.get_outputs()[0].name == "query"  # factorised: the LiGR encoder only
    for rows in ([[3]], [[3, 7, 1], [4], list(range(1, 12))]):  # the sequence length is dynamic
        hist = Sequences.from_lists(rows, ring.n_items)
        assert parity(rec, sess, rec.core.score_inputs(np.zeros(len(rows), dtype=np.int64), hist)) < 1e-4


def test_learns_sequential_structure_beyond_popularity(ring: Interactions) -> None:
    split = leave_one_out(ring)
    train = {"max_epochs": 15, "batch_size": 32, "lr": 5e-3, "patience": 3}
    e = Recommender("esasrec", SMALL, train).fit(ring, split, progress=False)
    pop = Recommender("pop").fit(ring, split, progress=False)
    hr_e = e.evaluate(split.test, FULL).metrics["HR@10"]
    hr_pop = pop.evaluate(split.test, FULL).metrics["HR@10"]
    assert hr_e > hr_pop + 0.2, (hr_e, hr_pop)


def test_presets_carry_the_published_settings() -> None:
    ml = Recommender("esasrec", preset="ml-1m")
    assert (ml.config.hidden, ml.config.n_layers, ml.config.max_len, ml.config.dropout) == (64, 2, 200, 0.1)
    assert {
        p: Recommender("esasrec", preset=p).config.ff_multiplier for p in ("beauty", "sports", "toys")
    } == {"beauty": 4, "sports": 2, "toys": 1}
    # The Amazon presets are the training that reproduced the published Toys and Sports figures under the
    # authors' protocol: the README table's width 64 (not the loo configs' 256), item-table dropout,
    # 256 negatives per position, attention dropout at the preset's 0.2.
    for p in ("beauty", "sports", "toys"):
        c = Recommender("esasrec", preset=p).config
        assert (c.hidden, c.n_layers, c.max_len, c.dropout, c.attn_dropout) == (64, 1, 50, 0.2, None), p
        assert (c.n_negatives, c.negatives, c.item_table_dropout) == (256, "position", True), p


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="loss must be sampled_ce or ce, not 'bce'"):
        ESASRecConfig(loss="bce")
    with pytest.raises(
        ValueError, match="^hidden, n_layers, n_heads, max_len and ff_multiplier must be positive$"
    ):
        ESASRecConfig(ff_multiplier=0)
    with pytest.raises(ValueError, match="hidden size 10 is not divisible by 3 heads"):
        ESASRec(ESASRecConfig(hidden=10, n_heads=3), 1, 5)


def test_per_sequence_negatives_score_each_position_against_its_own_sequences() -> None:
    m = _model(negatives="sequence", dropout=0.0)
    assert m.shared_batch_keys == frozenset()  # per-row negatives are split with the rows under DDP
    assert _model().shared_batch_keys == frozenset({"negative", "neg_logq"})
    train = Sequences.from_lists([[1, 2, 3, 4, 5], [6, 7, 8]], 30)
    batch = next(iter(m.train_batches(train, 8, np.random.default_rng(0))))
    assert batch["negative"].shape == (2, 8)
    # rows given the same negatives: exactly the batch-shared loss over those negatives
    shared = torch.arange(9, 17)
    with torch.no_grad():
        same = m.loss(batch | {"negative": shared.expand(2, -1)})
        torch.testing.assert_close(same, m.loss(batch | {"negative": shared}))
        # by hand: each position against its own row's negatives (row 1 takes a target of row 0 as a negative)
        negs = torch.tensor([[9, 10, 11, 12, 13, 14, 15, 16], [2, 3, 4, 20, 21, 22, 23, 24]])
        states = m.encode(batch["seq"])  # (B, T, D)
        emb = m.item_emb.weight
        terms = []
        for b in range(2):
            for t in range(batch["seq"].shape[1]):
                tgt = int(batch["target"][b, t])
                if tgt:
                    logits = torch.cat([states[b, t] @ emb[tgt][:, None], states[b, t] @ emb[negs[b]].T])
                    logits[1:][negs[b] == tgt] = -torch.inf  # an accidental hit is no negative
                    terms.append(F.cross_entropy(logits[None], torch.tensor([0])))
        torch.testing.assert_close(m.loss(batch | {"negative": negs}), torch.stack(terms).mean())


def test_per_position_negatives_score_each_position_against_its_own() -> None:
    m = _model(negatives="position", dropout=0.0)
    batch = position_batch(m, 8)
    b, t = batch["seq"].shape
    negs = torch.randint(1, 31, (b, t, 8), generator=torch.Generator().manual_seed(3))
    negs[0, -1, :2] = batch["target"][0, -1]  # an accidental hit at one position only
    with torch.no_grad():
        states, emb = m.encode(batch["seq"]), m.item_emb.weight
        terms = []
        for i in range(b):
            for j in range(t):
                tgt = int(batch["target"][i, j])
                if tgt:  # by hand: the position against its own draws
                    logits = torch.cat([states[i, j] @ emb[tgt][:, None], states[i, j] @ emb[negs[i, j]].T])
                    logits[1:][negs[i, j] == tgt] = -torch.inf
                    terms.append(F.cross_entropy(logits[None], torch.tensor([0])))
        torch.testing.assert_close(m.loss(batch | {"negative": negs}), torch.stack(terms).mean())
        # the same draws at every position of a row are the per-sequence loss
        row = negs[:, -1, :]  # (B, S)
        torch.testing.assert_close(
            m.loss(batch | {"negative": row[:, None, :].expand(b, t, 8)}), m.loss(batch | {"negative": row})
        )


def _table_grad(
    item_table_dropout: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The item table's gradient after one full-softmax training loss (rate 0.5), and every dropout
    output shaped like the whole table."""
    m = _model(loss="ce", dropout=0.5, item_table_dropout=item_table_dropout).train()
    batch = next(
        iter(
            m.train_batches(
                Sequences.from_lists([[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11]], 30), 8, np.random.default_rng(0)
            )
        )
    )
    tables: list[torch.Tensor] = []
    dropout = F.dropout

    def recording(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        out = dropout(x, *args, **kwargs)  # type: ignore[arg-type]
        if x.shape == m.item_emb.weight.shape:
            tables.append(out.detach())
        return out

    monkeypatch.setattr(F, "dropout", recording)
    torch.manual_seed(1)
    m.loss(batch).backward()
    grad = m.item_emb.weight.grad
    assert grad is not None
    return grad, tables


def test_item_table_dropout_drops_inputs_and_output_layer_with_one_mask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grad, tables = _table_grad(True, monkeypatch)
    assert len(tables) == 1  # one mask a step, shared by the inputs and the output layer
    dropped = tables[0][1:] == 0  # (I, D) the real items' dropped entries
    assert 0.35 < dropped.float().mean() < 0.65
    # Every item gets a gradient through the full softmax, so an entry gets none exactly where the one
    # mask dropped it: a separate input mask, or an undropped output layer, breaks this equality.
    assert torch.equal(grad[1:] == 0, dropped)
    assert (grad[0] == 0).all()  # the padding row stays untouched
    off, tables = _table_grad(False, monkeypatch)
    assert not tables and (off[1:] == 0).float().mean() < 0.05  # without it no table is dropped out


def test_fast_dropout_keeps_item_table_dropout_one_mask_for_inputs_and_output_layer() -> None:
    m = _model(loss="ce", dropout=0.5, item_table_dropout=True, fast_dropout=True).train()
    assert isinstance(m.table_drop, FastDropout) and isinstance(m.emb_drop, FastDropout)
    assert not any(isinstance(x, nn.Dropout) for x in m.modules())  # no nn.Dropout left behind
    batch = next(
        iter(
            m.train_batches(
                Sequences.from_lists([[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11]], 30), 8, np.random.default_rng(0)
            )
        )
    )
    tables: list[torch.Tensor] = []
    m.table_drop.register_forward_hook(lambda _m, _i, out: tables.append(out.detach()))
    torch.manual_seed(1)
    m.loss(batch).backward()
    assert len(tables) == 1
    dropped = tables[0][1:] == 0  # (I, D)
    assert 0.35 < dropped.float().mean() < 0.65
    grad = m.item_emb.weight.grad
    assert grad is not None and torch.equal(grad[1:] == 0, dropped)  # one mask, inputs and outputs alike


def test_fast_dropout_scores_as_the_plain_model_with_the_same_weights() -> None:
    fast, plain = _model(item_table_dropout=True, fast_dropout=True), _model(item_table_dropout=True)
    assert fast.state_dict().keys() == plain.state_dict().keys()  # checkpoints load either way
    plain.load_state_dict(fast.state_dict())
    seq = {"seq": torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])}
    with torch.no_grad():
        torch.testing.assert_close(fast.score(seq), plain.score(seq), rtol=0, atol=0)


def test_item_table_dropout_changes_nothing_at_rate_zero_nor_when_scoring() -> None:
    batch = next(
        iter(
            _model(loss="ce").train_batches(
                Sequences.from_lists([[1, 2, 3, 4, 5], [6, 7, 8]], 30), 8, np.random.default_rng(0)
            )
        )
    )
    on, off = _model(loss="ce", dropout=0.0, item_table_dropout=True), _model(loss="ce", dropout=0.0)
    with torch.no_grad():
        torch.testing.assert_close(on.train().loss(batch), off.train().loss(batch), rtol=0, atol=0)
    on, off = _model(item_table_dropout=True), _model()  # eval mode, dropout 0.1
    seq = {"seq": torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])}
    with torch.no_grad():
        torch.testing.assert_close(on.score(seq), off.score(seq), rtol=0, atol=0)
