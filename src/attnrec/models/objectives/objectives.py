"""Training objectives as objects: one class per objective, chosen from a model's ``loss`` setting.

An objective does two things: it says which negatives a batch needs (:meth:`Objective.negatives`, a
drawer built once per epoch, called by the batch builder after each batch's rows), and it turns the
scored positions' states into the loss (:meth:`Objective.loss`). A model declares which objectives it
supports (a mapping from its ``loss`` values to these classes) and :func:`build_objective` picks one;
no model file branches on the loss's name.

- :class:`BCE`: each position's target against one unseen negative (SASRec's paper).
- :class:`FullSoftmax`: cross-entropy over the whole catalog, computed in chunks.
- :class:`SampledSoftmax`: cross-entropy over the target and sampled negatives, log-Q corrected.
- :class:`GBCE`: generalised BCE against ``k`` negatives per sequence (gSASRec).
- :class:`BPRMax`, :class:`TOP1Max`: softmax-weighted ranking against popularity-drawn negatives (GRU4Rec+).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Protocol

import torch
import torch.nn.functional as F

from attnrec.data.schema import Sequences
from attnrec.models.contracts import Batch
from attnrec.models.objectives.kernels import (
    batch_sampled_softmax,
    gbce_beta,
    gbce_loss,
    negative_logits,
    position_logits,
    softmax_cross_entropy,
)
from attnrec.models.objectives.negatives import (
    SAMPLERS,
    SHARED_KEYS,
    NegativeDraw,
    PowerPopularityNegatives,
    SequenceNegatives,
    SharedNegatives,
    UnseenNegatives,
    check_negatives_per,
    whole_batch_keys,
)


@dataclass(frozen=True)
class ItemTable:
    """The output layer an objective scores against: the item vectors ``(I+1, D)`` (``source``, or a function
    that computes them, called at most once and only when an objective reads the whole table), an
    optional per-item ``bias`` ``(I+1,)``, and ``gather``, how the rows of given items are read when not
    ``weight[idx]`` (sparse gradients, rows normalised one by one)."""

    source: torch.Tensor | Callable[[], torch.Tensor]
    bias: torch.Tensor | None = None
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None

    @cached_property
    def weight(self) -> torch.Tensor:
        """``(I+1, D)`` the whole table."""
        return self.source if isinstance(self.source, torch.Tensor) else self.source()

    def rows(self, idx: torch.Tensor) -> torch.Tensor:
        """``(*idx.shape, D)`` the rows of the items ``idx``."""
        return self.weight[idx] if self.gather is None else self.gather(idx)

    def logits(self, h: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """``(N,)`` logits of states ``h`` ``(N, D)`` against one item each, ``idx`` ``(N,)``."""
        out = (h * self.rows(idx)).sum(-1)
        return out if self.bias is None else out + self.bias[idx]


@dataclass(frozen=True)
class Scored:
    """The positions a loss scores: their states ``h`` ``(N, D)`` and targets ``target`` ``(N,)``, where they
    are in the batch (``rows``, a ``(B, T)`` mask), and every position's ``states`` ``(B, T, D)`` when the
    model encoded them all (``None`` when it encoded only the scored ones)."""

    h: torch.Tensor
    target: torch.Tensor
    rows: torch.Tensor
    states: torch.Tensor | None = None


@dataclass(frozen=True)
class ObjectiveSettings:
    """The loss settings a model config may hold (a config without one of them gets its default)."""

    loss: str = ""
    n_negatives: int = 256
    sampler: str = "uniform"
    in_batch_negatives: int = 0
    negatives: str = "batch"  # sampled negatives drawn per "batch", "sequence" or "position"
    fast_ce: bool = False
    gbce_t: float = 0.75
    sample_alpha: float = 0.75  # GRU4Rec+: negatives drawn in proportion to popularity ** sample_alpha
    bpreg: float = 1.0  # GRU4Rec+: BPR-max's score regularisation


class Objective(Protocol):
    """A training objective: its batch entries drawn once per batch, its negatives, and its loss."""

    def shared_batch_keys(self) -> frozenset[str]:
        """Batch entries drawn once per batch, not per row (kept whole on every DDP rank)."""
        ...

    def negatives(self, train: Sequences, n_items: int) -> NegativeDraw | None:
        """The epoch's negative drawer (``None``: the objective needs no negatives)."""
        ...

    def loss(self, scored: Scored, table: ItemTable, batch: Batch) -> torch.Tensor:
        """The mean loss of the ``scored`` positions against ``table``."""
        ...


@dataclass(frozen=True)
class BCE:
    """Binary cross-entropy of each target and one uniform negative the user never interacted with."""

    def shared_batch_keys(self) -> frozenset[str]:
        return frozenset()  # one negative per position, split with the rows

    def negatives(self, train: Sequences, n_items: int) -> NegativeDraw:
        return UnseenNegatives(n_items, train.user_item_keys())

    def loss(self, scored: Scored, table: ItemTable, batch: Batch) -> torch.Tensor:
        neg = batch["negative"][scored.rows]  # (N,) one negative per scored position
        pos_logit, neg_logit = table.logits(scored.h, scored.target), table.logits(scored.h, neg)  # (N,) each
        return F.binary_cross_entropy_with_logits(
            pos_logit, torch.ones_like(pos_logit)
        ) + F.binary_cross_entropy_with_logits(neg_logit, torch.zeros_like(neg_logit))


@dataclass(frozen=True)
class FullSoftmax:
    """Cross-entropy over the whole catalog, in row chunks (never all ``(N, I+1)`` logits at once);
    ``fast``: the item-major kernel (equal to float32 rounding, not bit for bit)."""

    fast: bool = False

    def shared_batch_keys(self) -> frozenset[str]:
        return frozenset()  # no negatives

    def negatives(self, train: Sequences, n_items: int) -> None:
        return None

    def loss(self, scored: Scored, table: ItemTable, batch: Batch) -> torch.Tensor:
        return softmax_cross_entropy(scored.h, table.weight, scored.target, table.bias, fast=self.fast)


@dataclass(frozen=True)
class SampledSoftmax:
    """Cross-entropy over each target and sampled negatives, every logit corrected by ``-log E[k]`` (log-Q).

    ``n_negatives`` catalog items under ``sampler`` plus ``in_batch`` of the batch's own targets, drawn
    once per batch, per sequence or per position (``per``; :class:`SharedNegatives`).
    """

    n_negatives: int
    sampler: str = "uniform"
    in_batch: int = 0
    per: str = "batch"

    def shared_batch_keys(self) -> frozenset[str]:
        """The negatives when the whole batch shares them (kept whole on every DDP rank)."""
        return whole_batch_keys(self.per)

    def negatives(self, train: Sequences, n_items: int) -> NegativeDraw:
        return SharedNegatives.build(
            train.items, n_items, self.sampler, self.n_negatives, self.in_batch, self.per
        )

    def loss(self, scored: Scored, table: ItemTable, batch: Batch) -> torch.Tensor:
        h, rows, neg = scored.h, scored.rows, batch["negative"]  # neg (S,), (B, S) or (B, T, S)
        pos_logit = table.logits(h, scored.target)  # (N,)
        if neg.dim() == 1:  # shared by the batch
            neg_logit = h @ table.rows(neg).T  # (N, S)
        elif neg.dim() == 3:  # each position its own, against the whole table
            neg_logit = position_logits(h, table.weight, neg[rows])  # (N, S)
        elif scored.states is None:
            raise ValueError("negatives per sequence need every position's states")
        else:  # each sequence its own
            neg_logit = negative_logits(h, table.rows(neg), scored.states, rows)  # (N, S)
        if table.bias is not None:
            neg_logit = neg_logit + table.bias[neg]
        return batch_sampled_softmax(pos_logit, neg_logit, scored.target, batch, rows)


@dataclass(frozen=True)
class GBCE:
    """Generalised BCE (gSASRec): each target against its sequence's ``k`` uniform negatives, the positive
    term raised to ``beta`` (from ``k``, the catalog size and the calibration ``t``)."""

    k: int
    t: float

    def shared_batch_keys(self) -> frozenset[str]:
        return frozenset()  # each sequence its own negatives, split with the rows

    def negatives(self, train: Sequences, n_items: int) -> NegativeDraw:
        return SequenceNegatives(n_items, self.k)

    def loss(self, scored: Scored, table: ItemTable, batch: Batch) -> torch.Tensor:
        if scored.states is None:
            raise ValueError("gBCE scores every position of the batch: it needs the states")
        h, target, neg = scored.states, batch["target"], batch["negative"]  # (B, T, D), (B, T), (B, k)
        pos_logit = (h * table.rows(target)).sum(-1)  # (B, T)
        neg_logit = h @ table.rows(neg).transpose(1, 2)  # (B, T, k): (B, T, D) @ (B, D, k)
        # A negative that is the position's own target is no negative there (accidental hit).
        neg_logit = neg_logit.masked_fill(neg[:, None, :] == target[..., None], -torch.inf)  # (B, T, k)
        beta = gbce_beta(self.k, table.weight.shape[0] - 1, self.t)
        return gbce_loss(pos_logit[scored.rows], neg_logit[scored.rows], beta)  # (N,), (N, k)


@dataclass(frozen=True)
class _RankingMax:
    """GRU4Rec+'s losses: each target against ``k`` negatives shared by the batch, drawn in proportion to
    ``popularity ** alpha``; the negatives' terms are weighted by the softmax of their scores, so the
    hardest ones dominate. A negative equal to the row's target gets no weight."""

    k: int
    alpha: float

    def shared_batch_keys(self) -> frozenset[str]:
        return SHARED_KEYS  # drawn once per batch

    def negatives(self, train: Sequences, n_items: int) -> NegativeDraw:
        return PowerPopularityNegatives.build(train.items, n_items, self.alpha, self.k)

    def scores(
        self, scored: Scored, table: ItemTable, batch: Batch
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The targets' scores ``(N, 1)``, the negatives' ``(N, S)`` and the negatives' softmax weights
        ``(N, S)``."""
        h, pos, neg = scored.h, scored.target, batch["negative"]  # (N, D), (N,), (S,)
        r_pos = table.logits(h, pos)[:, None]  # (N, 1)
        r_neg = h @ table.rows(neg).T  # (N, S)
        if table.bias is not None:
            r_neg = r_neg + table.bias[neg]
        hit = neg[None, :] == pos[:, None]  # (N, S) the target drawn as its own negative
        return r_pos, r_neg, r_neg.masked_fill(hit, -torch.inf).softmax(-1)


@dataclass(frozen=True)
class BPRMax(_RankingMax):
    """BPR-max: ``-log sum_j s_j sigmoid(r_i - r_j) + bpreg * sum_j s_j r_j^2``."""

    bpreg: float = 1.0

    def loss(self, scored: Scored, table: ItemTable, batch: Batch) -> torch.Tensor:
        r_pos, r_neg, s = self.scores(scored, table, batch)
        gain = (s * torch.sigmoid(r_pos - r_neg)).sum(-1)  # (N,)
        return (-torch.log(gain + 1e-24) + self.bpreg * (s * r_neg.pow(2)).sum(-1)).mean()


@dataclass(frozen=True)
class TOP1Max(_RankingMax):
    """TOP1-max: ``sum_j s_j (sigmoid(r_j - r_i) + sigmoid(r_j^2))``."""

    def loss(self, scored: Scored, table: ItemTable, batch: Batch) -> torch.Tensor:
        r_pos, r_neg, s = self.scores(scored, table, batch)
        return (s * (torch.sigmoid(r_neg - r_pos) + torch.sigmoid(r_neg.pow(2)))).sum(-1).mean()


def _bce(s: ObjectiveSettings) -> Objective:
    return BCE()


def _full(s: ObjectiveSettings) -> Objective:
    return FullSoftmax(s.fast_ce)


def _sampled(s: ObjectiveSettings) -> Objective:
    return SampledSoftmax(s.n_negatives, s.sampler, s.in_batch_negatives, s.negatives)


def _gbce(s: ObjectiveSettings) -> Objective:
    return GBCE(s.n_negatives, s.gbce_t)


def _bpr_max(s: ObjectiveSettings) -> Objective:
    return BPRMax(s.n_negatives, s.sample_alpha, s.bpreg)


def _top1_max(s: ObjectiveSettings) -> Objective:
    return TOP1Max(s.n_negatives, s.sample_alpha)


# The one mapping from a ``loss`` setting to its objective (built from the config's loss settings).
OBJECTIVES: dict[str, Callable[[ObjectiveSettings], Objective]] = {
    "bce": _bce,
    "ce": _full,
    "sampled_ce": _sampled,
    "gbce": _gbce,
    "bpr-max": _bpr_max,
    "top1-max": _top1_max,
}


def objective_settings(config: object, default_loss: str = "") -> ObjectiveSettings:
    """The :class:`ObjectiveSettings` of a model ``config`` (a dataclass): the fields it has, defaults for
    the others; ``default_loss`` for a config without a ``loss`` field (a model with one objective)."""
    names = {f.name for f in fields(ObjectiveSettings)}
    have = {f.name: getattr(config, f.name) for f in fields(config) if f.name in names}  # type: ignore[arg-type]
    return ObjectiveSettings(**({"loss": default_loss} | have))


def build_objective(config: object, supported: Collection[str], default_loss: str = "") -> Objective:
    """The objective ``config`` asks for, among the ``supported`` ones (a one-line ``ValueError``
    otherwise)."""
    s = objective_settings(config, default_loss)
    if s.loss not in supported:
        raise ValueError(f"loss must be one of {', '.join(supported)}, not {s.loss!r}")
    return OBJECTIVES[s.loss](s)


def check_objective(config: object, supported: Collection[str]) -> None:
    """A one-line ``ValueError`` unless a model ``config``'s loss is one of ``supported`` and its sampled
    negatives' settings are valid (the sampler, who draws them, their counts where the config has them)."""
    s = objective_settings(config)
    if s.loss not in supported:
        *rest, last = supported
        raise ValueError(f"loss must be {', '.join(rest)} or {last}, not {s.loss!r}")
    if s.sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {s.sampler!r}")
    check_negatives_per(s.negatives)


def check_negative_counts(n_negatives: int, in_batch: int) -> None:
    """A one-line ``ValueError`` unless both counts are >= 0 and at least one negative is drawn."""
    if n_negatives < 0 or in_batch < 0 or n_negatives + in_batch < 1:
        raise ValueError(
            "n_negatives and in_batch_negatives must be >= 0, and at least one negative is needed"
        )
