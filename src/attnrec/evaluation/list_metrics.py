"""List-level metrics: what the top-k lists recommend, whatever the held-out items were.

Each metric is a pure function of ``lists`` ``(n, k)``, the internal item indices recommended to each
of ``n`` users in rank order (0 marks an empty slot: a catalog with fewer candidates than ``k``), and
of what is known about the items:

* **coverage**: the share of the catalog recommended to anyone, ``|union of the lists| / I``;
* **novelty**: the mean self-information of the recommended items, ``-log2 p(i)``, with ``p(i) =
  (c_i + 1) / (C + I)`` the item's share of the ``C`` training interactions (``c_i`` of them),
  add-one smoothed so that an item never seen in training has a finite value; averaged over each
  list, then over the lists;
* **intra-list diversity** (ILD): the mean over the pairs of a list of ``1 - cos(v_i, v_j)`` for item
  vectors ``v`` (item features where the model has them, else its item embeddings); averaged over
  the lists of two or more items. A zero vector (an item without features) is orthogonal to all;
* **average recommendation popularity** (ARP): the mean training interaction count ``c_i`` of the
  recommended items, averaged over each list, then over the lists.

``I`` is the number of items (the catalog), ``c`` the training interaction counts per item.

>>> lists = np.array([[1, 2], [1, 3]])
>>> coverage(lists, n_items=4)                      # items 1, 2, 3 of 4
0.75
>>> average_popularity(lists, np.array([0, 6, 2, 0, 0]))  # ((6 + 2) / 2 + (6 + 0) / 2) / 2
3.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attnrec.data.features import AlignedFeatures
from attnrec.data.schema import Sequences
from attnrec.evaluation.metrics import LIST_FAMILIES, metric_keys
from attnrec.models.contracts import Factorised
from attnrec.models.item_context import ItemFeatures


@dataclass(frozen=True)
class SparseRows:
    """Item vectors in compressed rows: item ``i`` has ``values[offsets[i]:offsets[i + 1]]`` at the
    columns ``columns[offsets[i]:offsets[i + 1]]`` (row 0, the padding item, may be empty)."""

    offsets: np.ndarray  # (I + 2,) int64
    columns: np.ndarray  # (nnz,) int64
    values: np.ndarray  # (nnz,) float64

    @property
    def n_rows(self) -> int:
        return len(self.offsets) - 1


ItemVectors = np.ndarray | SparseRows  # (I + 1, D) dense, or sparse rows (one-hot features)


def _valid(lists: np.ndarray, n_rows: int | None = None, what: str = "") -> np.ndarray:
    """``lists`` as an int64 ``(users, k)`` matrix of indices ``>= 0`` (and ``< n_rows`` of ``what`` when
    given)."""
    a = np.asarray(lists, dtype=np.int64)
    if a.ndim != 2:
        raise ValueError(f"lists must be a (users, k) matrix, not of shape {a.shape}")
    if a.size and a.min() < 0:
        raise ValueError(f"lists hold item indices >= 0 (0 an empty slot), not {a.min()}")
    if n_rows is not None and a.size and a.max() >= n_rows:
        raise ValueError(f"the lists hold item index {a.max()}, but the {what} cover items 0..{n_rows - 1}")
    return a


def coverage(lists: np.ndarray, n_items: int) -> float:
    """Share of the ``n_items`` catalog items recommended in at least one list."""
    a = _valid(lists)
    if n_items < 1:
        raise ValueError(f"n_items must be positive, not {n_items}")
    return float(len(np.unique(a[a > 0])) / n_items)


def _list_means(lists: np.ndarray, item_values: np.ndarray) -> np.ndarray:
    """``(n,)`` the mean of ``item_values`` over each list's items (NaN for an empty list)."""
    a = _valid(lists, len(item_values), "item counts")
    filled = a > 0
    total = np.where(filled, item_values[a], 0.0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(total / filled.sum(axis=1), dtype=np.float64)


def _counts(counts: np.ndarray) -> np.ndarray:
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim != 1 or len(c) < 2 or np.any(c < 0):
        raise ValueError("item counts must be one non-negative count per item (index 0 the padding item)")
    return c


def self_information(counts: np.ndarray) -> np.ndarray:
    """``(I + 1,)`` ``-log2 p(i)`` with ``p(i) = (c_i + 1) / (C + I)`` (row 0, padding, is 0).

    >>> self_information(np.array([0, 2, 0])).round(4).tolist()    # p = 3/4, 1/4
    [0.0, 0.415, 2.0]
    """
    c = _counts(counts)
    n_items = len(c) - 1
    p = (c + 1.0) / (c[1:].sum() + n_items)
    info = -np.log2(p)
    info[0] = 0.0
    return np.asarray(info, dtype=np.float64)


def novelty_per_list(lists: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``(n,)`` each list's mean self-information (:func:`self_information`)."""
    return _list_means(lists, self_information(counts))


def novelty(lists: np.ndarray, counts: np.ndarray) -> float:
    """Mean self-information of the recommended items: per list, then over the lists.

    >>> round(novelty(np.array([[1], [2]]), np.array([0, 2, 0])), 4)   # (log2(4/3) + log2(4)) / 2
    1.2075
    """
    return float(np.nanmean(novelty_per_list(lists, counts)))


def popularity_per_list(lists: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``(n,)`` each list's mean training interaction count."""
    return _list_means(lists, _counts(counts))


def average_popularity(lists: np.ndarray, counts: np.ndarray) -> float:
    """ARP: the mean training interaction count of the recommended items, per list, then over the lists."""
    return float(np.nanmean(popularity_per_list(lists, counts)))


def _unit_sums(lists: np.ndarray, vectors: ItemVectors) -> tuple[np.ndarray, np.ndarray]:
    """Per list: ``||sum of its items' unit vectors||^2`` and how many of its items have a non-zero vector."""
    n_rows = vectors.n_rows if isinstance(vectors, SparseRows) else len(vectors)
    a = _valid(lists, n_rows, "item vectors")
    if not isinstance(vectors, SparseRows):
        v = np.asarray(vectors, dtype=np.float64)
        norm = np.linalg.norm(v, axis=1)
        unit = np.divide(v, norm[:, None], out=np.zeros_like(v), where=norm[:, None] > 0)
        s = np.where(a[:, :, None] > 0, unit[a], 0.0).sum(axis=1)  # (n, D)
        return (s**2).sum(axis=1), ((norm[a] > 0) & (a > 0)).sum(axis=1)
    per_row = np.diff(vectors.offsets)
    norm = np.sqrt(
        np.bincount(np.repeat(np.arange(vectors.n_rows), per_row), vectors.values**2, vectors.n_rows)
    )
    safe = np.where(norm > 0, norm, 1.0)  # a row of explicit zeros stays a zero vector
    slots = a.ravel()  # (n * k,) the item in each slot
    lengths = np.where(slots > 0, per_row[slots], 0)  # entries of each slot's vector
    first = np.cumsum(lengths) - lengths
    entry = np.repeat(vectors.offsets[slots], lengths) + np.arange(lengths.sum()) - np.repeat(first, lengths)
    owner = np.repeat(np.arange(len(slots)) // a.shape[1], lengths)  # (E,) the list of each entry
    width = int(vectors.columns.max(initial=0)) + 1
    keys, at = np.unique(owner * width + vectors.columns[entry], return_inverse=True)
    summed = np.bincount(
        at, vectors.values[entry] / safe[np.repeat(slots, lengths)], len(keys)
    )  # per (list, column)
    sq_sum = np.bincount(keys // width, summed**2, len(a))
    return sq_sum, ((norm[a] > 0) & (a > 0)).sum(axis=1)


def diversity_per_list(lists: np.ndarray, vectors: ItemVectors) -> np.ndarray:
    """``(n,)`` each list's mean pairwise ``1 - cos``, NaN for a list of fewer than two items.

    Over the ``m`` items of a list with unit vectors ``u``, the pairs' cosines sum to
    ``(||sum u||^2 - m') / 2`` (``m'`` the non-zero vectors), so no ``k x k`` matrix is formed.
    """
    a = _valid(lists)
    sq_sum, nonzero = _unit_sums(a, vectors)
    m = (a > 0).sum(axis=1)
    pairs = m * (m - 1) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m >= 2, 1.0 - (sq_sum - nonzero) / 2.0 / pairs, np.nan)


def intra_list_diversity(lists: np.ndarray, vectors: ItemVectors) -> float:
    """ILD: the mean pairwise ``1 - cos(v_i, v_j)`` within each list, averaged over the lists of 2+ items.

    >>> v = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [3.0, 0.0]])
    >>> intra_list_diversity(np.array([[1, 2], [1, 3]]), v)   # (1 - 0 + 1 - 1) / 2
    0.5
    """
    values = diversity_per_list(lists, vectors)
    return float(np.nanmean(values)) if np.any(~np.isnan(values)) else float("nan")


def feature_rows(features: AlignedFeatures) -> SparseRows:
    """Item feature vectors as sparse rows: one column per categorical value and per multi/text value
    (1 where the item has it), one per numeric field (its standardised value, 0 where missing)."""
    n = features.n_rows
    row_parts: list[np.ndarray] = []
    col_parts: list[np.ndarray] = []
    val_parts: list[np.ndarray] = []
    base = 0
    for name, codes in features.categorical.items():
        rows = np.flatnonzero(codes > 0)
        row_parts.append(rows)
        col_parts.append(base + codes[rows])
        val_parts.append(np.ones(len(rows)))
        base += features.vocab_sizes[name] + 1
    for name, matrix in features.multi.items():
        rows, slots = np.nonzero(matrix > 0)
        row_parts.append(rows)
        col_parts.append(base + matrix[rows, slots])
        val_parts.append(np.ones(len(rows)))
        base += features.vocab_sizes[name] + 1
    for name, values in features.numeric.items():
        rows = np.flatnonzero(features.present[name] & (values != 0))
        row_parts.append(rows)
        col_parts.append(np.full(len(rows), base))
        val_parts.append(values[rows].astype(np.float64))
        base += 1
    rows = np.concatenate(row_parts or [np.zeros(0, dtype=np.int64)]).astype(np.int64)
    order = np.argsort(rows, kind="stable")
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=offsets[1:])
    columns = np.concatenate(col_parts or [np.zeros(0, dtype=np.int64)]).astype(np.int64)[order]
    values = np.concatenate(val_parts or [np.zeros(0)]).astype(np.float64)[order]
    return SparseRows(offsets, columns, values)


def item_vectors_of(core: object, features: ItemFeatures | None) -> ItemVectors | None:
    """The vectors intra-list diversity compares: the model's item ``features`` where it has them (one-hot
    values, standardised numbers; :func:`feature_rows`), else its item embeddings (a factorised model's
    output table), else ``None`` (a model with neither, e.g. popularity)."""
    if features is not None:
        return feature_rows(features.aligned)
    if isinstance(core, Factorised):
        return np.asarray(core.item_vectors().detach().float().cpu().numpy(), dtype=np.float64)
    return None


def training_counts(train: Sequences) -> np.ndarray:
    """``(I + 1,)`` interactions per item in the training sequences: what novelty and ARP are measured
    against."""
    return np.bincount(train.items, minlength=train.n_items + 1).astype(np.int64)


def list_metrics(
    lists: np.ndarray,
    ks: Sequence[int],
    families: Sequence[str],
    *,
    n_items: int,
    counts: np.ndarray | None = None,
    vectors: ItemVectors | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """``(metrics, standard errors)`` of each of ``families`` (of :data:`LIST_FAMILIES`) for the top-k of
    ``lists`` at every ``k`` of ``ks``. Novelty and ARP need the training ``counts``, diversity the item
    ``vectors``; coverage, a property of all the lists together, has no standard error."""
    a = _valid(lists)
    out: dict[str, float] = {}
    se: dict[str, float] = {}
    for family in (f for f in LIST_FAMILIES if f in families):
        if family in ("Novelty", "ARP") and counts is None:
            raise ValueError(f"{family} needs the items' training interaction counts")
        if family == "Diversity" and vectors is None:
            raise ValueError("Diversity needs item vectors: item features or item embeddings")
        for name, k in metric_keys(family, ks):
            top = a[:, :k]
            if family == "Coverage":
                out[name] = coverage(top, n_items)
                continue
            if family == "Diversity":
                assert vectors is not None
                per = diversity_per_list(top, vectors)
            else:
                assert counts is not None
                per = (novelty_per_list if family == "Novelty" else popularity_per_list)(top, counts)
            per = per[~np.isnan(per)]
            out[name] = float(np.mean(per)) if len(per) else float("nan")
            if len(per) >= 2:
                se[name] = float(np.std(per, ddof=1) / np.sqrt(len(per)))
    return out, se
