"""The additive attention biases against the boolean masks they replace in the softmax models."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnrec.models.nn.masks import PADDING_BIAS, causal_bias, causal_mask, padding_bias

SEQ = torch.tensor([[0, 0, 3, 4, 5], [1, 2, 3, 4, 5], [0, 0, 0, 0, 7]])  # left-padded (B=3, T=5)


def test_causal_bias_is_zero_where_the_mask_allows_and_blocks_later_and_padding_keys() -> None:
    bias = causal_bias(SEQ)  # (3, 1, 5, 5)
    assert bias.shape == (3, 1, 5, 5)
    allowed = causal_mask(SEQ)  # a padding query allowed only itself
    for b in range(3):
        for t in range(5):
            for s in range(5):
                want = 0.0 if allowed[b, 0, t, s] else (-torch.inf if s > t else PADDING_BIAS)
                assert bias[b, 0, t, s].item() == want, (b, t, s)


def test_the_causal_bias_gives_the_boolean_masks_attention_on_every_row() -> None:
    # padding rows too: the shifted objective's first target (seq [0, 0, 3, ...] -> target [0, 3, ...]) is
    # predicted from the padding query just before the first item, so that row reaches the loss
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, generator=g) * 3 for _ in range(3))  # (B, H, T, D/H)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_bias(SEQ))  # (B, H, T, D/H)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(SEQ))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert not torch.equal(got[0, :, 1], got[0, :, 0]), (
        "padding query 1 sees itself, not an average with query 0's key"
    )


def test_the_padding_bias_gives_bidirectional_attention_on_real_queries_and_finite_padding_rows() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 5, 4, generator=g) * 3 for _ in range(3))  # (B, H, T, D/H)
    real = (SEQ > 0)[:, None, :, None]  # (B, 1, T, 1)
    every_real_key = (SEQ > 0)[:, None, None, :] | torch.eye(
        5, dtype=torch.bool
    )  # (B, 1, T, T) bidirectional
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=padding_bias(SEQ))  # (B, H, T, D/H)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=every_real_key)
    torch.testing.assert_close(
        got * real, want * real, rtol=0, atol=1e-6
    )  # BERT4Rec never reads padding rows
    assert torch.isfinite(got).all()  # a padding query without real keys still gets a finite row


def test_padding_bias_stays_finite_in_float16() -> None:
    # autocast casts the bias with the logits: -inf there would make padding rows NaN
    assert torch.isfinite(padding_bias(SEQ, torch.float16)).all()
    assert padding_bias(SEQ).shape == (3, 1, 1, 5)
