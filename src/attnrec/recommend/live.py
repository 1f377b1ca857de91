"""Live histories: the history a model was trained with plus the events a store gathered since.

A :class:`~attnrec.recommend.Recommender` given a store (:meth:`~attnrec.recommend.Recommender.use_store`)
answers every user from :func:`live_rows`: for a user the model knows, its training history followed
by its stored events; for a user it does not know, its stored events alone; for a user who asked to
be forgotten, only the events stored since (the training history is no longer used, and the model's
per-user parameters neither: the user is answered as a new one).

Stored events are turned into the model's terms here: items the model does not know are skipped
(they stay in the store for the next retrain), and each of the model's per-event columns
(:mod:`attnrec.data.signals`) is filled from the event: its timestamp; its event type's
code (``0``, no type, for a type the model never saw or an event without one, so the item still
counts); its rating (NaN, read as "no rating", when it has none); a declared signal's value, mapped
through the model's vocabulary when categorical (the unknown code for a value it never saw), or "not
known" (code ``0`` or NaN) when the event has none. Events stored out of time order,
or older than the training history's newest, are merged in time order (ties: training events first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from attnrec.data.schema import EVENT, RATING, TIMESTAMP, IdMap, Sequences, signal_codes
from attnrec.data.signals import Signal, get_signal
from attnrec.recommend.event_requests import stored_columns
from attnrec.store import HistoryStore, Recent

UNKNOWN_USER = -1  # no known user: models with user embeddings fold the history in (models/_baselines.py)
DEFAULT_MARGIN = 50
"""Events read beyond what the model reads (``max_len``): room for skipped unknown items."""


@dataclass(frozen=True)
class LiveRow:
    """One user's history as a model scores it: internal items (oldest first) and per-event columns.

    ``uid`` is the user's internal index, or ``UNKNOWN_USER`` for a user the model does not know
    (``who="unknown"``) or was asked to forget (``who="forgotten"``).
    """

    uid: int
    items: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    who: str | None = None
    stored: int = 0  # how many of ``items`` came from the store

    def note(self, user: object, history_given: bool) -> str | None:
        """Why the answer for ``user`` is not fully personalised (``None`` when it is)."""
        if self.who is None:
            return None
        if history_given:
            how = "scored from the given history"
        else:
            how = "scored from the events stored for it" if self.stored else "most popular items"
        return f"{self.who} user {str(user)!r}: {how}"


EMPTY = LiveRow(UNKNOWN_USER, np.zeros(0, dtype=np.int64))
"""No stored history (a request without a user, or one that scores only the history it sends)."""


def trained_row(users: IdMap, histories: Sequences, user: str) -> LiveRow:
    """``user``'s training history alone (no store), or an empty row for a user the model does not know."""
    uid = users.get(user)
    if uid is None:
        return LiveRow(UNKNOWN_USER, np.zeros(0, dtype=np.int64), {}, "unknown")
    return LiveRow(int(uid), histories[uid], stored_columns(histories, uid))


def stored_part(
    recent: Recent,
    items: IdMap,
    events: IdMap | None,
    names: Sequence[str],
    vocabularies: Mapping[str, IdMap] | None = None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The stored events in the model's terms: internal items of the known ones and their ``names``
    columns (a categorical signal's values coded by its vocabulary in ``vocabularies``)."""
    keep_idx = [(i, j) for i, j in enumerate(items.get(x) for x in recent.items) if j is not None]
    rows = np.fromiter((i for i, _ in keep_idx), dtype=np.int64, count=len(keep_idx))
    idx = np.fromiter((j for _, j in keep_idx), dtype=np.int64, count=len(keep_idx))
    columns: dict[str, np.ndarray] = {}
    for name in names:
        if name == TIMESTAMP:
            values = recent.timestamps[rows]
        elif name == EVENT:
            known = events.get if events is not None else (lambda _: None)
            values = np.fromiter(
                ((known(recent.events[r]) or 0) if recent.events[r] is not None else 0 for r in rows),
                dtype=np.int64,
                count=len(rows),
            )
        elif name == RATING:
            values = recent.ratings[rows]
        else:
            values = _signal_values(get_signal(name), recent.signals.get(name), rows, vocabularies)
        columns[name] = values.astype(get_signal(name).dtype)
    return idx, columns


def _signal_values(
    signal: Signal,
    stored: Sequence[str | float | None] | None,
    rows: np.ndarray,
    vocabularies: Mapping[str, IdMap] | None,
) -> np.ndarray:
    """A declared signal's stored values at ``rows``: codes of the signal's vocabulary (a categorical one)
    or numbers, "not known" (:attr:`~attnrec.data.signals.Signal.hidden_value`) where an event has none."""
    out = np.full(len(rows), signal.hidden_value)
    if stored is None:
        return out
    picked = [stored[r] for r in rows.tolist()]
    has = np.fromiter((v is not None for v in picked), dtype=bool, count=len(picked))
    vocabulary = (vocabularies or {}).get(signal.name)
    if signal.kind != "categorical":
        out[has] = [v for v in picked if v is not None]
    elif vocabulary is not None and has.any():
        out[has] = signal_codes(vocabulary, [v for v in picked if v is not None])
    return out


def merge(
    items: Sequence[np.ndarray], columns: Sequence[Mapping[str, np.ndarray]]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Histories joined in order, keeping the columns every non-empty part has, in time order when
    they carry timestamps (a stable sort: equal times keep their order)."""
    parts = [(i, c) for i, c in zip(items, columns, strict=True) if len(i)]
    if not parts:
        return np.zeros(0, dtype=np.int64), dict(columns[0]) if columns else {}
    names = set(parts[0][1]).intersection(*(set(c) for _, c in parts[1:]))
    joined = np.concatenate([i for i, _ in parts])
    cols = {n: np.concatenate([c[n] for _, c in parts]) for n in sorted(names)}
    ts = cols.get(TIMESTAMP)
    if ts is not None and len(parts) > 1 and (np.diff(ts) < 0).any():
        order = np.argsort(ts, kind="stable")
        joined, cols = joined[order], {n: v[order] for n, v in cols.items()}
    return joined, cols


def live_rows(
    users_requested: Sequence[str],
    users: IdMap,
    items: IdMap,
    events: IdMap | None,
    histories: Sequences,
    store: HistoryStore,
    limit: int,
    vocabularies: Mapping[str, IdMap] | None = None,
) -> dict[str, LiveRow]:
    """The live history of each of ``users_requested`` (see the module doc): one store read for all."""
    found = store.recent(users_requested, limit)
    names = tuple(histories.columns)
    out: dict[str, LiveRow] = {}
    for user in users_requested:
        recent = found.get(user, Recent.empty())
        base = trained_row(users, histories, user)
        if recent.forgotten:
            base = LiveRow(UNKNOWN_USER, np.zeros(0, dtype=np.int64), {}, "forgotten")
        new_items, new_cols = stored_part(recent, items, events, names, vocabularies)
        if not len(new_items):
            out[user] = base
            continue
        joined, cols = merge([base.items, new_items], [base.columns, new_cols])
        out[user] = LiveRow(base.uid, joined, cols, base.who, len(new_items))
    return out


__all__ = [
    "DEFAULT_MARGIN",
    "EMPTY",
    "UNKNOWN_USER",
    "LiveRow",
    "live_rows",
    "merge",
    "stored_part",
    "trained_row",
]
