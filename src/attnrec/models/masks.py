"""Attention masks: which key positions each query position may attend to.

Every mask is boolean and True where attention is *allowed*, in the layout
``F.scaled_dot_product_attention`` takes: ``(B, 1, T, T)`` (one mask shared by the heads) or
``(T, T)``. Item sequences are left-padded with item 0, so padding keys are the positions where
``seq == 0``. A padding query is given itself as a key: a row with no allowed key would be a softmax
over nothing (NaN), and the padding rows' outputs are never read.
"""

from __future__ import annotations

import torch


def causal_mask(seq: torch.Tensor) -> torch.Tensor:
    """``(B, 1, T, T)`` for ``seq`` ``(B, T)``: query t sees the real keys s <= t; padding queries see only themselves."""
    t = seq.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=seq.device).tril()  # (T, T)
    real_key = (seq > 0)[:, None, None, :]  # (B, 1, 1, T)
    eye = torch.eye(t, dtype=torch.bool, device=seq.device)  # (T, T)
    return (causal & real_key) | eye  # (B, 1, T, T)


def bidirectional_mask(seq: torch.Tensor) -> torch.Tensor:
    """``(B, 1, T, T)`` for ``seq`` ``(B, T)``: every query sees every real key; padding queries also see themselves."""
    t = seq.shape[1]
    real_key = (seq > 0)[:, None, None, :]  # (B, 1, 1, T)
    return real_key | torch.eye(t, dtype=torch.bool, device=seq.device)  # (B, 1, T, T)


def peter_mask(total_len: int, peter: bool = True) -> torch.Tensor:
    """``(T, T)`` for PETER's ``[user, item, (feature,) words]``: causal, plus user (0) -> item (1).

    With ``peter=False`` it is the plain causal mask (the paper's ablation).
    """
    allowed = torch.ones(total_len, total_len, dtype=torch.bool).tril()  # (T, T)
    if peter and total_len > 1:
        allowed[0, 1] = True  # the user position also sees the item, so the two IDs see each other
    return allowed
