"""Attention masks: which key positions each query position may attend to.

Item sequences are left-padded with item 0, so padding keys are the positions where ``seq == 0``.

Two forms. The boolean masks (HSTU's pointwise attention, PETER) are True where attention is
*allowed*, ``(B, 1, T, T)`` or ``(T, T)``; a padding query is given itself as a key, since a row with
no allowed key would be a softmax over nothing (NaN). The additive biases are what the softmax attention of
SASRec, eSASRec and BERT4Rec adds to its logits: 0 where allowed, ``-inf`` for a later key and
:data:`PADDING_BIAS` for a padding key. They are built from small broadcast tensors in one pass; a boolean
mask would be converted to the same float form inside the fused kernel on every call, which on the CPU cost
about as much as the attention itself. A padding key's bias is finite, so a row without a real key is still
finite; a real query's softmax gives padding keys exactly 0 either way, because ``exp(-1e4)`` underflows in
every float type. The causal bias also gives each padding query itself (0 on the diagonal), as the
boolean mask does: the shifted next-item objective reads one padding row, the position just before a
sequence's first item, whose target is that item. With the diagonal its attention (and so the loss)
is bit-identical to the boolean mask's; without it the row would average every earlier padding
position instead. BERT4Rec's padding rows are never read (its targets are real positions).
"""

from __future__ import annotations

import torch

# Far below any attention logit, yet finite in float16 (autocast casts the bias with the logits).
PADDING_BIAS = -1e4


def causal_mask(seq: torch.Tensor) -> torch.Tensor:
    """``(B, 1, T, T)`` for ``seq`` ``(B, T)``: query t sees the real keys s <= t; padding queries see only
    themselves."""
    t = seq.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=seq.device).tril()  # (T, T)
    real_key = (seq > 0)[:, None, None, :]  # (B, 1, 1, T)
    eye = torch.eye(t, dtype=torch.bool, device=seq.device)  # (T, T)
    return (causal & real_key) | eye  # (B, 1, T, T)


def padding_bias(seq: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(B, 1, 1, T)`` for ``seq`` ``(B, T)``: 0 for real keys, :data:`PADDING_BIAS` for padding keys.
    As an additive mask it is BERT4Rec's: every query sees every real key."""
    bias = torch.zeros(seq.shape, dtype=dtype, device=seq.device).masked_fill_(
        seq == 0, PADDING_BIAS
    )  # (B, T)
    return bias[:, None, None, :]  # (B, 1, 1, T)


def causal_bias(seq: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(B, 1, T, T)`` additive mask for ``seq`` ``(B, T)``: query t sees the real keys s <= t, a padding
    query only itself (the same rows as :func:`causal_mask`)."""
    t = seq.shape[1]
    later = torch.full((t, t), -torch.inf, dtype=dtype, device=seq.device).triu(
        1
    )  # (T, T): -inf above the diagonal
    bias = later + padding_bias(seq, dtype)  # (B, 1, T, T), a new tensor
    # a padding query sees itself; a real one's diagonal is 0 already
    if torch.compiler.is_exporting():  # torch.export (ONNX) takes functional graphs only: the same values
        return torch.where(torch.eye(t, dtype=torch.bool, device=seq.device), 0.0, bias)
    bias.diagonal(dim1=-2, dim2=-1).zero_()  # in place: a tenth of torch.where's time on the CPU
    return bias


def peter_mask(total_len: int, peter: bool = True) -> torch.Tensor:
    """``(T, T)`` for PETER's ``[user, item, (feature,) words]``: causal, plus user (0) -> item (1).

    With ``peter=False`` it is the plain causal mask (the paper's ablation).
    """
    allowed = torch.ones(total_len, total_len, dtype=torch.bool).tril()  # (T, T)
    if peter and total_len > 1:
        allowed[0, 1] = True  # the user position also sees the item, so the two IDs see each other
    return allowed
