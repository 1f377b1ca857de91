"""Batches with per-event columns for SASRec and BERT4Rec: the columns left-padded like the items, and the
targets kept where the event type and rating allow (:mod:`attnrec.models.event_context` has the options).

A model configured for a column the data lacks gets a one-line :class:`~attnrec.data.schema.DataError`
naming it. Targets by type: SASRec trains only on windows (users) with at least one qualifying next
event and zeroes the other targets; BERT4Rec keeps only windows holding a qualifying event and masks
targets among those (low-rated events, with explicit negatives, are masked too and labelled minus
their item). BERT4Rec's masked positions hide their event and rating (as the appended [mask] has
none) but keep their time: [mask] stands at the request time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnrec.data.schema import EVENT, RATING, TIMESTAMP, DataError, Sequences
from attnrec.data.signals import by_key
from attnrec.models.batches.windows import shifted_pair, sliding_window_matrix
from attnrec.models.contracts import Batch
from attnrec.models.event_context import (
    EXPLICIT_NEGATIVE,
    REQUEST_TIME,
    TIMESTAMPS,
    EventContext,
    TargetRule,
    batch_key,
)


def require_columns(seqs: Sequences, names: Sequence[str], model: str) -> None:
    """A one-line :class:`DataError` naming the first of the columns ``names`` that ``seqs`` lacks."""
    missing = [n for n in names if n not in seqs.columns]
    if missing:
        have = ", ".join(seqs.columns) or "none"
        raise DataError(
            f"{model}: the settings read the per-event column {missing[0]!r}, but the data has none "
            f"(columns: {have})"
        )


def column_batch(
    seqs: Sequences, names: Sequence[str], width: int, rows: np.ndarray | None = None, model: str = "model"
) -> dict[str, np.ndarray]:
    """The columns ``names`` of ``seqs`` left-padded like ``seqs.padded(width, rows)``, by batch key."""
    require_columns(seqs, names, model)
    return {batch_key(n): seqs.padded_column(n, width, rows) for n in names}


def score_columns(ctx: EventContext | None, seqs: Sequences, width: int, model: str) -> Batch:
    """The per-event batch keys ``ctx`` reads for scoring ``seqs`` left-padded to ``width`` (none without
    it)."""
    if ctx is None:
        return {}
    return {k: torch.from_numpy(v) for k, v in column_batch(seqs, ctx.columns, width, model=model).items()}


def request_batch(ctx: EventContext | None, request_time: np.ndarray | None) -> Batch:
    """``{"request_time": (B,) int64}`` when ``ctx`` reads time and a request time is given, else nothing.

    A model that reads no timestamps gets no key, so its batches (and scores) stay as without one.
    """
    if ctx is None or request_time is None or TIMESTAMP not in ctx.columns:
        return {}
    return {REQUEST_TIME: torch.as_tensor(np.asarray(request_time, dtype=np.int64))}


def target_users(train: Sequences, width: int, rule: TargetRule, model: str) -> np.ndarray:
    """The users with a next-item window (``width + 1`` newest items) holding at least one qualifying
    target."""
    users = np.flatnonzero(train.lengths() >= 2)
    cols = column_batch(train, rule_columns(rule), width + 1, users, model)
    _, target = shifted_pair(train.padded(width + 1, users))  # (U, T) the targets the batches train
    ok = rule.qualifies({k: v[:, 1:] for k, v in cols.items()}) & (target.numpy() > 0)
    return users[ok.any(1)]


def rule_columns(rule: TargetRule) -> tuple[str, ...]:
    """The per-event columns ``rule`` reads."""
    reads = (
        (EVENT, rule.codes() is not None),
        (RATING, rule.min_rating is not None),
        (TIMESTAMP, rule.since is not None),
    )
    return tuple(k for k, on in reads if on)


def shifted_columns(
    batch: Batch,
    train: Sequences,
    users: np.ndarray,
    width: int,
    ctx: EventContext | None,
    rule: TargetRule | None,
    explicit: bool,
    model: str,
) -> Batch:
    """A next-item ``batch`` (``seq``/``target`` ``(B, T)`` of ``users``' newest ``width + 1`` items) with the
    inputs' per-event keys (and ``request_time``: the last target's time), its targets kept only where
    ``rule`` allows, and with ``explicit`` the low-rated targets as :data:`EXPLICIT_NEGATIVE`."""
    names = dict.fromkeys((ctx.columns if ctx is not None else ()) + (rule_columns(rule) if rule else ()))
    cols = column_batch(train, tuple(names), width + 1, users, model)  # key -> (B, T+1)
    if ctx is not None:
        batch |= {batch_key(n): torch.from_numpy(cols[batch_key(n)][:, :-1]) for n in ctx.columns}
        if TIMESTAMPS in cols:
            batch[REQUEST_TIME] = torch.from_numpy(cols[TIMESTAMPS][:, -1])  # (B,)
    if rule is not None:
        nxt = {k: v[:, 1:] for k, v in cols.items()}  # (B, T) the targets' columns
        target = batch["target"]
        batch["target"] = target.masked_fill(torch.from_numpy(~rule.qualifies(nxt)), 0)
        if explicit:
            batch[EXPLICIT_NEGATIVE] = target.masked_fill(torch.from_numpy(~rule.negative(nxt)), 0)
    return batch


def nth_from_end(ok: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per row of ``ok`` ``(B, T)``, the column of its ``k``-th (0-based) true cell counted from the end
    ``(B,)``."""
    from_end = np.cumsum(ok[:, ::-1], 1)[:, ::-1]  # (B, T) true cells at or after each column
    out: np.ndarray = np.argmax(ok & (from_end == (k + 1)[:, None]), 1)
    return out


@dataclass(frozen=True)
class ClozeWindows:
    """BERT4Rec's training windows ``items`` ``(R, T)`` with the inputs' per-event ``columns`` (batch key ->
    ``(R, T)``), which positions may be targets (``ok``; ``None``: every item) and explicit ``negative``
    ones."""

    items: np.ndarray
    columns: dict[str, np.ndarray]
    ok: np.ndarray | None
    negative: np.ndarray | None

    def __len__(self) -> int:
        return len(self.items)

    def masks(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | tuple[()]:
        """``(ok, negative)`` of rows ``idx`` for :meth:`BERT4Rec.cloze`, or ``()`` when every item may be a
        target."""
        return (
            () if self.ok is None else (self.ok[idx], None if self.negative is None else self.negative[idx])
        )

    def batch(self, idx: np.ndarray, labels: np.ndarray) -> Batch:
        """Batch keys of rows ``idx`` for Cloze ``labels`` (``> 0`` target, ``< 0`` minus an explicit
        negative): the columns, with the event and rating of every masked position hidden (0 / NaN) as they
        are at [mask]."""
        masked = labels != 0  # (B, T)
        out = {}
        for k, v in self.columns.items():
            rows = v[idx]  # (B, T); a masked position keeps its time: [mask] stands at the request time
            if k != TIMESTAMPS:
                rows = np.where(masked, hidden_value(k), rows).astype(rows.dtype)
            out[k] = torch.from_numpy(rows)
        if self.negative is not None:
            out |= {
                "labels": torch.from_numpy(labels.clip(min=0)),
                EXPLICIT_NEGATIVE: torch.from_numpy((-labels).clip(min=0)),
            }
        return out


def hidden_value(key: str) -> float:
    """What the batch key ``key`` holds where its event is hidden: 0 for codes, NaN for numbers."""
    signal = by_key(key)
    assert signal is not None, key  # every per-event batch key is a signal's
    return signal.hidden_value


def cloze_windows(
    train: Sequences,
    max_len: int,
    step: int,
    ctx: EventContext | None,
    rule: TargetRule | None,
    explicit: bool,
    model: str,
) -> ClozeWindows:
    """The training windows (:func:`~attnrec.models.batches.windows.sliding_window_matrix`) with their columns
    (none without ``ctx``); with a target ``rule`` only windows holding a target, ``ok``/``negative`` marking
    the positions."""
    items = sliding_window_matrix(train, max_len, step)  # (R, T)
    names = tuple(
        dict.fromkeys((ctx.columns if ctx is not None else ()) + (rule_columns(rule) if rule else ()))
    )
    require_columns(train, names, model)
    cols = {batch_key(n): sliding_window_matrix(train, max_len, step, train.column(n)) for n in names}
    ok = negative = None
    if rule is not None:
        ok = rule.qualifies(cols) & (items > 0)
        negative = rule.negative(cols) & (items > 0) if explicit else None
        keep = ok.any(1)
        items, cols, ok = items[keep], {k: v[keep] for k, v in cols.items()}, ok[keep]
        negative = negative[keep] if negative is not None else None
    inputs = {batch_key(n) for n in (ctx.columns if ctx is not None else ())}
    return ClozeWindows(items, {k: v for k, v in cols.items() if k in inputs}, ok, negative)


def mask_columns(cols: Batch) -> Batch:
    """Score-time columns ``(B, W)`` with BERT4Rec's appended [mask] column: the newest event's time (the
    request's, when the batch gets a ``request_time``), event and rating unknown (0 / NaN)."""
    out = {}
    for k, v in cols.items():  # (B, W)
        if k == TIMESTAMPS:
            last = v[:, -1:] if v.shape[1] else torch.zeros(len(v), 1, dtype=v.dtype)  # (B, 1)
        else:
            last = torch.full((len(v), 1), hidden_value(k), dtype=v.dtype)
        out[k] = torch.cat([v, last], 1)  # (B, W + 1)
    return out


__all__ = [
    "ClozeWindows",
    "cloze_windows",
    "hidden_value",
    "column_batch",
    "mask_columns",
    "nth_from_end",
    "request_batch",
    "require_columns",
    "rule_columns",
    "score_columns",
    "shifted_columns",
    "target_users",
]
