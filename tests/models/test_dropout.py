"""FastDropout (SASRec's ``fast_dropout``): the distribution of nn.Dropout, from another random stream."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnrec.data.schema import Interactions
from attnrec.data.split import leave_one_out
from attnrec.models.nn.layers import FastDropout
from attnrec.models.sasrec import SASRec, SASRecConfig
from grad_checks import assert_trains

SMALL = {"hidden": 16, "n_layers": 2, "n_heads": 2, "max_len": 12, "dropout": 0.3, "loss": "ce"}


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keeps_one_minus_p_of_the_elements_and_scales_them(p: float) -> None:
    torch.manual_seed(0)
    x = torch.rand(1000, 1000) + 1.0  # no zeros of its own
    y = FastDropout(p).train()(x)
    kept = y != 0
    share = kept.double().mean().item()
    assert abs(share - (1 - p)) < 4 * (p * (1 - p) / x.numel()) ** 0.5  # within 4 standard errors
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    # every 16-bit lane of a 64-bit draw (elements 4k, 4k+1, 4k+2, 4k+3) keeps the same share: the top
    # lane, whose sign bit the generator never sets, is not biased
    lanes = kept.flatten().view(-1, 4).double().mean(0)
    assert (lanes - (1 - p)).abs().max().item() < 4 * (p * (1 - p) / (x.numel() / 4)) ** 0.5


def test_identity_in_eval_and_at_p_0_and_zero_at_p_1() -> None:
    x = torch.randn(7, 5)
    assert torch.equal(FastDropout(0.5).eval()(x), x)
    assert torch.equal(FastDropout(0.0).train()(x), x)
    assert torch.equal(FastDropout(1.0).train()(x), torch.zeros_like(x))


def test_gradient_is_the_mask_times_the_scale_and_a_seed_repeats_it() -> None:
    x = torch.randn(64, 33, requires_grad=True)  # 2,112 elements: not a multiple of 64 bits' lanes
    torch.manual_seed(3)
    y = FastDropout(0.25).train()(x)
    y.sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, (y.detach() != 0).float() / 0.75)
    torch.manual_seed(3)
    assert torch.equal(FastDropout(0.25).train()(x), y)


def test_sasrec_with_fast_dropout_trains_and_scores_as_without_it(ring: Interactions) -> None:
    """Same weights: the same scores in evaluation (dropout is off there); in training its masks are
    FastDropout's (the default), or nn.Dropout's with ``fast_dropout = false``."""
    split = leave_one_out(ring)
    torch.manual_seed(0)
    fast = SASRec(SASRecConfig(**SMALL), ring.n_users, ring.n_items)  # type: ignore[arg-type]
    plain_config = SASRecConfig(**(SMALL | {"fast_dropout": False}))  # type: ignore[arg-type]
    plain = SASRec(plain_config, ring.n_users, ring.n_items)
    plain.load_state_dict(fast.state_dict())
    assert (
        sum(isinstance(m, FastDropout) for m in fast.modules()) == 5
    )  # embeddings + 2 a block (FFN's used twice)
    assert not any(isinstance(m, nn.Dropout) for m in fast.modules())  # none left behind
    assert not any(isinstance(m, FastDropout) for m in plain.modules())
    seq = torch.tensor([[0, 0, 1, 2, 3], [4, 5, 6, 7, 8]])
    with torch.no_grad():
        torch.testing.assert_close(fast.eval().score({"seq": seq}), plain.eval().score({"seq": seq}))
    assert_trains(fast.train(), split.train)
