"""The named batch builders a model declares: how an epoch of training rows becomes batches.

- :class:`ShiftedNextItem`: each user's newest ``max_len + 1`` items, inputs ``seq`` and the next item
  at every position as ``target`` (SASRec, gSASRec, eSASRec, HSTU).
- :class:`Cloze`: sliding windows over each user's items with a random share of them replaced by
  [mask], the hidden items as ``labels`` (BERT4Rec).
- :class:`LengthChunks`: not a builder but how a built batch is encoded: rows of similar length
  together, each chunk trimmed to its longest row (BERT4Rec's ``length_chunks``).

Both builders also carry the per-event columns a model reads and keep targets only where the event
type and rating allow (:mod:`attnrec.models.batches.events`). Every builder draws from the epoch's
seeded generator only: the rows' shuffle first, then, per batch, its masking and the objective's
negatives (:class:`~attnrec.models.objectives.negatives.NegativeDraw`), so an epoch is a function of
its seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models.batches import events as eb
from attnrec.models.batches.windows import (
    batches,
    encode_in_chunks,
    length_chunks,
    next_item_rows,
    next_item_windows,
    shifted_pair,
)
from attnrec.models.contracts import Batch
from attnrec.models.event_context import EventContext, TargetRule
from attnrec.models.objectives.negatives import NegativeDraw


class BatchBuilder(Protocol):
    """What the sequential wrapper asks of a builder: rows, batches, and the entry holding the labels."""

    @property
    def label(self) -> str:
        """The batch entry whose positive cells are the loss's terms."""
        ...

    def rows(self, train: Sequences) -> int:
        """Training rows an epoch over ``train`` has."""
        ...

    def batches(
        self, train: Sequences, batch_size: int, rng: np.random.Generator, negatives: NegativeDraw | None
    ) -> Iterator[tuple[np.ndarray, Batch]]:
        """One epoch as ``(rows' users or windows (B,), batch)`` in shuffled order."""
        ...


@dataclass(frozen=True)
class ShiftedNextItem:
    """Shifted next-item windows: inputs ``seq`` ``(B, T)`` and next-item targets ``target`` ``(B, T)``.

    A row is a user with at least two items: their newest ``max_len + 1`` items, left-padded, split
    into inputs and targets (:func:`~attnrec.models.batches.windows.shifted_pair`: a target only where
    its input is a real item). With an event context ``ctx`` the inputs' per-event entries come along;
    with a target ``rule`` only users with a qualifying next event are rows and the other targets are
    zeroed (``explicit``: the low-rated ones become explicit negatives).
    """

    max_len: int
    ctx: EventContext | None = None
    rule: TargetRule | None = None
    explicit: bool = False
    model: str = "model"  # named in a missing column's error
    label: str = "target"

    def users(self, train: Sequences) -> np.ndarray | None:
        """With a target rule, the users whose window holds a qualifying target; else ``None``
        (every user)."""
        return None if self.rule is None else eb.target_users(train, self.max_len, self.rule, self.model)

    def rows(self, train: Sequences) -> int:
        only = self.users(train)
        return next_item_rows(train) if only is None else len(only)

    def batches(
        self, train: Sequences, batch_size: int, rng: np.random.Generator, negatives: NegativeDraw | None
    ) -> Iterator[tuple[np.ndarray, Batch]]:
        """One epoch as ``(users (B,), batch)``; ``negatives`` drawn per batch after its rows."""
        users, windows = next_item_windows(train, self.max_len)  # (U,), (U, T+1)
        only = self.users(train)
        if only is not None:
            keep = np.isin(users, only)
            users, windows = users[keep], windows[keep]
        for idx in batches(len(users), batch_size, rng):
            seq, target = shifted_pair(windows[idx])  # (B, T) each
            batch = {"seq": seq, "target": target}
            if negatives is not None:  # e.g. shared by the batch, with their log-Q corrections
                batch |= negatives.draw(target.numpy(), rng, users[idx])
            if self.ctx is not None or self.rule is not None:  # per-event inputs; targets by type
                batch = eb.shifted_columns(
                    batch, train, users[idx], self.max_len, self.ctx, self.rule, self.explicit, self.model
                )
            yield users[idx], batch


@dataclass(frozen=True)
class Cloze:
    """BERT4Rec's Cloze task: windows whose items are hidden behind [mask] (id ``n_items + 1``) and predicted.

    Windows: the sliding windows of each user's items (``max_len`` wide, ``step`` apart; 0: the newest
    only). Masking, per window: each item (or, by type, each qualifying one) with probability
    ``mask_prob``, at least one; a share ``mask_last_prob`` of windows masks only their last
    (qualifying) item, as at test time; ``use_80_10_10``: BERT's rule, a masked item becomes [mask]
    80%, a random item 10%, itself 10% of the time. Labels: the hidden item, 0 elsewhere.
    """

    max_len: int
    step: int
    mask_prob: float
    mask_last_prob: float
    use_80_10_10: bool
    n_items: int
    ctx: EventContext | None = None
    rule: TargetRule | None = None
    explicit: bool = False
    label: str = "labels"

    def windows(self, train: Sequences, plain: bool = False) -> eb.ClozeWindows:
        """The training windows with their per-event columns (``plain``: the items only, every window)."""
        if plain:
            return eb.cloze_windows(train, self.max_len, self.step, None, None, False, "")
        return eb.cloze_windows(
            train, self.max_len, self.step, self.ctx, self.rule, self.explicit, "bert4rec"
        )

    def rows(self, train: Sequences) -> int:
        # the windows (with targets by type: only those holding a target of the wanted types/ratings)
        return len(eb.cloze_windows(train, self.max_len, self.step, None, self.rule, False, ""))

    def mask(
        self,
        w: np.ndarray,
        rng: np.random.Generator,
        ok: np.ndarray | None = None,
        negative: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Masked inputs and labels ``(B, T)`` of windows ``w`` (label 0 = not predicted). Targets by type:
        only ``ok`` positions are targets; ``negative`` ones are masked too, labelled minus their item."""
        (b, t), mask_id = w.shape, self.n_items + 1
        real = w > 0 if ok is None else ok  # (B, T) the positions that may be predicted
        n_real = real.sum(1)  # (B,)
        last_only = np.asarray(rng.random(b)) < self.mask_last_prob  # (B,) test-like samples
        hide = real if negative is None else real | negative
        masked = (rng.random((b, t)) < self.mask_prob) & hide  # (B, T)
        empty = ~(masked & real).any(1)  # at least one prediction per sample: a random real position
        k = np.minimum((rng.random(b) * n_real).astype(np.int64), np.maximum(n_real - 1, 0))
        pick = t - 1 - k if ok is None else eb.nth_from_end(real, k)
        masked[empty, pick[empty]] = True
        masked[last_only] = False
        # left padding: the last item is at column T-1 (by type: the last target of the window)
        last = t - 1 if ok is None else eb.nth_from_end(real, np.zeros(b, np.int64))[last_only]
        masked[last_only, last] = True
        labels = np.where(masked & real, w, 0)
        if negative is not None:  # masked low-rated events: minus their item (the batch splits them off)
            labels = np.where(masked & negative, -w, labels)
        inp = w.copy()
        if self.use_80_10_10:
            r = rng.random((b, t))
            bert = masked & ~last_only[:, None]
            to_random = bert & (r >= 0.8) & (r < 0.9)
            inp[masked & ~(bert & (r >= 0.8))] = mask_id  # 10% (r >= 0.9) keep the true item
            inp[to_random] = rng.integers(1, self.n_items + 1, int(to_random.sum()))
        else:
            inp[masked] = mask_id
        return inp, labels

    def batches(
        self, train: Sequences, batch_size: int, rng: np.random.Generator, negatives: NegativeDraw | None
    ) -> Iterator[tuple[np.ndarray, Batch]]:
        """One epoch as ``(window rows (B,), batch)`` with a fresh masking per call; ``negatives`` drawn
        per batch after its masking."""
        cw = self.windows(train)
        for idx in batches(len(cw.items), batch_size, rng):
            inp, labels = self.mask(cw.items[idx], rng, *cw.masks(idx))
            batch = {"seq": torch.from_numpy(inp), "labels": torch.from_numpy(labels)} | cw.batch(idx, labels)
            if negatives is not None:  # e.g. shared by the batch, with their log-Q corrections
                batch |= negatives.draw(batch["labels"].numpy(), rng, idx)
            yield idx, batch


@dataclass(frozen=True)
class LengthChunks:
    """Encode a batch as ``n`` chunks of rows of similar length, each trimmed to its longest row (``n <= 1``:
    the padded batch as it is). For a model whose positions count from the end and whose padding keys are
    masked the states are the padded batch's, with far less work when most rows are much shorter."""

    n: int

    def split(self, seq: torch.Tensor) -> list[tuple[torch.Tensor, int]]:
        """``(rows, width)`` of the chunks of a batch ``seq`` ``(B, T)``."""
        return length_chunks(seq, self.n)

    def encode_at(
        self, encode: Callable[[Batch], torch.Tensor], batch: Batch, sel: torch.Tensor
    ) -> torch.Tensor:
        """States ``(N, D)`` at the positions ``sel`` ``(B, T)`` selects, in ``batch["seq"][sel]`` order,
        where ``encode(part)`` gives the states ``(b, w, D)`` of a part of ``batch``."""
        if self.n <= 1:  # the default: one padded batch, no bookkeeping
            return encode(batch)[sel]
        return encode_in_chunks(encode, batch, sel, self.n)


def targets_since(builder: object, since: int) -> ShiftedNextItem | Cloze | None:
    """``builder`` training only on targets at or after ``since`` (Unix seconds), its own target rule kept;
    ``None`` when it is not a next-item builder (a model that trains on something else)."""
    if not isinstance(builder, ShiftedNextItem | Cloze):
        return None
    rule = builder.rule if builder.rule is not None else TargetRule()
    return replace(builder, rule=replace(rule, since=int(since)))
