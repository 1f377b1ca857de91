"""Item-to-item similarity: cosine of the model's item vectors, or of co-occurrence in the stored histories.

:class:`Derived` holds what serving derives from a fitted recommender (the popularity tensor,
inverse vector norms, the item -> users inverted index), built on first use and dropped whenever
the core changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from attnrec.data.schema import IdMap, Sequences
from attnrec.models.contracts import Factorised
from attnrec.recommend.topk import Recommendation, topk_chunked


@dataclass
class Derived:
    """Serving data derived from a fitted recommender, built lazily."""

    popularity: torch.Tensor | None = None  # (I + 1,) float32 training counts
    inv_norm: tuple[tuple[int, int, torch.Size], torch.Tensor] | None = None  # (key of the vectors, (I + 1,))
    inverted: tuple[np.ndarray, np.ndarray] | None = None  # item -> users: (offsets (I + 2,), owners)

    def clear(self) -> None:
        """Forget everything (the core or the data changed)."""
        self.popularity = self.inv_norm = self.inverted = None


def popularity_tensor(cache: Derived, popularity: np.ndarray) -> torch.Tensor:
    """``popularity`` as a float32 tensor ``(I + 1,)``, converted once."""
    if cache.popularity is None:
        cache.popularity = torch.as_tensor(np.asarray(popularity), dtype=torch.float32)
    return cache.popularity


def by_embedding(
    model: Factorised, idx: int, k: int, banned: torch.Tensor, cache: Derived
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` cosine similarity of item ``idx``'s vector to every other item vector: ``(1, k)`` twice."""
    vectors = model.item_vectors().float()  # (I + 1, D)
    inv_norm = _inverse_norms(vectors, cache)  # (I + 1,)
    q = (vectors[idx] * inv_norm[idx]).unsqueeze(0)  # (1, D)

    def chunk(lo: int, hi: int) -> torch.Tensor:
        return (q @ vectors[lo:hi].T) * inv_norm[lo:hi]  # (1, hi - lo)

    return topk_chunked(
        chunk,
        1,
        len(vectors),
        k,
        torch.zeros(1, dtype=torch.long, device=vectors.device),
        banned.to(vectors.device),
    )


def by_cooccurrence(
    histories: Sequences, popularity: torch.Tensor, idx: int, k: int, banned: torch.Tensor, cache: Derived
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` cosine of co-occurrence counts with item ``idx`` (items never seen with it are ``-inf``)."""
    co = torch.as_tensor(_cooccurrence(histories, idx, cache), dtype=torch.float32)  # (I + 1,)
    pop = popularity.clamp_min(1.0)  # (I + 1,)
    s = co / torch.sqrt(pop * pop[idx])  # (I + 1,)
    s[co == 0] = -torch.inf
    return topk_chunked(
        lambda lo, hi: s[lo:hi].unsqueeze(0).clone(), 1, len(s), k, torch.zeros(1, dtype=torch.long), banned
    )


def _inverse_norms(vectors: torch.Tensor, cache: Derived) -> torch.Tensor:
    # keyed by storage, version and shape: training or loading new weights invalidates it
    key = (vectors.data_ptr(), vectors._version, vectors.shape)
    if cache.inv_norm is None or cache.inv_norm[0] != key:
        cache.inv_norm = (key, 1.0 / vectors.norm(dim=1).clamp_min(1e-12))
    return cache.inv_norm[1]


def _cooccurrence(h: Sequences, idx: int, cache: Derived) -> np.ndarray:
    """Per item, how many stored interactions share a user with ``idx`` (length ``n_items + 1``)."""
    if cache.inverted is None:  # item -> users, built once
        order = np.argsort(h.items, kind="stable")
        owners = np.repeat(np.arange(h.n_users, dtype=np.int64), h.lengths())[order]
        offsets = np.zeros(h.n_items + 2, dtype=np.int64)
        np.cumsum(np.bincount(h.items, minlength=h.n_items + 1), out=offsets[1:])
        cache.inverted = (offsets, owners)
    offsets, owners = cache.inverted
    users = np.unique(owners[offsets[idx] : offsets[idx + 1]])
    return np.bincount(h.take(users).items, minlength=h.n_items + 1)


def similar_items(
    factorised: Factorised | None,
    histories: Sequences,
    popularity: np.ndarray,
    items: IdMap,
    titles: Mapping[str, str],
    cache: Derived,
    item: object,
    k: int,
) -> Recommendation:
    """The ``k`` items most similar to the external ``item``: cosine of the ``factorised`` model's item
    vectors, else of co-occurrence in ``histories`` (see
    :meth:`~attnrec.recommend.Recommender.similar_items`)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    idx = items.get(item)
    if idx is None:
        raise KeyError(f"unknown item {str(item)!r}")
    banned = torch.tensor([idx], dtype=torch.long)
    with torch.inference_mode():
        if factorised is not None:
            method = "embedding-cosine"
            v, ix = by_embedding(factorised, idx, k, banned, cache)
        else:
            method = "co-occurrence"
            v, ix = by_cooccurrence(histories, popularity_tensor(cache, popularity), idx, k, banned, cache)
    v, ix = v[0].cpu(), ix[0].cpu()
    ok = torch.isfinite(v)
    found = items.to_external(ix[ok].numpy())
    return Recommendation(found, v[ok].tolist(), [titles.get(i) for i in found], method=method)


__all__ = ["Derived", "by_cooccurrence", "by_embedding", "popularity_tensor", "similar_items"]
