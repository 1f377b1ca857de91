"""Ranking metrics as pure functions of the target's 0-based rank among the candidates.

A rank of 0 means the held-out item was placed first. Ties are counted against the model
(an item with the same score as the target is ranked above it), so a constant scorer cannot
look good.

>>> import numpy as np
>>> ranks = np.array([0, 3, 20])
>>> round(hit_rate(ranks, 5), 4)     # 2 of 3 targets in the top 5
0.6667
>>> round(ndcg(ranks, 5), 4)         # (1/log2(2) + 1/log2(5)) / 3
0.4769
>>> round(mrr(ranks), 4)             # (1 + 1/4 + 1/21) / 3
0.4325
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
"""The cut-offs ``K`` of HR@K and NDCG@K unless a protocol names others."""

METRICS: tuple[str, ...] = ("HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR")
"""The metrics of every results table, in column order: what :func:`ranking_metrics` gives for :data:`DEFAULT_KS`."""


def hit_rate(ranks: np.ndarray, k: int) -> float:
    """HR@k: share of cases whose target is among the top ``k``."""
    r = np.asarray(ranks)
    return float(np.mean(r < k)) if len(r) else float("nan")


def ndcg(ranks: np.ndarray, k: int) -> float:
    """NDCG@k with one relevant item: ``1 / log2(rank + 2)`` when ``rank < k``, else 0."""
    r = np.asarray(ranks, dtype=np.float64)
    if not len(r):
        return float("nan")
    gains = np.where(r < k, 1.0 / np.log2(r + 2.0), 0.0)
    return float(np.mean(gains))


def mrr(ranks: np.ndarray, k: int | None = None) -> float:
    """Mean reciprocal rank over the whole candidate list (or only the top ``k`` when given)."""
    r = np.asarray(ranks, dtype=np.float64)
    if not len(r):
        return float("nan")
    rr = 1.0 / (r + 1.0)
    if k is not None:
        rr = np.where(r < k, rr, 0.0)
    return float(np.mean(rr))


def ranking_metrics(ranks: np.ndarray, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """HR@k and NDCG@k for every k (NDCG@1 equals HR@1 and is left out) plus MRR."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"HR@{k}"] = hit_rate(ranks, k)
    for k in ks:
        if k > 1:
            out[f"NDCG@{k}"] = ndcg(ranks, k)
    out["MRR"] = mrr(ranks)
    return out


def ranking_standard_errors(ranks: np.ndarray, ks: Sequence[int] = DEFAULT_KS) -> dict[str, float]:
    """Standard error of each metric of :func:`ranking_metrics`: the per-case values' sample standard
    deviation over the square root of the number of cases (how far the mean moves by chance alone).

    >>> se = ranking_standard_errors(np.array([0, 20, 20, 20]), ks=(10,))
    >>> round(se["HR@10"], 4)      # values 1, 0, 0, 0: sd 0.5, over sqrt(4)
    0.25
    """
    r = np.asarray(ranks, dtype=np.float64)
    if len(r) < 2:
        return {}

    def se(values: np.ndarray) -> float:
        return float(np.std(values, ddof=1) / np.sqrt(len(values)))

    out: dict[str, float] = {}
    for k in ks:
        out[f"HR@{k}"] = se((r < k).astype(np.float64))
    for k in ks:
        if k > 1:
            out[f"NDCG@{k}"] = se(np.where(r < k, 1.0 / np.log2(r + 2.0), 0.0))
    out["MRR"] = se(1.0 / (r + 1.0))
    return out
