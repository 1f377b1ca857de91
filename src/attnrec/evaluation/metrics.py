"""Ranking metrics as pure functions of where the held-out items were placed.

Single-target protocols hold out one item per case: a case is its target's 0-based rank among the
candidates (0 means the held-out item was placed first). Ties are counted against the model (an item
with the same score as the target is ranked above it), so a constant scorer cannot look good.

Multi-target protocols (every item a user interacts with in a time window) hold out a set per case:
:class:`TargetRanks` holds each case's targets' 0-based positions in the ranked list. One-target cases
are the special case ``TargetRanks.single(ranks)``, and every metric below means the same on both.

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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_KS: tuple[int, ...] = (1, 5, 10)
"""The cut-offs ``K`` of HR@K and NDCG@K unless a protocol names others."""

METRICS: tuple[str, ...] = ("HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR")
"""The metrics of every results table, in column order: what :func:`ranking_metrics` gives for
:data:`DEFAULT_KS`."""

RANKING_FAMILIES: tuple[str, ...] = ("HR", "NDCG", "MRR", "Recall", "Precision", "MAP")
"""The ranking metrics, in the order results list them (each ``<family>@<k>``, MRR without a cut-off)."""
LIST_FAMILIES: tuple[str, ...] = ("Coverage", "Novelty", "Diversity", "ARP")
"""The list-level metrics (:mod:`attnrec.evaluation.list_metrics`): of the top-k lists, not of the targets."""
FAMILIES: tuple[str, ...] = RANKING_FAMILIES + LIST_FAMILIES
DEFAULT_FAMILIES: tuple[str, ...] = ("HR", "NDCG", "MRR")
"""What an evaluation reports unless asked for more (:data:`METRICS` at the default cut-offs)."""


def parse_families(text: str | Sequence[str]) -> tuple[str, ...]:
    """Metric families from ``"recall,map"`` or a list, in any case (``hr``, ``ndcg``, ``mrr``, ``recall``,
    ``precision``, ``map``, ``coverage``, ``novelty``, ``diversity``, ``arp``), in :data:`FAMILIES` order.

    >>> parse_families("map, RECALL,hr")
    ('HR', 'Recall', 'MAP')
    """
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    by_key = {f.lower(): f for f in FAMILIES}
    unknown = [n for n in names if n.lower() not in by_key]
    if unknown:
        raise ValueError(f"unknown metric {unknown[0]!r}; use {', '.join(f.lower() for f in FAMILIES)}")
    if not names:
        raise ValueError(f"no metric named; use {', '.join(f.lower() for f in FAMILIES)}")
    asked = {by_key[n.lower()] for n in names}
    return tuple(f for f in FAMILIES if f in asked)


@dataclass(frozen=True)
class TargetRanks:
    """Each case's held-out items' 0-based positions in its ranked list, ascending: case ``c`` holds
    ``positions[offsets[c]:offsets[c + 1]]`` (at least one per case). A position counts every
    non-target candidate scored at least as high as the target (ties against the model) plus the
    targets ranked above it."""

    offsets: np.ndarray  # (n + 1,) int64
    positions: np.ndarray  # (T,) int64

    def __post_init__(self) -> None:
        if len(self.offsets) < 1 or self.offsets[0] != 0 or self.offsets[-1] != len(self.positions):
            raise ValueError("TargetRanks: offsets must run from 0 to the number of positions")
        if np.any(np.diff(self.offsets) < 1):
            raise ValueError("TargetRanks: every case needs at least one target")

    @classmethod
    def single(cls, ranks: np.ndarray) -> TargetRanks:
        """One target per case at ``ranks``."""
        r = np.asarray(ranks, dtype=np.int64)
        return cls(np.arange(len(r) + 1, dtype=np.int64), r)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def counts(self) -> np.ndarray:
        """``(n,)`` targets per case."""
        return np.diff(self.offsets)

    def _case(self) -> np.ndarray:
        return np.repeat(np.arange(len(self)), self.counts)  # (T,) the case of each position

    def _sum(self, weights: np.ndarray) -> np.ndarray:
        return np.bincount(self._case(), weights=weights, minlength=len(self)).astype(np.float64)

    def hits(self, k: int) -> np.ndarray:
        """``(n,)`` targets among the top ``k``."""
        return self._sum((self.positions < k).astype(np.float64))


def _per_case(family: str, t: TargetRanks, k: int) -> np.ndarray:
    """``(n,)`` each case's value of ``family@k`` (MRR: ``k`` ignored, the whole list)."""
    return np.asarray(_case_values(family, t, k), dtype=np.float64)


def _case_values(family: str, t: TargetRanks, k: int) -> Any:  # numpy arithmetic is typed Any
    p = t.positions.astype(np.float64)
    if family == "HR":  # 1 when any target is in the top k
        return (t.hits(k) > 0).astype(np.float64)
    if family == "Recall":  # share of the targets in the top k
        return t.hits(k) / t.counts
    if family == "Precision":  # share of the top k that are targets
        return t.hits(k) / k
    if family == "NDCG":  # DCG of the targets in the top k over the best DCG of min(k, n) targets
        dcg = t._sum(np.where(p < k, 1.0 / np.log2(p + 2.0), 0.0))
        ideal = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(k) + 2.0))])  # (k + 1,)
        return dcg / ideal[np.minimum(t.counts, k)]
    if family == "MAP":  # average precision at each target in the top k, over all n targets
        # each target's 0-based order among its case's targets
        nth = np.arange(len(p)) - np.repeat(t.offsets[:-1], t.counts)
        return t._sum(np.where(p < k, (nth + 1.0) / (p + 1.0), 0.0)) / t.counts
    if family == "MRR":  # reciprocal position of the first target
        return 1.0 / (p[t.offsets[:-1]] + 1.0)
    raise ValueError(f"not a ranking metric: {family!r}")


def metric_keys(family: str, ks: Sequence[int]) -> list[tuple[str, int]]:
    """``(name, k)`` of each metric of ``family`` at the cut-offs ``ks``: NDCG@1 (equal to HR@1) and
    Diversity@1 (a list of one has no pairs) are left out, MRR has one value (``k`` 0)."""
    if family == "MRR":
        return [("MRR", 0)]
    skip_one = family in ("NDCG", "Diversity")
    return [(f"{family}@{k}", k) for k in ks if not (skip_one and k == 1)]


def _ranking(
    ranks: np.ndarray | TargetRanks,
    ks: Sequence[int],
    families: Sequence[str],
    summary: Callable[[np.ndarray], float],
) -> dict[str, float]:
    t = ranks if isinstance(ranks, TargetRanks) else TargetRanks.single(ranks)
    out: dict[str, float] = {}
    for family in (f for f in RANKING_FAMILIES if f in families):
        for name, k in metric_keys(family, ks):
            out[name] = summary(_per_case(family, t, k))
    return out


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def ranking_metrics(
    ranks: np.ndarray | TargetRanks,
    ks: Sequence[int] = DEFAULT_KS,
    families: Sequence[str] = DEFAULT_FAMILIES,
) -> dict[str, float]:
    """Each of ``families`` (of :data:`RANKING_FAMILIES`) at every k, averaged over the cases: by default
    HR@k and NDCG@k for every k (NDCG@1 equals HR@1 and is left out) plus MRR.

    ``ranks`` is one target rank per case or a :class:`TargetRanks` of several. With one target per
    case Recall@k equals HR@k, Precision@k is HR@k / k and MAP@k is MRR cut at k.

    >>> t = TargetRanks(np.array([0, 2]), np.array([0, 2]))  # one case, targets placed 1st and 3rd
    >>> m = ranking_metrics(t, (3,), ("Recall", "Precision", "MAP"))
    >>> m["Recall@3"], round(m["Precision@3"], 4), round(m["MAP@3"], 4)  # MAP: (1/1 + 2/3) / 2
    (1.0, 0.6667, 0.8333)
    """
    return _ranking(ranks, ks, families, _mean)


def ranking_standard_errors(
    ranks: np.ndarray | TargetRanks,
    ks: Sequence[int] = DEFAULT_KS,
    families: Sequence[str] = DEFAULT_FAMILIES,
) -> dict[str, float]:
    """Standard error of each metric of :func:`ranking_metrics`: the per-case values' sample standard
    deviation over the square root of the number of cases (how far the mean moves by chance alone).

    >>> se = ranking_standard_errors(np.array([0, 20, 20, 20]), ks=(10,))
    >>> round(se["HR@10"], 4)      # values 1, 0, 0, 0: sd 0.5, over sqrt(4)
    0.25
    """
    n = len(ranks)
    if n < 2:
        return {}
    return _ranking(ranks, ks, families, lambda v: float(np.std(v, ddof=1) / np.sqrt(len(v))))


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
