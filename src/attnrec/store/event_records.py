"""What a history store holds: events in external IDs, and a user's recent events as columns.

An :class:`Event` is one interaction as a shop or an app reports it: ``user`` and ``item`` (external
IDs, the text a log uses), ``timestamp`` (whole unix seconds) and the per-event fields the models can
read: ``event`` (an event-type name such as ``view`` or ``buy``), ``rating`` and ``signals``, the values
of declared signals (:mod:`attnrec.data.signals`, e.g. ``{"device": "phone"}``), all optional. The
store keeps events whatever model serves them: an item, an event type or a signal value a model does
not know is kept for the next retrain; the model skips the item (or reads the event without its type,
the value as unknown) when it scores (:mod:`attnrec.recommend.live`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from attnrec.data.schema import DataError, Interactions
from attnrec.data.signals import declared, find_signal

#: The values of an event's declared signals by name: text (categorical) or a number (numeric).
SignalValues = Mapping[str, str | float]

MAX_ID_CHARS = 256  # longest user ID, item ID or event name, as in the HTTP service's requests
MAX_SECONDS = 2**53  # timestamps beyond this are not exact in a JSON number (nor a float64)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1, as the HTTP service's IDs refuse


def _check_text(what: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{what} must be a string or an integer, not {type(value).__name__}")
    text = str(value)
    if not text or len(text) > MAX_ID_CHARS:
        raise DataError(f"{what} must have 1 to {MAX_ID_CHARS} characters, not {len(text)}")
    if _CONTROL.search(text):
        raise DataError(f"{what} {text[:40]!r} has control characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError(f"{what} {text[:40]!r} has a lone UTF-16 surrogate (not text)") from None
    return text


def _check_signals(values: object) -> dict[str, str | float]:
    """``values`` of declared signals, each checked by its signal's kind (categorical text as an ID is,
    a finite number at least the signal's ``minimum``); a one-line :class:`DataError` otherwise."""
    if not isinstance(values, Mapping):
        raise DataError(f"signals must map declared signal names to values, not {type(values).__name__}")
    out: dict[str, str | float] = {}
    for name, value in values.items():
        signal = find_signal(str(name))
        if signal is None or signal.builtin:
            names = ", ".join(s.name for s in declared()) or "none"
            raise DataError(f"{str(name)[:40]!r} is not a declared signal (declared: {names})")
        if signal.kind == "categorical":
            out[signal.name] = _check_text(signal.name, value)
            continue
        try:
            out[signal.name] = float(signal.request_values([value])[0])
        except ValueError as e:
            raise DataError(str(e).replace("must be finite numbers", "must be a finite number")) from None
    return out


@dataclass(frozen=True, slots=True)
class Event:
    """One interaction: ``user`` did something with ``item`` at ``timestamp`` (unix seconds).

    ``event`` (its type's name), ``rating`` (>= 0) and ``signals`` (declared signals' values by name)
    are optional. Checked on construction: a bad value is a one-line
    :class:`~attnrec.data.schema.DataError`.
    """

    user: str
    item: str
    timestamp: int
    event: str | None = None
    rating: float | None = None
    signals: SignalValues = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "user", _check_text("user", self.user))
        object.__setattr__(self, "item", _check_text("item", self.item))
        ts = self.timestamp
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise DataError(f"timestamp must be a finite number of seconds, not {ts!r}")
        if abs(ts) > MAX_SECONDS:
            raise DataError(f"timestamp must be seconds within +-2**53, not {ts:g}")
        object.__setattr__(self, "timestamp", int(math.floor(ts)))
        if self.event is not None:
            object.__setattr__(self, "event", _check_text("event", self.event))
        r = self.rating
        if r is not None:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r < 0:
                raise DataError(f"rating must be a finite number >= 0, not {r!r}")
            object.__setattr__(self, "rating", float(r))
        object.__setattr__(self, "signals", _check_signals(self.signals))


@dataclass(frozen=True)
class Recent:
    """A user's newest stored events, oldest first, as columns.

    ``items``, ``events`` (``None`` where an event has no type), the arrays ``timestamps`` (int64)
    and ``ratings`` (float64, NaN where an event has no rating) and each list of ``signals`` (a declared
    signal's values by name, ``None`` where an event has none) are aligned. ``forgotten``: the user
    asked to be forgotten (:meth:`HistoryStore.forget`) at some time; the events here arrived since,
    and the history a model was trained with must no longer be used for this user.
    """

    items: list[str]
    timestamps: np.ndarray
    events: list[str | None]
    ratings: np.ndarray
    forgotten: bool = False
    signals: dict[str, list[str | float | None]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.items)

    @classmethod
    def empty(cls, forgotten: bool = False) -> Recent:
        return cls([], np.zeros(0, dtype=np.int64), [], np.zeros(0, dtype=np.float64), forgotten)

    @classmethod
    def from_rows(cls, rows: Sequence[StoredRow], forgotten: bool = False) -> Recent:
        """The columns of ``(item, timestamp, event, rating, signals)`` rows a store wrote (checked when
        they were appended, so not checked again), oldest first."""
        return cls(
            [r[0] for r in rows],
            np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)),
            [r[2] for r in rows],
            np.fromiter(
                (math.nan if r[3] is None else r[3] for r in rows), dtype=np.float64, count=len(rows)
            ),
            forgotten,
            signal_columns([r[4] for r in rows]),
        )

    @classmethod
    def of(cls, events: list[Event], forgotten: bool = False) -> Recent:
        """The columns of ``events`` (already oldest first)."""
        return cls.from_rows([(e.item, e.timestamp, e.event, e.rating, e.signals) for e in events], forgotten)


#: A stored event of one user: ``(item, timestamp, event, rating, signals)``.
StoredRow = tuple[str, int, str | None, float | None, SignalValues]


def signal_columns(values: Sequence[SignalValues]) -> dict[str, list[str | float | None]]:
    """Events' signal values as one list per signal name (first seen first), ``None`` where an event has
    none."""
    names = dict.fromkeys(name for v in values for name in v)
    return {name: [v.get(name) for v in values] for name in names}


def log_events(data: Interactions, now: int, batch: int = 10_000) -> Iterator[list[Event]]:
    """The events of an interaction log in batches of ``batch``, per user oldest first; a log without
    timestamps gets ``now`` for every event (the store then keeps each user's events in log order)."""
    users, items = data.users.external, data.items.external
    for lo in range(0, len(data), batch):
        sl = slice(lo, lo + batch)
        u, it = users[data.user[sl]], items[data.item[sl] - 1]  # internal item i is external[i - 1]
        ts = np.full(len(u), now) if data.timestamp is None else data.timestamp[sl]
        ev = [None] * len(u) if data.event is None else data.event[sl]
        ra = [None] * len(u) if data.rating is None else data.rating[sl].tolist()
        sg = _log_signals({name: values[sl] for name, values in data.signals.items()}, len(u))
        yield [Event(*row) for row in zip(u, it, ts.tolist(), ev, ra, sg, strict=True)]


def _log_signals(columns: Mapping[str, np.ndarray], n: int) -> list[dict[str, str | float]]:
    """Each event's declared signal values of a log's ``columns`` (a missing one, NaN or None, left out)."""
    rows: list[dict[str, str | float]] = [{} for _ in range(n)]
    for name, values in columns.items():
        for row, value in zip(rows, values.tolist(), strict=True):
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                row[name] = value
    return rows


__all__ = [
    "MAX_ID_CHARS",
    "MAX_SECONDS",
    "Event",
    "Recent",
    "SignalValues",
    "StoredRow",
    "log_events",
    "signal_columns",
]
