"""Similar items of a :class:`~attnrec.recommend.recommender.Recommender`: cosine of the model's item
vectors, or of co-occurrence in the stored histories.

:class:`SimilarItems` answers in external IDs; the inverse vector norms and the item -> users inverted
index it needs are kept in the recommender's derived data
(:class:`~attnrec.recommend.recommender_state.Derived`), built on first use.
"""

from __future__ import annotations

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models.contracts import Factorised
from attnrec.recommend.recommender_state import Derived, RecommenderState, popularity_tensor
from attnrec.recommend.requests import check_id, check_k
from attnrec.recommend.topk import Recommendation, topk_chunked


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
        owners = h.owners()[order]
        offsets = np.zeros(h.n_items + 2, dtype=np.int64)
        np.cumsum(np.bincount(h.items, minlength=h.n_items + 1), out=offsets[1:])
        cache.inverted = (offsets, owners)
    offsets, owners = cache.inverted
    users = np.unique(owners[offsets[idx] : offsets[idx + 1]])
    return np.bincount(h.take(users).items, minlength=h.n_items + 1)


class SimilarItems(RecommenderState):
    """Item-to-item answers: :meth:`similar_items`."""

    def similar_items(self, item: object, k: int = 10) -> Recommendation:
        """The ``k`` items most similar to ``item`` (an external ID), most similar first.

        Cosine similarity of the model's item vectors when it is factorised
        (``method="embedding-cosine"``), otherwise cosine of co-occurrence in the stored user
        histories (``method="co-occurrence"``: items never seen with ``item`` are not returned).
        Raises :class:`KeyError` for an unknown item, :class:`ValueError` for an ``item`` that is no ID
        (:func:`~attnrec.recommend.requests.check_id`: ``["1", "2"]`` or None was "unknown item").
        """
        view = self._fitted_view()
        assert self.items_ is not None and self.histories_ is not None and self.popularity_ is not None
        k = check_k(k)
        idx = self.items_.get(check_id("item", item))
        if idx is None:
            raise KeyError(f"unknown item {str(item)!r}")
        banned = torch.tensor([idx], dtype=torch.long)
        with torch.inference_mode():
            if view.factorised is not None:
                method = "embedding-cosine"
                v, ix = by_embedding(view.factorised, idx, k, banned, self._cache)
            else:
                method = "co-occurrence"
                pop = popularity_tensor(self._cache, self.popularity_)
                v, ix = by_cooccurrence(self.histories_, pop, idx, k, banned, self._cache)
        v, ix = v[0].cpu(), ix[0].cpu()
        ok = torch.isfinite(v)
        found = self.items_.to_external(ix[ok].numpy())
        return Recommendation(found, v[ok].tolist(), [self.titles_.get(i) for i in found], method=method)


__all__ = ["SimilarItems", "by_cooccurrence", "by_embedding"]
