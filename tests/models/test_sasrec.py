import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnrec import Recommender
from attnrec.data.schema import Interactions, Sequences
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL
from attnrec.models.nn.masks import causal_bias
from attnrec.models.nn.wrapper import Pass
from attnrec.models.objectives.kernels import softmax_cross_entropy
from attnrec.models.objectives.negatives import draw_negatives
from attnrec.models.sasrec import SASRec, SASRecConfig
from causality import assert_causal
from grad_checks import assert_trains

SMALL = {"hidden": 16, "n_layers": 2, "n_heads": 2, "max_len": 12, "dropout": 0.1}


def _model(**over: object) -> SASRec:
    torch.manual_seed(0)
    return SASRec(SASRecConfig(**(SMALL | over)), n_users=5, n_items=30).eval()  # type: ignore[arg-type]


def test_causal_future_items_do_not_change_past_outputs() -> None:
    assert_causal(_model().encode)


def test_attention_weights_come_from_the_forward_pass_that_encodes() -> None:
    m = _model()
    seq = torch.tensor([[0, 0, 0, 3, 7, 1, 9, 4, 2, 8, 5, 6], [0] * 9 + [4, 5, 6]])
    with torch.no_grad():
        states, maps = m.forward({"seq": seq}, Pass(need_weights=True))
        plain = m.encode(seq)
    assert torch.equal(states, plain), "asking for the weights must not change the forward pass"
    assert len(maps) == 2 and maps[0].shape == (2, 2, 12, 12)
    real = seq > 0
    for w in maps:  # (B, H, T, T) probabilities: causal, never on a padding key
        assert torch.allclose(w.sum(-1), torch.ones(2, 2, 12))
        assert w.triu(1).abs().max() == 0
        assert w[0][:, real[0]][:, :, ~real[0]].abs().max() == 0
    # The first layer by hand: softmax(q k^T / sqrt(d_h)) of the normalised queries and the raw keys.
    block = m.blocks[0]
    with torch.no_grad():
        pos = m.pos_emb(torch.arange(12))
        x = (m.item_emb(seq) * 16**0.5 + pos) * real[..., None]
        q = block.ln_attn(x)
        qh = block.attn.q(q).view(2, 12, 2, 8).transpose(1, 2)
        kh = block.attn.k(x).view(2, 12, 2, 8).transpose(1, 2)
        allowed = torch.ones(12, 12, dtype=torch.bool).tril() & real[:, None, None, :] | torch.eye(
            12, dtype=torch.bool
        )
        want = (qh @ kh.transpose(-1, -2) / 8**0.5).masked_fill(~allowed, -torch.inf).softmax(-1)
    rows = real[:, None, :, None]  # real queries; a padding query's row is never read (masks.py)
    torch.testing.assert_close(maps[0] * rows, want * rows)


def test_padding_is_never_attended_nor_scored() -> None:
    m = _model()
    hist = Sequences.from_lists([[3, 7, 1, 9]], 30)
    short = {"seq": torch.from_numpy(hist.padded(4))}
    long = {"seq": torch.from_numpy(hist.padded(12))}
    with torch.no_grad():
        s_short, s_long = m.score(short), m.score(long)
        m.item_emb.weight[0].normal_()  # whatever the padding vector holds, nothing changes
        s_pad = m.score(long)
    assert torch.allclose(s_short, s_long, atol=1e-5)
    assert torch.allclose(s_long, s_pad, atol=1e-5)
    assert torch.isneginf(s_long[:, 0]).all()


@pytest.mark.parametrize("fast", [False, True])
def test_chunked_cross_entropy_matches_reference_values_and_gradients(fast: bool) -> None:
    """Both kernels (several chunks each: 1,300 rows) against torch's cross-entropy of the full logits."""
    torch.manual_seed(0)
    h = torch.randn(1300, 8, requires_grad=True)
    w = torch.randn(50, 8, requires_grad=True)
    t = torch.randint(1, 50, (1300,))
    ours = softmax_cross_entropy(h, w, t, fast=fast)
    ours.backward()
    gh, gw = h.grad.clone(), w.grad.clone()  # type: ignore[union-attr]
    h.grad = w.grad = None
    logits = h @ w.T
    logits[:, 0] = -torch.inf
    ref = F.cross_entropy(logits, t)
    ref.backward()
    assert torch.allclose(ours, ref, atol=1e-5)
    assert torch.allclose(gh, h.grad, atol=1e-6) and torch.allclose(gw, w.grad, atol=1e-6)  # type: ignore[arg-type]


@pytest.mark.parametrize("fast", [False, True])
def test_chunked_cross_entropy_with_bias_scaled_upstream_and_without_grad(fast: bool) -> None:
    """The gradients are computed in the forward pass: an upstream factor, a bias and no_grad must still
    hold."""
    torch.manual_seed(1)
    h = torch.randn(700, 8, requires_grad=True)
    w = torch.randn(40, 8, requires_grad=True)
    b = torch.randn(40, requires_grad=True)
    t = torch.randint(1, 40, (700,))
    (3.0 * softmax_cross_entropy(h, w, t, b, fast=fast)).backward()
    got = [x.grad.clone() for x in (h, w, b)]  # type: ignore[union-attr]
    h.grad = w.grad = b.grad = None
    logits = h @ w.T + b
    logits[:, 0] = -torch.inf
    (3.0 * F.cross_entropy(logits, t)).backward()
    for ours, ref in zip(got, (h.grad, w.grad, b.grad), strict=True):
        assert ref is not None and torch.allclose(ours, ref, atol=1e-6)
    with torch.no_grad():
        loss = softmax_cross_entropy(h, w, t, b, fast=fast)
    assert torch.allclose(loss, F.cross_entropy(logits.detach(), t), atol=1e-5) and not loss.requires_grad


@pytest.mark.parametrize("fast", [False, True])
def test_chunked_cross_entropy_under_bf16_autocast_is_the_float32_loss_to_bf16_rounding(fast: bool) -> None:
    """``train.amp = "bf16"``: both kernels take their matrix products in bfloat16 and keep the log-sum-exp,
    the loss and the gradients float32; the result is the float32 one to bfloat16 rounding, and not
    equal to it (autocast really took effect)."""
    torch.manual_seed(2)
    h = torch.randn(1300, 16, requires_grad=True)
    w = (0.5 * torch.randn(50, 16)).requires_grad_()
    t = torch.randint(1, 50, (1300,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = softmax_cross_entropy(h, w, t, fast=fast)
    low.backward()
    gh, gw = h.grad.clone(), w.grad.clone()  # type: ignore[union-attr]
    h.grad = w.grad = None
    ref = softmax_cross_entropy(h, w, t, fast=fast)
    ref.backward()
    assert low.dtype == gh.dtype == gw.dtype == torch.float32
    assert abs(low.item() - ref.item()) < 0.01 * ref.item() and not torch.equal(low, ref)
    for got, want in ((gh, h.grad), (gw, w.grad)):
        assert want is not None and F.cosine_similarity(got.flatten(), want.flatten(), dim=0) > 0.995


def test_the_default_ce_kernel_is_the_row_major_one_to_float_rounding(ring: Interactions) -> None:
    """``fast_ce``, on by default with loss ce, changes the kernel, not the objective: same weights and
    batch, same loss and gradients as ``fast_ce = false`` to float32 rounding (dropout 0, so both see the
    same network)."""
    assert SASRecConfig(loss="ce").fast_ce is True and SASRecConfig().fast_ce is False
    split = leave_one_out(ring)
    batch = next(iter(_model().train_batches(split.train, 64, np.random.default_rng(0))))
    got = []
    for kernel in ({"fast_ce": False}, {}):
        torch.manual_seed(0)
        m = SASRec(
            SASRecConfig(**(SMALL | {"loss": "ce", "dropout": 0.0} | kernel)),  # type: ignore[arg-type]
            ring.n_users,
            ring.n_items,
        )
        loss = m.loss(batch)
        loss.backward()
        got.append((loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]))
    (l0, g0), (l1, g1) = got
    assert torch.allclose(l0, l1, atol=1e-6) and len(g0) == len(g1) > 0
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g0, g1, strict=True))


@pytest.mark.parametrize("loss", ["bce", "sampled_ce"])
def test_fast_ce_without_the_full_softmax_is_an_error(loss: str) -> None:
    with pytest.raises(ValueError, match="fast_ce .* needs loss ce"):
        SASRecConfig(loss=loss, fast_ce=True)


def test_bce_negatives_avoid_the_users_items() -> None:
    train = Sequences.from_lists([[1, 2, 3, 4, 5], [6, 7]], 8)
    neg = draw_negatives(np.array([0, 1]), (2, 500), 8, train.user_item_keys(), np.random.default_rng(0))
    assert not np.isin(neg[0], [1, 2, 3, 4, 5]).any() and not np.isin(neg[1], [6, 7]).any()
    assert neg.min() >= 1 and neg.max() <= 8


@pytest.mark.parametrize("loss", ["bce", "ce", "sampled_ce"])
def test_every_loss_trains(loss: str, ring: Interactions) -> None:
    split = leave_one_out(ring)
    m = SASRec(SASRecConfig(**(SMALL | {"loss": loss, "n_negatives": 10})), ring.n_users, ring.n_items)  # type: ignore[arg-type]
    assert_trains(m, split.train)


def test_batches_hold_next_item_targets() -> None:
    m = _model()
    train = Sequences.from_lists([[1, 2, 3, 4], [5, 6]], 30)
    batch = next(iter(m.train_batches(train, 8, np.random.default_rng(0))))
    for seq, tgt in zip(batch["seq"], batch["target"], strict=True):
        real = tgt > 0
        assert torch.equal(seq[real][1:], tgt[real][:-1])  # target is the input shifted by one


def test_learns_sequential_structure_beyond_popularity(ring: Interactions) -> None:
    split = leave_one_out(ring)
    train = {"max_epochs": 15, "batch_size": 32, "lr": 5e-3, "patience": 3}
    sas = Recommender("sasrec", SMALL | {"loss": "ce"}, train).fit(ring, split, progress=False)
    pop = Recommender("pop").fit(ring, split, progress=False)
    hr_sas = sas.evaluate(split.test, FULL).metrics["HR@10"]
    hr_pop = pop.evaluate(split.test, FULL).metrics["HR@10"]
    assert hr_sas > hr_pop + 0.2, (hr_sas, hr_pop)


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="loss must be bce, ce or sampled_ce, not 'hinge'"):
        SASRecConfig(loss="hinge")
    with pytest.raises(ValueError, match="hidden size 10 is not divisible by 3 heads"):
        SASRec(SASRecConfig(hidden=10, n_heads=3), 1, 5)
    with pytest.raises(ValueError, match="^hidden, n_layers, n_heads and max_len must be positive$"):
        SASRecConfig(max_len=0)


def test_authors_attention_is_the_reference_sublayer_by_hand() -> None:
    # The authors' code: Q/K/V projections, softmax over earlier real keys, heads concatenated with no
    # output layer, and the normalised queries added back; in training no dropout on that output.
    m = _model(authors_attention=True, n_layers=1, attn_dropout=0.0, dropout=0.9)
    block = m.blocks[0]
    assert "attn.out.weight" not in dict(block.named_parameters())
    assert "attn.out.weight" in dict(_model().blocks[0].named_parameters())  # the default keeps it
    seq = torch.tensor([[0, 0, 0, 3, 7, 1, 9, 4, 2, 8, 5, 6]])
    real = seq > 0
    x = torch.randn(1, 12, 16) * real[..., None]
    with torch.no_grad():  # a zero FFN leaves the block's output as LayerNorm(the attention sublayer's)
        block.ffn.fc2.weight.zero_()
        block.ffn.fc2.bias.zero_()
    block.train()  # dropout 0.9 would change an attention output it applied to
    with torch.no_grad():
        q = block.ln_attn(x)
        qh = block.attn.q(q).view(1, 12, 2, 8).transpose(1, 2)
        kh = block.attn.k(x).view(1, 12, 2, 8).transpose(1, 2)
        vh = block.attn.v(x).view(1, 12, 2, 8).transpose(1, 2)
        allowed = torch.ones(12, 12, dtype=torch.bool).tril() & real[:, None, None, :] | torch.eye(
            12, dtype=torch.bool
        )
        p = (qh @ kh.transpose(-1, -2) / 8**0.5).masked_fill(~allowed, -torch.inf).softmax(-1)
        want = block.ln_ffn(q + (p @ vh).transpose(1, 2).reshape(1, 12, 16))  # (1, T, D)
        got = block(x, causal_bias(seq, x.dtype), real[..., None].float())[0]  # the block's own forward
    torch.testing.assert_close(got[real], want[real])


def test_authors_attention_stays_causal_and_trains(ring: Interactions) -> None:
    assert_causal(_model(authors_attention=True).encode)
    with pytest.raises(ValueError, match="authors_attention"):
        SASRecConfig(authors_attention=True, difsr=True)
    split = leave_one_out(ring)
    m = SASRec(SASRecConfig(**(SMALL | {"authors_attention": True})), ring.n_users, ring.n_items)  # type: ignore[arg-type]
    assert_trains(m, split.train)
