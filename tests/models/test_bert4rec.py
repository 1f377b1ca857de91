"""BERT4Rec: bidirectionality, padding, special tokens, the Cloze sampler, windows, persistence, quality."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnrec import Recommender
from attnrec.data.schema import Sequences
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL, evaluate
from attnrec.models.batches.windows import sliding_windows
from attnrec.models.bert4rec import BERT4Rec, BERT4RecConfig
from attnrec.models.nn.wrapper import Pass
from attnrec.models.scoring import factorised_scores
from grad_checks import cosine, flat_grad

N_ITEMS = 30


def small(**over: object) -> BERT4Rec:
    cfg = dict(hidden=16, n_layers=2, n_heads=2, max_len=12, dropout=0.0, attn_dropout=0.0)
    torch.manual_seed(0)
    model = BERT4Rec(BERT4RecConfig(**(cfg | over)), n_users=5, n_items=N_ITEMS)  # type: ignore[arg-type]
    return model.eval()


def left_padded(items: list[int], t: int = 12) -> torch.Tensor:
    return torch.tensor([[0] * (t - len(items)) + items])


def test_output_at_t_depends_on_later_items() -> None:
    model = small()
    seq = left_padded([3, 7, 1, 9, 4, 12, 5])
    t = seq.shape[1] - 4  # a middle position
    changed = seq.clone()
    changed[0, t + 1] = 20
    with torch.no_grad():
        a, b = model.encode(seq), model.encode(changed)
    assert not torch.allclose(a[0, t], b[0, t]), "position t must see position t+1 (bidirectional)"
    first = int((seq[0] > 0).nonzero()[0])
    assert not torch.allclose(a[0, first], b[0, first]), "even the oldest item sees later ones"


def test_padding_is_never_attended() -> None:
    model = small()
    seq = left_padded([3, 7, 1, 9])
    real = seq[0] > 0
    with torch.no_grad():
        before = model.encode(seq)[0, real]
        model.item_emb.weight[0] = torch.randn(16) * 5  # change what padding positions carry
        model.pos_emb.weight[:8] += torch.randn(8, 16)  # type: ignore[union-attr]  # padding positions only
        after = model.encode(seq)[0, real]
        weights = model.attention_weights(seq)
    assert torch.allclose(before, after, atol=1e-6)
    for w in weights:  # (1, H, T, T): no real query puts weight on a padding key
        assert w[0][:, real][:, :, ~real].abs().max() == 0


def test_attention_weights_come_from_the_forward_pass_that_encodes() -> None:
    model = small()
    seq = torch.cat([left_padded([3, 7, 1, 9]), left_padded([5, 6, 2, 8, 4, 11, 12, 13])])
    with torch.no_grad():
        states, maps = model.forward({"seq": seq}, Pass(need_weights=True))
        plain = model.encode(seq)
    assert torch.equal(states, plain), "asking for the weights must not change the forward pass"
    assert len(maps) == 2 and all(w.shape == (2, 2, 12, 12) for w in maps)
    for w in maps:
        assert torch.allclose(w.sum(-1), torch.ones(2, 2, 12))
    assert maps[0][0, :, -1, -4:].min() > 0, "the newest item attends to all real items, earlier and later"


def test_mask_and_padding_are_never_recommended() -> None:
    model = small()
    with torch.no_grad():
        model.out_bias[0] = 1e4  # even a huge padding bias cannot make it a candidate
    hist = Sequences.from_lists([[1, 2, 3], [], [5] * 20], N_ITEMS)
    batch = model.score_inputs(np.arange(3), hist)
    assert batch["seq"].shape == (3, 12)
    assert (batch["seq"][:, -1] == model.mask_id).all(), "inference appends [mask] after the history"
    assert (batch["seq"][2, :-1] == 5).all(), "the last max_len - 1 items are kept"
    with torch.no_grad():
        scores = model.score(batch)
    assert scores.shape == (3, N_ITEMS + 1), "no column for [mask]"
    assert torch.isneginf(scores[:, 0]).all()
    assert torch.isfinite(scores[:, 1:]).all()
    alone = model.score_inputs(np.arange(1), hist.take(np.array([0])))  # padded to its own length
    assert alone["seq"].shape == (1, 4)
    with torch.no_grad():
        assert torch.allclose(model.score(alone)[0, 1:], scores[0, 1:], atol=1e-5)
        factorised = model.query_vectors(batch) @ model.item_vectors().T + model.item_bias()
    assert torch.allclose(factorised[:, 1:], scores[:, 1:], atol=1e-5)


def test_masking_proportion_matches_p() -> None:
    model = small(max_len=100, mask_prob=0.3, mask_last_prob=0.0)
    w = np.random.default_rng(1).integers(1, N_ITEMS + 1, (400, 100))
    inp, labels = model.builder.mask(w, np.random.default_rng(2))
    share = (labels > 0).mean()
    assert abs(share - 0.3) < 0.01
    assert ((labels > 0) == (inp == model.mask_id)).all(), "without 80/10/10 every masked item becomes [mask]"
    assert (labels[labels > 0] == w[labels > 0]).all() and (inp[labels == 0] == w[labels == 0]).all()


def test_80_10_10_rule() -> None:
    model = small(max_len=100, mask_prob=0.5, mask_last_prob=0.0, use_80_10_10=True)
    w = np.random.default_rng(1).integers(1, N_ITEMS + 1, (400, 100))
    inp, labels = model.builder.mask(w, np.random.default_rng(3))
    m = labels > 0
    as_mask, kept = (inp[m] == model.mask_id).mean(), (inp[m] == w[m]).mean()
    assert abs(as_mask - 0.8) < 0.01
    assert abs(kept - (0.1 + 0.1 / N_ITEMS)) < 0.01  # kept, or replaced by the same item by chance
    assert (inp[~m] == w[~m]).all()


def test_mask_last_samples_exist_in_proportion() -> None:
    model = small(max_len=50, mask_prob=0.2, mask_last_prob=0.25)
    w = np.random.default_rng(1).integers(1, N_ITEMS + 1, (4000, 50))
    w[:2000, :30] = 0  # half the windows are short (left-padded)
    inp, labels = model.builder.mask(w, np.random.default_rng(4))
    only_last = ((labels > 0).sum(1) == 1) & (labels[:, -1] > 0)
    assert abs(only_last.mean() - 0.25) < 0.03
    assert (inp[only_last, -1] == model.mask_id).all()
    assert (labels[w == 0] == 0).all(), "padding is never a prediction target"


def test_every_sample_predicts_something() -> None:
    model = small(mask_prob=0.05, mask_last_prob=0.0)
    w = np.zeros((200, 12), dtype=np.int64)
    w[:, -2:] = 7  # two-item windows: usually no Bernoulli draw hits
    _, labels = model.builder.mask(w, np.random.default_rng(5))
    assert ((labels > 0).sum(1) >= 1).all()


def test_sliding_windows_cover_long_histories() -> None:
    lengths = np.array([3, 10, 25, 0, 11])
    rows, begin, length = sliding_windows(lengths, 10, 4)
    for u, n in enumerate(lengths):
        covered = np.zeros(n, dtype=bool)
        mine = rows == u
        for b, ln in zip(begin[mine], length[mine], strict=True):
            assert 0 < ln <= 10
            covered[b : b + ln] = True
        assert covered.all()
        if n:
            assert (begin[mine] + length[mine]).max() == n, "the most recent window is always there"
    assert list(begin[rows == 2]) == [15, 11, 7, 3, 0]  # the authors' begins: L-N, L-N-step, ..., 0
    rows0, begin0, _ = sliding_windows(lengths, 10, 0)
    assert list(rows0) == [0, 1, 2, 4] and list(begin0) == [0, 0, 15, 1]

    seqs = Sequences.from_lists([list(range(1, 26)), [4, 5]], N_ITEMS)
    model = small(max_len=10, sliding_step=4)
    win = model.builder.windows(seqs, plain=True).items
    assert model.train_rows(seqs) == len(win) == 6
    assert list(win[0]) == list(range(16, 26)) and list(win[-1]) == [0] * 8 + [4, 5]


def test_length_chunks_give_the_padded_batch_states_and_loss() -> None:
    rng = np.random.default_rng(3)
    seqs = Sequences.from_lists(
        [list(rng.integers(1, N_ITEMS + 1, n)) for n in rng.integers(1, 16, 40)], N_ITEMS
    )
    for over in ({"loss": "ce"}, {"loss": "sampled_ce", "n_negatives": 8}):
        padded, chunked = small(**over), small(length_chunks=4, **over)
        batch = next(chunked.train_batches(seqs, 40, np.random.default_rng(0)))
        parts = chunked.chunks.split(batch["seq"])
        assert len(parts) == 4 and sorted(torch.cat([r for r, _ in parts]).tolist()) == list(range(40))
        assert min(w for _, w in parts) < 12 and max(w for _, w in parts) == 12  # short rows skip the padding
        sel = batch["labels"] > 0
        with torch.no_grad():
            assert torch.allclose(
                chunked.encode_at(batch["seq"], sel), padded.encode(batch["seq"])[sel], atol=1e-5
            )
            assert torch.allclose(chunked.loss(batch), padded.loss(batch), atol=1e-5)
    for model in (padded, chunked):  # no dropout in small(): the same gradients, parameter by parameter
        model.train().loss(batch).backward()
    for (name, a), b in zip(padded.named_parameters(), chunked.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None and torch.allclose(a.grad, b.grad, atol=1e-5), name


def _skewed(n_users: int = 64, seed: int = 0) -> Sequences:
    """Histories over a Zipf-popular catalog, so that a popularity proposal is far from uniform."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, N_ITEMS + 1) ** 1.1
    return Sequences.from_lists(
        [
            list(rng.choice(np.arange(1, N_ITEMS + 1), int(rng.integers(4, 12)), p=p / p.sum()))
            for _ in range(n_users)
        ],
        N_ITEMS,
    )


def test_full_softmax_loss_is_the_cross_entropy_of_the_scores_at_masked_positions() -> None:
    model = small()
    batch = next(model.train_batches(_skewed(), 16, np.random.default_rng(0)))
    sel = batch["labels"] > 0
    with torch.no_grad():  # the scoring path of score(), applied to every masked position
        logits = factorised_scores(
            model.project(model.encode(batch["seq"])[sel]), model.item_vectors(), model.item_bias()
        )
        want = torch.nn.functional.cross_entropy(logits, batch["labels"][sel])
        torch.testing.assert_close(model.loss(batch), want)


def test_sampled_softmax_with_every_item_as_a_negative_is_the_full_softmax() -> None:
    full, sampled = small(loss="ce"), small(loss="sampled_ce", n_negatives=8)
    sampled.load_state_dict(full.state_dict())
    batch = next(full.train_batches(_skewed(), 16, np.random.default_rng(0)))
    # Uniform draws carry no correction; with the whole catalog drawn once, the target's own copy
    # (an accidental hit) must be masked, or the target would count twice.
    every = batch | {"negative": torch.arange(1, N_ITEMS + 1)}
    with torch.no_grad():
        torch.testing.assert_close(sampled.loss(every), full.loss(batch))


@pytest.mark.parametrize("sampler", ["popularity", "mixed"])
def test_log_q_corrected_sampled_softmax_approximates_the_full_softmax_gradient(sampler: str) -> None:
    full = small(loss="ce")
    with torch.no_grad():
        full.item_emb.weight.mul_(20.0)  # a peaked softmax: a biased proposal matters
    sampled = small(loss="sampled_ce", sampler=sampler, n_negatives=4000)
    sampled.load_state_dict(full.state_dict())
    batch = next(sampled.train_batches(_skewed(), 64, np.random.default_rng(1)))
    assert batch["target_logq"].shape == batch["labels"].shape and batch["neg_logq"].shape == (4000,)

    g_full, g_corrected = flat_grad(full, batch), flat_grad(sampled, batch)
    g_uncorrected = flat_grad(
        sampled, {k: v for k, v in batch.items() if k not in ("neg_logq", "target_logq")}
    )
    err_corrected, err_uncorrected = 1 - cosine(g_corrected, g_full), 1 - cosine(g_uncorrected, g_full)
    assert err_corrected < 0.01
    assert err_uncorrected > 10 * err_corrected  # the correction, not the many draws, removes the bias


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="loss must be ce or sampled_ce, not 'bce'"):
        BERT4RecConfig(loss="bce")
    with pytest.raises(ValueError, match=r"mask_prob must be in \(0, 1\]"):
        BERT4RecConfig(mask_prob=0.0)
    with pytest.raises(ValueError, match="sampler must be one of"):
        BERT4RecConfig(sampler="zipf")


# -- through the Recommender -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo():  # type: ignore[no-untyped-def]
    from attnrec.data.demo import make_demo

    data = make_demo(n_users=500, n_items=120, seed=3, mean_length=25)
    return data, leave_one_out(data)


def _fit(demo, epochs: int = 1, seed: int = 0, batch_size: int = 64) -> Recommender:  # type: ignore[no-untyped-def]
    data, split = demo
    cfg = {
        "hidden": 32,
        "max_len": 30,
        "mask_prob": 0.3,
        "dropout": 0.1,
        "attn_dropout": 0.1,
        "sliding_step": 10,
    }
    train = {
        "max_epochs": epochs,
        "batch_size": batch_size,
        "lr": 3e-3,
        "seed": seed,
        "device": "cpu",
        "patience": 50,
    }
    return Recommender("bert4rec", cfg, train=train).fit(data, split, progress=False)


def test_save_load_identity(demo, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = _fit(demo)
    _, split = demo
    rec.save(tmp_path / "m")
    back = Recommender.load(tmp_path / "m", device="cpu")
    users, hist = split.test.users[:50], split.test.histories.take(np.arange(50))
    assert torch.equal(rec.score_histories(users, hist), back.score_histories(users, hist))
    assert rec.recommend(user="1", k=5).items == back.recommend(user="1", k=5).items


def test_same_seed_same_scores(demo) -> None:  # type: ignore[no-untyped-def]
    _, split = demo
    users, hist = split.test.users[:50], split.test.histories.take(np.arange(50))
    a = _fit(demo, seed=7).score_histories(users, hist)
    b = _fit(demo, seed=7).score_histories(users, hist)
    assert torch.equal(a, b)


@pytest.mark.slow
def test_beats_popularity_on_sequential_data(demo) -> None:  # type: ignore[no-untyped-def]
    _, split = demo
    rec = _fit(demo, epochs=16, batch_size=32)
    pop = torch.as_tensor(
        np.bincount(split.train.items, minlength=split.train.n_items + 1), dtype=torch.float32
    )
    pop_res = evaluate(lambda u, h, request_time=None: pop.expand(len(u), -1).clone(), split.test, FULL)
    res = rec.evaluate(split.test, FULL)
    assert res.metrics["NDCG@10"] > 1.5 * pop_res.metrics["NDCG@10"], (res.metrics, pop_res.metrics)
