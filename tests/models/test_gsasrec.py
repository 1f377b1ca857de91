"""gSASRec: the gBCE loss against the paper's formula, its objective by hand, and that it learns."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnrec import Recommender
from attnrec.data.schema import Interactions, Sequences
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import FULL
from attnrec.models.gsasrec import GSASRec, GSASRecConfig
from attnrec.models.objectives.kernels import gbce_beta, gbce_loss
from causality import assert_causal

SMALL = {"hidden": 16, "n_layers": 2, "n_heads": 2, "max_len": 12, "dropout": 0.1, "n_negatives": 4}


def _model(**over: object) -> GSASRec:
    torch.manual_seed(0)
    return GSASRec(GSASRecConfig(**(SMALL | over)), n_users=5, n_items=30).eval()  # type: ignore[arg-type]


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


def test_beta_follows_the_papers_formula() -> None:
    # alpha = k / (|I| - 1); beta = alpha * (t * (1 - 1/alpha) + 1/alpha)
    assert gbce_beta(2, 5, 0.5) == pytest.approx(0.75)  # alpha = 0.5: 0.5 * (0.5 * -1 + 2)
    assert gbce_beta(256, 3417, 0.0) == 1.0  # t = 0: plain BCE
    assert gbce_beta(256, 3417, 1.0) == pytest.approx(256 / 3416)  # t = 1: beta = alpha, calibrated
    assert gbce_beta(256, 3417, 0.75) == pytest.approx(1 - 0.75 * (1 - 256 / 3416))
    assert (
        gbce_beta(50, 20, 0.75) == 1.0
    )  # k >= |I| - 1: every other item is a negative, nothing to calibrate
    with pytest.raises(ValueError, match=r"gbce_t must be in \[0, 1\], not 1.5"):
        gbce_beta(2, 5, 1.5)


def test_gbce_at_t0_is_bce_over_positive_and_negatives() -> None:
    torch.manual_seed(0)
    pos, neg = torch.randn(7) * 3, torch.randn(7, 5) * 3
    logits = torch.cat([pos[:, None], neg], 1)  # (7, 6): the positive in column 0
    labels = torch.zeros_like(logits)
    labels[:, 0] = 1.0
    bce = F.binary_cross_entropy_with_logits(logits, labels)  # mean over all 7 * 6 terms
    beta = gbce_beta(5, 1000, 0.0)
    torch.testing.assert_close(gbce_loss(pos, neg, beta), bce)
    assert not torch.allclose(gbce_loss(pos, neg, gbce_beta(5, 1000, 0.75)), bce)


def test_gbce_by_hand() -> None:
    # s+ = 0, s- = (0, ln 3): softplus gives ln 2 for both zeros and ln(1 + 3) = 2 ln 2 for ln 3.
    pos, neg = torch.tensor([0.0]), torch.tensor([[0.0, math.log(3.0)]])
    assert gbce_loss(pos, neg, 0.5).item() == pytest.approx((0.5 + 1 + 2) * math.log(2) / 3)
    # The positive's term is beta * -log sigmoid(s+): sigmoid(2)^0.3 by hand, plus one negative at -2.
    want = (-0.3 * math.log(1 / (1 + math.exp(-2.0))) - math.log(1 - 1 / (1 + math.exp(2.0)))) / 2
    assert gbce_loss(torch.tensor([2.0]), torch.tensor([[-2.0]]), 0.3).item() == pytest.approx(want)
    # A masked negative (-inf) adds nothing; the (k + 1) normaliser stays.
    masked = gbce_loss(torch.tensor([0.0]), torch.tensor([[0.0, -torch.inf]]), 1.0)
    assert masked.item() == pytest.approx(2 * math.log(2) / 3)


def test_the_model_loss_is_gbce_over_real_positions_by_hand() -> None:
    m = _model(n_negatives=3, gbce_t=0.75)
    seq = torch.tensor([[0, 0, 3, 7, 1], [0, 0, 0, 0, 4]])
    target = torch.tensor([[0, 3, 7, 1, 9], [0, 0, 0, 4, 5]])
    negative = torch.tensor([[7, 20, 21], [22, 23, 5]])  # 7 is row 0's target at t=2; 5 is row 1's at t=4
    with torch.no_grad():
        got = m.loss({"seq": seq, "target": target, "negative": negative}).item()
        h, out = m.encode(seq), m.item_vectors().detach()
    beta = 1 - 0.75 * (1 - 3 / 29)
    terms = []
    for b in range(2):
        for t in range(5):
            if target[b, t] == 0:
                continue  # padding: no target
            s_pos = float(h[b, t] @ out[target[b, t]])
            s_neg = [float(h[b, t] @ out[n]) for n in negative[b] if n != target[b, t]]
            terms.append((beta * _softplus(-s_pos) + sum(_softplus(s) for s in s_neg)) / 4)
    assert len(terms) == 6
    assert got == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    assert m.loss_terms({"target": target}) == 6


def test_batches_hold_next_item_targets_and_catalog_negatives() -> None:
    m = _model(n_negatives=50)
    train = Sequences.from_lists([[1, 2, 3, 4], [5, 6]], 30)
    batch = next(iter(m.train_batches(train, 8, np.random.default_rng(0))))
    assert batch["negative"].shape == (2, 50)
    assert batch["negative"].min() >= 1 and batch["negative"].max() <= 30
    for seq, tgt in zip(batch["seq"], batch["target"], strict=True):
        real = tgt > 0
        assert torch.equal(seq[real][1:], tgt[real][:-1])  # the target is the input shifted by one


def test_causal_future_items_do_not_change_past_outputs() -> None:
    assert_causal(_model().encode)


def test_output_table_is_separate_unless_reused() -> None:
    batch = {"seq": torch.tensor([[0, 3, 7, 1]])}
    for reuse in (False, True):
        m = _model(reuse_item_embeddings=reuse)
        with torch.no_grad():
            scores = m.score(batch)
            want = m.query_vectors(batch) @ m.item_vectors().T
        assert (m.item_vectors() is m.net.item_emb.weight) == reuse
        torch.testing.assert_close(scores[:, 1:], want[:, 1:])
        assert torch.isneginf(scores[:, 0]).all()


def test_save_load_gives_identical_scores(ring: Interactions, tmp_path: Path) -> None:
    split = leave_one_out(ring)
    rec = Recommender("gsasrec", SMALL, {"max_epochs": 1, "batch_size": 64}).fit(ring, split, progress=False)
    loaded = Recommender.load(rec.save(tmp_path / "gsasrec"))
    assert loaded.config == rec.config
    rows = np.arange(8)
    users, hist = split.test.users[rows], split.test.histories.take(rows)
    torch.testing.assert_close(rec.score_histories(users, hist), loaded.score_histories(users, hist))


def test_learns_sequential_structure_beyond_popularity(ring: Interactions) -> None:
    split = leave_one_out(ring)
    # gBCE "kicks off" after some steps (the authors' README warns of it), hence small batches.
    train = {"max_epochs": 20, "batch_size": 16, "lr": 5e-3, "patience": 20}
    model = SMALL | {"dropout": 0.0, "n_negatives": 16}
    g = Recommender("gsasrec", model, train).fit(ring, split, progress=False)
    pop = Recommender("pop").fit(ring, split, progress=False)
    hr_g = g.evaluate(split.test, FULL).metrics["HR@10"]
    hr_pop = pop.evaluate(split.test, FULL).metrics["HR@10"]
    assert hr_g > hr_pop + 0.2, (hr_g, hr_pop)


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match=r"gbce_t must be in \[0, 1\], not -0.1"):
        GSASRecConfig(gbce_t=-0.1)
    with pytest.raises(
        ValueError, match="^hidden, n_layers, n_heads, max_len and n_negatives must be positive$"
    ):
        GSASRecConfig(n_negatives=0)
