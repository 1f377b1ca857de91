"""HSTU: causal, pointwise (unnormalised) attention, relative position/time bias, fast scoring, learning."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnrec import Recommender
from attnrec.data.schema import Interactions, Sequences
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL
from attnrec.models.hstu import HSTU, HSTUConfig, time_buckets
from attnrec.models.nn.wrapper import NEWEST
from attnrec.recommend import load
from attnrec.recommend.explain_rec import explain_recommendation
from position_negatives import position_batch

SMALL = {
    "hidden": 16,
    "dqk": 8,
    "dv": 8,
    "n_layers": 2,
    "n_heads": 2,
    "max_len": 12,
    "dropout": 0.1,
    "n_negatives": 10,
}
SEQ = torch.tensor([[0, 0, 3, 7, 1, 9, 4, 2, 8, 5, 6, 11], [0] * 9 + [4, 5, 6]])
DAY = 86_400
TS = torch.tensor(
    [
        [0, 0, 10, 70, DAY, 2 * DAY, 2 * DAY + 5, 9 * DAY, 30 * DAY, 31 * DAY, 200 * DAY, 201 * DAY],
        [0] * 9 + [DAY, 3 * DAY, 50 * DAY],
    ]
)


def _model(**over: object) -> HSTU:
    torch.manual_seed(0)
    m = HSTU(HSTUConfig(**(SMALL | over)), n_users=5, n_items=30).eval()  # type: ignore[arg-type]
    with torch.no_grad():  # time weights far from their tiny initial values, so time visibly matters
        for block in m.blocks:
            block.rab.time_w.copy_(torch.linspace(-2.0, 2.0, len(block.rab.time_w)))
    return m


@pytest.mark.parametrize("with_time", [False, True])
def test_a_later_item_or_timestamp_never_changes_an_earlier_output(with_time: bool) -> None:
    m, t = _model(), 6
    ts = TS if with_time else None
    later_item, later_time = SEQ.clone(), TS.clone()
    later_item[0, t + 1] = 20
    later_time[0, t + 1 :] += 400 * DAY
    with torch.no_grad():
        base = m.encode(SEQ, ts)
        changed = [m.encode(later_item, ts)] + ([m.encode(SEQ, later_time)] if with_time else [])
    for out in changed:
        torch.testing.assert_close(out[0, : t + 1], base[0, : t + 1], rtol=0, atol=1e-6)
        assert not torch.allclose(out[0, t + 1], base[0, t + 1], atol=1e-4), (
            "the change must reach its own position"
        )


def test_attention_rows_are_silu_sums_not_normalised() -> None:
    """f1 = 0 makes Q = K = 0, so a weight is SiLU(positional bias of i - j) / n: sums computable by hand."""
    m = _model(hidden=4, dqk=2, dv=2, n_heads=1, n_layers=1, max_len=4)
    bias = [2.0, 1.0, -1.0, 0.5]  # offsets 0..3
    with torch.no_grad():
        m.blocks[0].f1.weight.zero_()
        m.blocks[0].rab.pos_w.copy_(torch.tensor(bias))
        (w,) = m.attention_weights(torch.tensor([[3, 1, 4, 2], [0, 0, 5, 6]]))  # (B, H, T, T)

    def silu(v: float) -> float:
        return v / (1.0 + math.exp(-v))

    full = [sum(silu(b) for b in bias[: i + 1]) / 4 for i in range(4)]  # row i sees offsets 0..i
    assert full == pytest.approx([0.440399, 0.623163, 0.555928, 0.633735], abs=1e-6)
    torch.testing.assert_close(w[0, 0].sum(-1), torch.tensor(full))
    # The padded row: its real queries see only the two real keys (offsets 0, 1 and 0).
    torch.testing.assert_close(w[1, 0, 2:].sum(-1), torch.tensor([silu(2.0), silu(2.0) + silu(1.0)]) / 4)
    assert w[1, 0, 2:, :2].abs().max() == 0, "padding keys get no weight"
    assert w[0, 0].triu(1).abs().max() == 0, "no weight on later keys"
    # With learned Q and K the rows are no probability distributions either.
    (w,) = _model(n_layers=1).attention_weights(SEQ)[:1]
    sums = w[0][:, SEQ[0] > 0].sum(-1)
    assert (sums - 1).abs().min() > 0.5


def test_time_buckets_are_the_log_gaps() -> None:
    ts = torch.tensor([[0, 1000, 1000 + 10, 1000 + 3600, 1000 + 365 * DAY]])
    bucket, known = time_buckets(ts, 128)
    # floor(ln(gap) / 0.301): 0 s -> 0, 10 s -> 7, 1000 s -> 22, 1 h -> 27, 365 days -> 57
    assert bucket[0, 1].tolist() == [22, 0, 7, 27, 57]  # key 0 is padding: its gap is 1000 s, but unknown
    assert known[0, 1].tolist() == [False, True, True, True, True] and not known[0, 0].any()
    assert time_buckets(torch.tensor([[1, 10**18]]), 40)[0].max() == 40, "buckets are capped"


def test_time_bias_changes_outputs_and_ignores_padding() -> None:
    m = _model()
    real = SEQ > 0
    with torch.no_grad():
        none, timed = m.encode(SEQ), m.encode(SEQ, TS)
        zeros = m.encode(SEQ, torch.zeros_like(TS))
        pad_noise = m.encode(SEQ, torch.where(real, TS, torch.randint(1, 10**9, TS.shape)))
        stretched = m.encode(SEQ, TS * 30)  # the same order, other gaps
    assert not torch.allclose(none[real], timed[real], atol=1e-4), "timestamps must matter"
    assert not torch.allclose(timed[real], stretched[real], atol=1e-4), "so must the gaps"
    torch.testing.assert_close(zeros, none, rtol=0, atol=0)  # unknown times: no time bias at all
    torch.testing.assert_close(pad_noise[real], timed[real], rtol=0, atol=1e-6)  # padding times ignored


def test_newest_position_only_equals_the_full_pass_and_the_scores() -> None:
    m = _model(n_layers=3)
    for ts in (None, TS):
        with torch.no_grad():
            full = m.encode(SEQ, ts)[:, -1]  # (B, D)
            batch = {"seq": SEQ} if ts is None else {"seq": SEQ, "timestamps": ts}
            last, _ = m.forward(batch, NEWEST)  # (B, 1, D)
            scores = m.score(batch)
        torch.testing.assert_close(last[:, 0], full, rtol=1e-5, atol=1e-6)
        want = (
            full @ torch.nn.functional.normalize(m.item_emb.weight, dim=-1).T / 0.05
        )  # cosine / temperature
        torch.testing.assert_close(scores[:, 1:], want[:, 1:], rtol=1e-5, atol=1e-5)
        assert torch.isneginf(scores[:, 0]).all()


def test_padding_width_and_padding_vector_change_no_score() -> None:
    m = _model()
    hist = Sequences.from_lists([[3, 7, 1, 9]], 30)
    short, long = ({"seq": torch.from_numpy(hist.padded(n))} for n in (4, 12))
    with torch.no_grad():
        s_short, s_long = m.score(short), m.score(long)
        m.item_emb.weight[0].normal_()
        s_pad = m.score(long)
    torch.testing.assert_close(s_short, s_long, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s_pad, s_long, rtol=1e-5, atol=1e-5)


def test_bad_timestamps_and_settings_are_refused() -> None:
    m = _model()
    with pytest.raises(ValueError, match=r"timestamps must have the shape of seq \(2, 12\), not \(2, 11\)"):
        m.encode(SEQ, TS[:, 1:])
    with pytest.raises(ValueError, match="timestamps must be integer seconds"):
        m.encode(SEQ, TS.double())
    with pytest.raises(ValueError, match="loss must be sampled_ce or ce, not 'bce'"):
        HSTUConfig(loss="bce")
    with pytest.raises(
        ValueError, match="^hidden, n_layers, n_heads, dqk, dv, max_len and time_buckets must be positive$"
    ):
        HSTUConfig(dqk=0)
    with pytest.raises(ValueError, match="temperature > 0"):
        HSTUConfig(temperature=0.0)


@pytest.mark.parametrize("loss", ["sampled_ce", "ce"])
def test_loss_falls_with_and_without_timestamps(loss: str, ring: Interactions) -> None:
    split = leave_one_out(ring)
    torch.manual_seed(0)
    m = HSTU(HSTUConfig(**(SMALL | {"loss": loss})), ring.n_users, ring.n_items)  # type: ignore[arg-type]
    opt = torch.optim.Adam(m.parameters(), 5e-3)
    first, last = [], []
    for epoch in range(5):
        for batch in m.train_batches(split.train, 64, np.random.default_rng(epoch)):
            # hand-made timestamps: one event a minute, 0 on padding
            batch["timestamps"] = torch.where(batch["seq"] > 0, 60 * torch.arange(1, 13), 0)
            value = m.loss(batch)
            opt.zero_grad()
            value.backward()
            opt.step()
            (first if epoch == 0 else last).append(value.item())
    assert np.isfinite(first + last).all() and np.mean(last[-3:]) < np.mean(first[:3])
    assert all(b.rab.time_w.grad is not None and b.rab.time_w.grad.abs().sum() > 0 for b in m.blocks)


def test_learns_sequential_structure_beyond_popularity(ring: Interactions, tmp_path: Path) -> None:
    split = leave_one_out(ring)
    train = {"max_epochs": 15, "batch_size": 32, "lr": 5e-3, "patience": 3, "optimizer": "adamw"}
    hstu = Recommender("hstu", SMALL, train).fit(ring, split, progress=False)
    pop = Recommender("pop").fit(ring, split, progress=False)
    hr_hstu = hstu.evaluate(split.test, FULL).metrics["HR@10"]
    hr_pop = pop.evaluate(split.test, FULL).metrics["HR@10"]
    assert hr_hstu > hr_pop + 0.2, (hr_hstu, hr_pop)
    # Similar items (serving's cached inverse norms): the cosine of the item embeddings.
    sim = hstu.similar_items("i3", 5)
    assert hstu.items_ is not None and sim.method == "embedding-cosine" and len(sim.items) == 5
    emb = torch.nn.functional.normalize(hstu.core.item_emb.weight.detach(), dim=-1)
    a_idx, b_idx = (hstu.items_.get(i) for i in ("i3", sim.items[0]))
    assert sim.scores[0] == pytest.approx(float(emb[a_idx] @ emb[b_idx]), abs=1e-5)
    # Attention insight reads the unnormalised weights as they are: finite, on history items only.
    assert hstu.users_ is not None and hstu.histories_ is not None
    ex = explain_recommendation(hstu, user=hstu.users_.to_list()[3], k=3, top=100, method="attention")
    assert {a.item for a in ex.attended} <= set(hstu.items_.to_external(hstu.histories_[3]))
    assert ex.attended and all(math.isfinite(a.weight) and math.isfinite(a.rollout) for a in ex.attended)
    # Saved and loaded: the same config and the same scores.
    loaded = load(hstu.save(tmp_path / "hstu"))
    assert loaded.config == hstu.config
    rows = np.arange(20)
    a = hstu.score_histories(split.test.users[rows], split.test.histories.take(rows))
    b = loaded.score_histories(split.test.users[rows], split.test.histories.take(rows))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_onnx_export_matches_torch(ring: Interactions, tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from attnrec.serving.export import export_onnx, parity, session

    split = leave_one_out(ring)
    rec = Recommender("hstu", SMALL, {"max_epochs": 1, "batch_size": 64}).fit(ring, split, progress=False)
    sess = session(export_onnx(rec, tmp_path / "hstu.onnx"), threads=1)
    for lens in ([1], [3, 7, 1], [12, 2, 19, 5]):
        seqs = Sequences.from_lists([list(range(1, n + 1)) for n in lens], ring.n_items)
        assert parity(rec, sess, rec.core.score_inputs(np.zeros(len(lens), dtype=np.int64), seqs)) < 1e-4


def test_per_sequence_negatives_are_each_rows_own() -> None:
    m = _model(negatives="sequence", dropout=0.0)
    assert m.shared_batch_keys == frozenset()  # per-row negatives are split with the rows under DDP
    train = Sequences.from_lists([[1, 2, 3, 4, 5], [6, 7, 8]], 30)
    batch = next(iter(m.train_batches(train, 8, np.random.default_rng(0))))
    assert batch["negative"].shape == (2, m.config.n_negatives)
    shared = torch.arange(9, 9 + m.config.n_negatives)
    negs = torch.stack([shared, shared.flip(0)])  # the same items in each row: the same loss
    other = torch.stack([shared, torch.arange(1, 1 + m.config.n_negatives)])  # row 1 draws row 0's targets
    with torch.no_grad():
        torch.testing.assert_close(m.loss(batch | {"negative": negs}), m.loss(batch | {"negative": shared}))
        assert not torch.isclose(m.loss(batch | {"negative": other}), m.loss(batch | {"negative": shared}))


def test_per_position_negatives_are_each_positions_own() -> None:
    m = _model(negatives="position", dropout=0.0)
    s = m.config.n_negatives
    batch = position_batch(m, s)
    b, t = batch["seq"].shape
    row = torch.arange(9, 9 + s).expand(b, s)
    real = batch["target"] > 0
    other = row[:, None, :].expand(b, t, s).clone()
    last = real.nonzero()[-1]  # one scored position draws other items
    other[last[0], last[1]] = torch.arange(1, 1 + s)
    with torch.no_grad():
        same = m.loss(batch | {"negative": row[:, None, :].expand(b, t, s)})
        torch.testing.assert_close(
            same, m.loss(batch | {"negative": row})
        )  # per position = per sequence here
        assert not torch.isclose(m.loss(batch | {"negative": other}), same)  # and each position reads its own
