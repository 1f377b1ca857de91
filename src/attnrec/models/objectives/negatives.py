"""Negative items for training: unseen items per row, and negatives shared by a batch for a sampled softmax.

Everything here builds batches (NumPy, drawn from the epoch's seeded generator); the losses that use
the negatives live in :mod:`attnrec.models.objectives.kernels`. Each drawer is a :class:`NegativeDraw`:
an objective builds one per epoch and the batch builder calls it once per batch, after the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

SAMPLERS = ("uniform", "popularity", "mixed")
# Who draws a sampled softmax's negatives: the batch once ("batch", shared by every position), each
# training sequence its own ("sequence", shared by that sequence's positions: every step touches B times
# as many catalog items), or each position its own ("position", as the eSASRec and HSTU references do;
# scored by attnrec.models.objectives.kernels.position_logits).
NEGATIVES_PER = ("batch", "sequence", "position")

# Batch entries of a sampled softmax drawn once per batch (not per row): a model using
# SharedNegatives declares them as its ``shared_batch_keys``, so DDP ranks keep them whole.
SHARED_KEYS = frozenset({"negative", "neg_logq"})


class NegativeDraw(Protocol):
    """Draws a batch's negatives once its rows are known: ``users`` ``(B,)`` and their targets ``target``
    (``(B, T)``, 0 where there is none). Returns the batch entries to add (``negative`` and any log-Q
    corrections)."""

    def draw(
        self, target: np.ndarray, rng: np.random.Generator, users: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]: ...


@dataclass(frozen=True)
class UnseenNegatives:
    """One uniform negative per position, never an item the row's user interacted with (SASRec's paper)."""

    n_items: int
    seen: np.ndarray  # sorted ``user * (n_items + 1) + item`` keys of the training data

    def draw(
        self, target: np.ndarray, rng: np.random.Generator, users: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        if users is None:
            raise ValueError("unseen negatives need the rows' users")
        return {
            "negative": torch.from_numpy(draw_negatives(users, target.shape, self.n_items, self.seen, rng))
        }


@dataclass(frozen=True)
class SequenceNegatives:
    """``k`` uniform catalog items per sequence ``(B, k)``, shared by its positions (gSASRec)."""

    n_items: int
    k: int

    def draw(
        self, target: np.ndarray, rng: np.random.Generator, users: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        return {"negative": torch.from_numpy(rng.integers(1, self.n_items + 1, size=(len(target), self.k)))}


@dataclass(frozen=True)
class PowerPopularityNegatives:
    """``k`` negatives shared by the batch, drawn in proportion to ``popularity ** alpha`` (GRU4Rec+)."""

    p: np.ndarray  # (n_items + 1,) the drawing probabilities, 0 for padding
    k: int

    @classmethod
    def build(cls, train_items: np.ndarray, n_items: int, alpha: float, k: int) -> PowerPopularityNegatives:
        """The epoch's sampler from the training items ``train_items``."""
        weights = np.bincount(train_items, minlength=n_items + 1).astype(np.int64).astype(np.float64) ** alpha
        weights[0] = 0.0
        return cls(weights / weights.sum(), k)

    def draw(
        self, target: np.ndarray, rng: np.random.Generator, users: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        return {"negative": torch.from_numpy(rng.choice(len(self.p), size=self.k, p=self.p))}


def check_negatives_per(per: str) -> None:
    """A one-line ``ValueError`` unless ``per`` is one of :data:`NEGATIVES_PER`."""
    if per not in NEGATIVES_PER:
        raise ValueError(f"negatives must be one of {NEGATIVES_PER}, not {per!r}")


def whole_batch_keys(per: str) -> frozenset[str]:
    """The batch entries DDP ranks keep whole: the negatives when the batch draws them once
    (:data:`SHARED_KEYS`); none when each sequence or position draws its own (they are rows, split like
    the inputs)."""
    return SHARED_KEYS if per == "batch" else frozenset()


def draw_negatives(
    users: np.ndarray, shape: tuple[int, ...], n_items: int, seen_keys: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Uniform random items in ``1..n_items`` that the row's user never interacted with.

    ``users`` has one entry per row of ``shape``; ``seen_keys`` are the sorted
    ``user * (n_items + 1) + item`` keys of the training data. Collisions are redrawn until
    none remain (bounded only for the degenerate user who has seen the whole catalog).
    """
    neg = rng.integers(1, n_items + 1, size=shape)
    u = np.broadcast_to(users.reshape((-1,) + (1,) * (len(shape) - 1)), shape)
    for _ in range(200):
        keys = u * (n_items + 1) + neg
        pos = np.searchsorted(seen_keys, keys).clip(0, len(seen_keys) - 1)
        bad = seen_keys[pos] == keys
        if not bad.any():
            break
        neg[bad] = rng.integers(1, n_items + 1, size=int(bad.sum()))
    return neg


def negative_proposal(train_items: np.ndarray, n_items: int, sampler: str) -> np.ndarray:
    """Probabilities ``(n_items + 1,)`` of drawing each item as a sampled-softmax negative (0 for padding).

    ``"uniform"``: every item alike. ``"popularity"``: in proportion to training count + 1.
    ``"mixed"``: half of each, so popular items are drawn often (hard negatives) and every tail
    item still ~``0.5 / n_items`` of the time (a popularity proposal almost never draws it, and its
    logit is then only ever pushed up, as a target).
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    uniform = np.ones(n_items + 1)
    uniform[0] = 0.0
    uniform /= uniform.sum()
    if sampler == "uniform":
        return uniform
    pop = np.bincount(train_items, minlength=n_items + 1).astype(np.float64) + 1.0
    pop[0] = 0.0
    pop /= pop.sum()
    return pop if sampler == "popularity" else 0.5 * (pop + uniform)


@dataclass(frozen=True)
class SharedNegatives:
    """Draws the negatives a batch shares in a sampled softmax, with their log-Q corrections.

    ``n_negatives`` come from the catalog under the proposal ``q`` (:func:`negative_proposal`) and
    ``in_batch`` from the batch's own real targets. The correction of item ``k`` is the log of its
    expected count among the draws, ``log E[k] = log(n_negatives * q(k) + in_batch * c_k / N)``
    where ``c_k`` counts ``k`` among the batch's ``N`` real targets (see
    :func:`attnrec.models.objectives.kernels.sampled_softmax_cross_entropy`).
    """

    n_items: int
    n_negatives: int
    in_batch: int
    q: np.ndarray  # (n_items + 1,) the catalog proposal
    cdf: (
        np.ndarray | None
    )  # (n_items + 1,) its cumulative sum; None for uniform draws (a constant correction)
    per: str = "batch"  # one of NEGATIVES_PER: negative is (S,), (B, S) or (B, T, S)

    @classmethod
    def build(
        cls,
        train_items: np.ndarray,
        n_items: int,
        sampler: str,
        n_negatives: int,
        in_batch: int = 0,
        per: str = "batch",
    ) -> SharedNegatives:
        """The sampler of one epoch: ``q`` from the training items ``train_items`` and ``sampler``; ``per``
        is one of :data:`NEGATIVES_PER`."""
        check_negatives_per(per)
        q = negative_proposal(train_items, n_items, sampler)
        return cls(n_items, n_negatives, in_batch, q, None if sampler == "uniform" else np.cumsum(q), per)

    def draw(
        self, target: np.ndarray, rng: np.random.Generator, users: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        """Negatives for a batch whose targets are ``target`` (any shape, rows first; 0 = no target);
        ``users`` (the rows' users, the :class:`NegativeDraw` protocol's) are not needed.

        Returns ``negative`` ``(S,)`` (``(B, S)`` per sequence, ``B = len(target)``; ``(*target.shape, S)``
        per position, padding positions included) and, unless the correction is a constant (uniform
        catalog negatives only), ``neg_logq`` of ``negative``'s shape and ``target_logq`` (``target``'s
        shape, 0 where ``target`` is 0). Per sequence or position, the expected count of item ``k`` among
        a row's own draws is the same ``n_negatives * q(k) + in_batch * c_k / N``.
        """
        rows: tuple[int, ...] = {"batch": (), "sequence": (len(target),), "position": target.shape}[self.per]
        parts = []
        if self.n_negatives:
            if self.cdf is None:
                parts.append(rng.integers(1, self.n_items + 1, (*rows, self.n_negatives)))
            else:  # inverse-CDF draws from q
                u = rng.random((*rows, self.n_negatives)) * self.cdf[-1]  # ([B,] n_negatives)
                parts.append(np.searchsorted(self.cdf, u, side="right").clip(1, self.n_items))
        flat = target[target > 0]  # (N,) real targets
        if self.in_batch:
            parts.append(flat[rng.integers(0, len(flat), (*rows, self.in_batch))])
        neg = np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]  # ([B, [T,]] S)
        out = {"negative": torch.from_numpy(neg)}
        if self.cdf is None and not self.in_batch:
            return out  # uniform catalog negatives only: -log E[k] is the same for every item
        uniq, counts = np.unique(flat, return_counts=True)

        def log_expected(items: np.ndarray) -> np.ndarray:
            e = self.n_negatives * self.q[items]
            if self.in_batch:
                pos = np.searchsorted(uniq, items).clip(0, len(uniq) - 1)
                e = e + self.in_batch * np.where(uniq[pos] == items, counts[pos], 0) / len(flat)
            logq: np.ndarray = np.log(np.maximum(e, 1e-30)).astype(np.float32)
            return logq

        out["neg_logq"] = torch.from_numpy(log_expected(neg))
        out["target_logq"] = torch.from_numpy(
            np.where(target > 0, log_expected(target), 0.0).astype(np.float32)
        )
        return out
