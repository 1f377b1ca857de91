"""Negative sampling: the sampled-softmax proposal distributions, computed by hand."""

import numpy as np
import pytest

from attnrec.models.objectives.negatives import negative_proposal


def test_negative_proposals_by_hand() -> None:
    items = np.array([1, 1, 1, 2])  # training counts 3, 1, 0 over items 1..3
    pop = np.array([0.0, 4 / 7, 2 / 7, 1 / 7])  # count + 1, normalised; padding never drawn
    uniform = np.array([0.0, 1 / 3, 1 / 3, 1 / 3])
    assert np.allclose(negative_proposal(items, 3, "popularity"), pop)
    assert np.allclose(negative_proposal(items, 3, "uniform"), uniform)
    mixed = negative_proposal(items, 3, "mixed")
    assert np.allclose(mixed, (pop + uniform) / 2) and np.isclose(mixed.sum(), 1.0)
    assert mixed[3] > pop[3]  # the unseen tail item is drawn more often than under popularity


def test_unknown_sampler_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="sampler must be one of"):
        negative_proposal(np.array([1]), 3, "zipf")


def test_per_sequence_draws_give_each_row_its_own_negatives_and_corrections() -> None:
    import torch

    from attnrec.models.objectives.negatives import SharedNegatives

    target = np.array([[0, 1, 2], [2, 2, 3], [0, 0, 1]])  # (B=3, T=3), 0 = no target
    shared = SharedNegatives.build(np.array([1, 1, 2, 3]), 50, "uniform", 6, per="sequence")
    neg = shared.draw(target, np.random.default_rng(0))["negative"]
    assert neg.shape == (3, 6) and not torch.equal(neg[0], neg[1])  # a row of draws per sequence
    assert int(neg.min()) >= 1 and int(neg.max()) <= 50
    pop = SharedNegatives.build(np.array([1, 1, 2, 3]), 3, "popularity", 4, in_batch=2, per="sequence")
    out = pop.draw(target, np.random.default_rng(1))
    assert out["negative"].shape == (3, 6) and out["neg_logq"].shape == (3, 6)  # 4 catalog + 2 in-batch each
    # a row's expected count of item k among its own draws: 4 q(k) + 2 c_k / N (the per-batch formula)
    q = pop.q
    flat = target[target > 0]
    for item, logq in zip(
        out["negative"].flatten().tolist(), out["neg_logq"].flatten().tolist(), strict=True
    ):
        assert np.isclose(logq, np.log(4 * q[item] + 2 * (flat == item).sum() / len(flat)), atol=1e-6)
    with pytest.raises(ValueError, match="negatives must be one of"):
        SharedNegatives.build(np.array([1]), 3, "uniform", 2, per="item")


def test_per_position_draws_give_each_position_its_own_negatives_and_corrections() -> None:
    from attnrec.models.objectives.negatives import SharedNegatives, whole_batch_keys

    target = np.array([[0, 1, 2], [2, 2, 3], [0, 0, 1]])  # (B=3, T=3), 0 = no target
    neg = SharedNegatives.build(np.array([1, 1, 2, 3]), 1000, "uniform", 6, per="position").draw(
        target, np.random.default_rng(0)
    )["negative"]
    assert neg.shape == (3, 3, 6)
    assert len({tuple(neg[b, t].tolist()) for b in range(3) for t in range(3)}) == 9  # every position its own
    pop = SharedNegatives.build(np.array([1, 1, 2, 3]), 3, "popularity", 4, in_batch=2, per="position")
    out = pop.draw(target, np.random.default_rng(1))
    assert out["negative"].shape == out["neg_logq"].shape == (3, 3, 6) and out["target_logq"].shape == (3, 3)
    flat = target[target > 0]
    for item, logq in zip(
        out["negative"].flatten().tolist(), out["neg_logq"].flatten().tolist(), strict=True
    ):
        assert np.isclose(logq, np.log(4 * pop.q[item] + 2 * (flat == item).sum() / len(flat)), atol=1e-6)
    assert whole_batch_keys("position") == frozenset()  # rows of the batch: DDP splits them with the inputs


def test_position_logits_dense_and_gathered_agree_with_by_hand() -> None:
    import torch

    from attnrec.models.objectives.kernels import POSITION_DENSE, position_logits

    g = torch.Generator().manual_seed(0)
    scored, table = torch.randn(5, 4, generator=g), torch.randn(31, 4, generator=g)  # 30 items + padding
    negative = torch.randint(1, 31, (5, 3), generator=g)
    by_hand = torch.stack(
        [torch.stack([scored[n] @ table[negative[n, s]] for s in range(3)]) for n in range(5)]
    )
    assert table.shape[0] <= POSITION_DENSE * 3  # the dense path, in chunks of 2 rows
    torch.testing.assert_close(position_logits(scored, table, negative, chunk=2), by_hand)
    wide = torch.randn(POSITION_DENSE * 3 + 1, 4, generator=g)  # one item too many: the gathered path
    torch.testing.assert_close(
        position_logits(scored, wide, negative), torch.einsum("nd,nsd->ns", scored, wide[negative])
    )
    assert position_logits(scored[:0], table, negative[:0]).shape == (0, 3)
