"""Full-catalog score matrices: the one place that turns a model's outputs into ``(B, I + 1)`` scores.

Column 0 of every full score matrix is the padding item, never a candidate: it is ``-inf``, so no
top-k, metric or softmax can pick it (see :mod:`attnrec.models.contracts`).
"""

from __future__ import annotations

import torch


def mask_padding(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` ``(B, I + 1)`` with column 0 (padding) set to ``-inf``, in place; returns ``scores``."""
    scores[:, 0] = -torch.inf
    return scores


def factorised_scores(
    query: torch.Tensor, items: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``query @ items.T (+ bias)`` with the padding column ``-inf``: ``(B, I + 1)``.

    ``query`` ``(B, D)`` are a factorised model's query vectors, ``items`` ``(I + 1, D)`` its item
    vectors (row 0 is padding) and ``bias`` ``(I + 1,)`` its optional per-item bias.
    """
    scores = query @ items.T  # (B, I+1)
    if bias is not None:
        scores = scores + bias  # (B, I+1)
    return mask_padding(scores)
