"""Per-event context inside SASRec and BERT4Rec: time, event types, ratings, and which events are targets.

Issue #19, part 2. Every option is a field of :class:`EventFields`, which both configs inherit, and
is off by default; off, nothing here is created or drawn, so the models build, train and score bit
for bit as before. What each option adds (``docs/explanation/context.md`` has the user's view):

* ``time_intervals = k`` (TiSASRec): the time gap between two events, divided by the smallest
  non-zero gap between consecutive events of the window **up to the query** (the paper divides by
  the user's smallest gap over the whole sequence, which would let an early position see later
  times) and clipped at ``k``, selects one learned scalar bias per head, added to the attention
  logits (:meth:`EventContext.attention_mask`: an additive float mask, so the fused attention kernel
  still runs). The paper adds learned key/value *embeddings* per bucket; a scalar per head and bucket
  is the cheaper relative-bias form (as HSTU's ``rab``) and is what fits the fused kernel. The biases
  start at zero: an untrained model attends as the ID-only one.
* ``time_features = "periodic"``: hour of day (UTC), day of week and the log-bucketed gap since the
  previous event (HSTU's buckets, :func:`log_bucket`) as embeddings added to each position's item
  embedding (not part of its *content*: attributions replace the item rows only).
* the request time: SASRec with ``request_time`` adds at every position the embedding of the time
  of the event it predicts (log-bucketed gap from the position's own event, plus hour and day of
  week with ``periodic``); the newest position uses the batch's ``request_time`` ``(B,)``, or when
  absent its own time (gap 0). BERT4Rec's appended [mask] *is* the request: its timestamp is
  ``request_time`` when the batch has one, else the newest event's.
* ``event_input`` / ``rating_input``: an event-type embedding (``n_events`` codes, from the data's
  event vocabulary when 0) and a rating embedding (ratings rounded to half stars, ``0..5``: 11
  buckets, higher values share the top one) added to the item embedding.
* ``signals = "device,price"``: each declared signal (:mod:`attnrec.data.signals`) through the encoder
  of its kind (:func:`register_encoder`), added to the item embedding: a categorical one an embedding
  table over its training vocabulary (code 1: a value it never saw), a numeric one a linear projection.
* targets (:class:`TargetRule`): ``target_events`` ("buy" or "cart,buy", names or codes) and
  ``min_target_rating`` decide which events may be training targets; inputs still see every event.
  ``explicit_negatives``: an event rated below ``min_target_rating`` is pushed down where it would
  have been a target (a ``softplus(score)`` term, the BCE of a negative label, for every loss).

Batch keys (each signal's :attr:`~attnrec.data.signals.Signal.batch_key`, left-padded like ``seq``):
``timestamps`` (int64 seconds), ``events`` (int64 codes, 0 = padding), ``ratings`` (float32), a declared
signal's name (int64 codes or float32 numbers), and ``request_time`` ``(B,)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data import signals as sig
from attnrec.data.schema import EVENT, RATING, TIMESTAMP, DataError, IdMap
from attnrec.models.contracts import Batch
from attnrec.models.nn.signal_inputs import encoder_of, signal_problem

if TYPE_CHECKING:  # context.py builds on this module; the annotation only names its class
    from attnrec.models.item_context import ModelContext

LOG_BUCKET_WIDTH = (
    0.301  # HSTU's: a bucket is floor(ln(gap seconds) / 0.301), each spans a factor e^0.301 = 1.35
)
GAP_BUCKETS = 64  # the top bucket starts at e^(64 * 0.301) s, about 7 years
RATING_BUCKETS = 11  # half stars 0, 0.5, ..., 5
TIME_FEATURES = ("none", "periodic")
TIMESTAMPS, EVENTS, RATINGS = sig.TIMESTAMP.batch_key, sig.EVENT.batch_key, sig.RATING.batch_key
REQUEST_TIME = sig.REQUEST_TIME


def batch_key(column: str) -> str:
    """The batch key of the sequence column ``column``: its signal's
    :attr:`~attnrec.data.signals.Signal.batch_key`."""
    return sig.get_signal(column).batch_key


EXPLICIT_NEGATIVE = (
    "explicit_negative"  # batch key: (B, T) the low-rated item at a position it would target, else 0
)


@dataclass(frozen=True, kw_only=True)
class EventFields:
    """The per-event settings SASRecConfig and BERT4RecConfig share (see the module docstring); all off."""

    time_intervals: int = 0  # k: TiSASRec interval buckets 0..k as attention biases; 0 = off
    time_features: str = "none"  # "periodic": hour-of-day, day-of-week, gap-since-previous embeddings
    event_input: bool = False  # an event-type embedding added to the item embedding
    n_events: int = 0  # event vocabulary size for event_input; 0 = the data's (filled in when fitting)
    rating_input: bool = False  # a rating (half-star bucket) embedding added to the item embedding
    target_events: str = ""  # comma-separated event names or codes that may be targets; "" = every event
    min_target_rating: float | None = None  # events rated below this are never targets
    explicit_negatives: bool = False  # ... and are pushed down where they would have been targets
    signals: str = ""  # comma-separated declared signals (attnrec.data.signals) added to the item embedding

    def check_events(self) -> None:
        """Reject inconsistent settings with a one-line ``ValueError`` (called by the configs'
        ``__post_init__``)."""
        if self.time_intervals < 0 or self.n_events < 0:
            raise ValueError("time_intervals and n_events must be >= 0")
        if self.time_features not in TIME_FEATURES:
            raise ValueError(
                f"time_features must be one of {', '.join(TIME_FEATURES)}, not {self.time_features!r}"
            )
        if self.explicit_negatives and self.min_target_rating is None:
            raise ValueError(
                "explicit_negatives needs min_target_rating (the rating below which an event is negative)"
            )
        for name in self.signal_names():
            problem = signal_problem(name)
            if problem:
                raise ValueError(f"signals: {name!r} {problem}")

    def signal_names(self) -> tuple[str, ...]:
        """The declared signals the model reads, in the order given."""
        return tuple(dict.fromkeys(n.strip() for n in self.signals.split(",") if n.strip()))

    def reads_time(self, request: bool = False) -> bool:
        return self.time_intervals > 0 or self.time_features != "none" or request

    def input_columns(self, request: bool = False) -> tuple[str, ...]:
        """The sequence columns the model's inputs read."""
        wanted = {TIMESTAMP: self.reads_time(request), EVENT: self.event_input, RATING: self.rating_input}
        return tuple(k for k, on in wanted.items() if on) + self.signal_names()

    def target_columns(self) -> tuple[str, ...]:
        """The sequence columns that decide which events are targets."""
        wanted = {EVENT: bool(self.target_events.strip()), RATING: self.min_target_rating is not None}
        return tuple(k for k, on in wanted.items() if on)


def log_bucket(gap: torch.Tensor, n: int) -> torch.Tensor:
    """HSTU's bucket ``floor(ln(max(gap, 1 s)) / 0.301)`` of gaps in seconds, at most ``n``."""
    return (gap.clamp(min=1).float().log() / LOG_BUCKET_WIDTH).long().clamp(0, n)


def interval_buckets(ts: torch.Tensor, real: torch.Tensor, k: int, causal: bool) -> torch.Tensor:
    """TiSASRec's ``(B, T, T)`` clipped intervals ``min(floor(|t_i - t_j| / r_i), k)`` of timestamps ``ts``
    ``(B, T)``.

    ``r_i`` is the smallest non-zero gap between consecutive real events of the row: up to event ``i``
    when ``causal`` (so query ``i`` reads no later time), over the whole window otherwise; 1 s when none.
    """
    big = torch.iinfo(torch.int64).max
    d = ts[:, 1:] - ts[:, :-1]  # (B, T-1) consecutive gaps
    d = torch.where(real[:, 1:] & real[:, :-1] & (d > 0), d, big)
    d = torch.cat([torch.full_like(ts[:, :1], big), d], 1)  # (B, T): gap ending at each position
    scale = d.cummin(1).values if causal else d.min(1, keepdim=True).values.expand_as(d)  # (B, T)
    scale = torch.where(scale == big, 1, scale)
    gap = (ts[:, :, None] - ts[:, None, :]).abs()  # (B, T, T)
    return torch.div(gap, scale[:, :, None], rounding_mode="floor").clamp(max=k)  # (B, T, T)


class Periodic(nn.Module):
    """Hour of day, day of week (UTC) and log-bucketed gap from a reference time, as one summed vector."""

    def __init__(self, hidden: int, calendar: bool) -> None:
        super().__init__()
        self.hour = nn.Embedding(25, hidden, padding_idx=0) if calendar else None  # 0 = padding
        self.dow = nn.Embedding(8, hidden, padding_idx=0) if calendar else None
        self.gap = nn.Embedding(
            GAP_BUCKETS + 3, hidden, padding_idx=0
        )  # 0 padding, 1 no reference, 2.. buckets

    def forward(
        self, ts: torch.Tensor, ref: torch.Tensor, real: torch.Tensor, has_ref: torch.Tensor
    ) -> torch.Tensor:
        """``(B, T, D)`` for times ``ts`` ``(B, T)``, gaps ``ts - ref`` where ``has_ref``; padding (``~real``)
        zero."""
        gap = torch.where(has_ref, log_bucket(ts - ref, GAP_BUCKETS) + 2, 1)  # (B, T)
        out: torch.Tensor = self.gap(torch.where(real, gap, 0))  # (B, T, D)
        if self.hour is not None and self.dow is not None:
            hour = torch.div(ts, 3600, rounding_mode="floor") % 24 + 1  # (B, T) 1..24
            dow = (
                torch.div(ts, 86400, rounding_mode="floor") + 3
            ) % 7 + 1  # 1970-01-01 was a Thursday: Monday = 1
            out = out + self.hour(torch.where(real, hour, 0)) + self.dow(torch.where(real, dow, 0))
        return out


class EventContext(nn.Module):
    """The modules of the per-event inputs a config asks for (see the module docstring)."""

    def __init__(
        self,
        f: EventFields,
        hidden: int,
        n_heads: int,
        n_events: int,
        request: str,
        sizes: Mapping[str, int] | None = None,
    ) -> None:
        """``request``: "none"; "next" (SASRec's ``request_time``: each position gets the time of the event it
        predicts); "last" (BERT4Rec: the last position, the appended [mask], stands at the request time).
        ``sizes``: the vocabulary size of each categorical signal the config lists."""
        super().__init__()
        self.k, self.request, self.n_events = f.time_intervals, request, n_events
        self.columns = f.input_columns(request == "next")
        self.intervals = (
            nn.Parameter(torch.zeros(f.time_intervals + 1, n_heads)) if f.time_intervals else None
        )
        self.periodic = Periodic(hidden, True) if f.time_features == "periodic" else None
        self.next_time = Periodic(hidden, f.time_features == "periodic") if request == "next" else None
        self.event = nn.Embedding(n_events + 1, hidden, padding_idx=0) if f.event_input else None
        self.rating = nn.Embedding(RATING_BUCKETS + 1, hidden, padding_idx=0) if f.rating_input else None
        declared = [sig.get_signal(name) for name in f.signal_names()]
        self.signal_keys = {s.name: s.batch_key for s in declared}
        self.signals = (
            nn.ModuleDict({s.name: encoder_of(s)(hidden, (sizes or {}).get(s.name, 0)) for s in declared})
            if declared
            else None
        )
        # Initialised here, after the model's own init (the model builds this module last): embeddings
        # N(0, 0.02) with zero padding rows, interval biases zero (an untrained model attends as without
        # them).
        for m in self.modules():
            if isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
                with torch.no_grad():
                    m.weight[0].zero_()
        if self.intervals is not None:
            nn.init.zeros_(self.intervals)

    def timestamps(self, batch: Batch) -> torch.Tensor:
        """``(B, T)`` timestamps; with ``request = "last"`` the last column is the batch's ``request_time`` if
        any."""
        ts = require_key(batch, TIMESTAMPS)
        if self.request == "last" and REQUEST_TIME in batch:
            ts = torch.cat([ts[:, :-1], batch[REQUEST_TIME][:, None].to(ts.dtype)], 1)  # (B, T)
        return ts

    def add_inputs(self, emb: torch.Tensor, batch: Batch) -> torch.Tensor:
        """``emb`` ``(B, T, D)`` plus the time, event and rating embeddings of ``batch``'s positions."""
        real = batch["seq"] > 0  # (B, T)
        if self.periodic is not None or self.next_time is not None:
            ts = self.timestamps(batch)  # (B, T)
            prev = F.pad(ts, (1, 0))[:, :-1]  # (B, T) the previous position's time
            has_prev = F.pad(real, (1, 0))[:, :-1]
            if self.periodic is not None:
                emb = emb + self.periodic(ts, prev, real, has_prev)
            if (
                self.next_time is not None
            ):  # the predicted event's time: the next position's, or the request's
                last = batch[REQUEST_TIME].to(ts.dtype) if REQUEST_TIME in batch else ts[:, -1]  # (B,)
                nxt = torch.cat([ts[:, 1:], last[:, None]], 1)  # (B, T)
                emb = emb + self.next_time(nxt, ts, real, real)
        if self.event is not None:
            codes = require_key(batch, EVENTS)  # (B, T)
            if codes.numel() and int(codes.max()) > self.n_events:
                raise DataError(
                    f"event code {int(codes.max())} is outside the model's {self.n_events} event types"
                )
            emb = emb + self.event(codes.masked_fill(~real, 0))
        if self.rating is not None:
            r = require_key(batch, RATINGS).float()  # (B, T); NaN: not known (BERT4Rec's masked positions)
            stars = (r.nan_to_num(0.0) * 2).round().clamp(0, RATING_BUCKETS - 1).long() + 1
            emb = emb + self.rating(stars.masked_fill(~real | r.isnan(), 0))  # (B, T, D)
        for name, encoder in (self.signals or {}).items():
            emb = emb + encoder(require_key(batch, self.signal_keys[name]), real)  # (B, T, D)
        return emb

    def attention_mask(self, allowed: torch.Tensor, batch: Batch, causal: bool) -> torch.Tensor:
        """The additive mask ``allowed`` (:mod:`attnrec.models.nn.masks`) as it is, or with ``time_intervals``
        plus each head's interval bias ``(B, H, T, T)``."""
        if self.intervals is None:
            return allowed
        bucket = interval_buckets(self.timestamps(batch), batch["seq"] > 0, self.k, causal)  # (B, T, T)
        bias = self.intervals[bucket].permute(0, 3, 1, 2)  # (B, H, T, T)
        return bias + allowed  # (B, H, T, T)


def require_key(batch: Batch, key: str) -> torch.Tensor:
    if key not in batch:
        raise DataError(
            f"the model reads per-event {key!r}, but the batch has none (was it built from sequences "
            "with that column?)"
        )
    return batch[key]


def event_context(
    f: EventFields, hidden: int, n_heads: int, context: ModelContext | None, request: str
) -> EventContext | None:
    """The model's :class:`EventContext`, or ``None`` when it reads no per-event input (nothing is
    created); ``context`` holds the data's event vocabulary and the categorical signals' vocabularies."""
    if not f.input_columns(request == "next"):
        return None
    events = context.events if context is not None else None
    n_events = f.n_events or (len(events) if events is not None else 0)
    if f.event_input and n_events == 0:
        raise ValueError("event_input needs the event vocabulary: data with an event column, or n_events")
    vocabularies = context.vocabularies if context is not None else {}
    for name in f.signal_names():
        if sig.get_signal(name).kind == "categorical" and name not in vocabularies:
            raise ValueError(f"signals: {name!r} needs its vocabulary: data with a {name!r} column")
    sizes = {name: len(vocabularies[name]) for name in f.signal_names() if name in vocabularies}
    return EventContext(f, hidden, n_heads, n_events, request, sizes)


@dataclass(frozen=True)
class TargetRule:
    """Which events may be targets: of the ``target_events`` types, rated at least ``min_rating`` and, with
    ``since`` (Unix seconds; a fine-tune on new events), at or after that time."""

    target_events: str = ""
    min_rating: float | None = None
    vocabulary: IdMap | None = None
    since: int | None = None

    def codes(self) -> np.ndarray | None:
        """The event codes of ``target_events`` (names of the vocabulary, or integer codes); ``None``: every
        event."""
        names = [n.strip() for n in self.target_events.split(",") if n.strip()]
        if not names:
            return None
        out = []
        for n in names:
            code = self.vocabulary.get(n) if self.vocabulary is not None else None
            if code is None and not n.isdigit():
                known = (
                    self.vocabulary.to_list() if self.vocabulary is not None else "none (no event vocabulary)"
                )
                raise DataError(f"target_events: unknown event {n!r}; the event types are {known}")
            out.append(code if code is not None else int(n))
        return np.asarray(out, dtype=np.int64)

    def qualifies(self, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        """Whether each event may be a target, from its batch columns (``events``, ``ratings``); shape as
        theirs."""
        codes = self.codes()
        ok = np.ones(next(iter(cols.values())).shape, dtype=bool)
        if codes is not None:
            ok &= np.isin(cols[EVENTS], codes)
        if self.min_rating is not None:
            ok &= cols[RATINGS] >= self.min_rating
        if self.since is not None:
            ok &= cols[TIMESTAMPS] >= self.since
        return ok

    def negative(self, cols: Mapping[str, np.ndarray]) -> np.ndarray:
        """Whether each event is an explicit negative: of a target type but rated below ``min_rating``."""
        assert self.min_rating is not None
        codes = self.codes()
        of_type = (
            np.isin(cols[EVENTS], codes) if codes is not None else np.ones(cols[RATINGS].shape, dtype=bool)
        )
        recent = cols[TIMESTAMPS] >= self.since if self.since is not None else True
        return of_type & (cols[RATINGS] < self.min_rating) & recent


def target_rule(f: EventFields, events: IdMap | None) -> TargetRule | None:
    """The config's :class:`TargetRule`, or ``None`` when every event may be a target (the default)."""
    if not f.target_columns():
        return None
    return TargetRule(f.target_events, f.min_target_rating, events)


def explicit_negative_loss(
    h: torch.Tensor, items: torch.Tensor, negative: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean ``softplus(score)`` (the BCE of label 0) of the explicit-negative items ``negative`` ``(N,)`` for
    the query states ``h`` ``(N, D)`` against the item table ``items`` (``+ bias``); 0 when ``N = 0``."""
    if len(negative) == 0:
        return h.new_zeros(())
    score = (h * items[negative]).sum(-1)  # (N,)
    if bias is not None:
        score = score + bias[negative]
    return F.softplus(score).mean()


__all__ = [
    "EVENTS",
    "EXPLICIT_NEGATIVE",
    "GAP_BUCKETS",
    "RATINGS",
    "REQUEST_TIME",
    "TIMESTAMPS",
    "EventContext",
    "EventFields",
    "Periodic",
    "TargetRule",
    "event_context",
    "explicit_negative_loss",
    "batch_key",
    "interval_buckets",
    "log_bucket",
    "require_key",
    "target_rule",
]
