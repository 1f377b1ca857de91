"""The one contract every history store implements, and how a store is named and opened.

A store keeps the events that arrive between two trainings of a model (``POST /v1/events``,
``attnrec ingest``) so that every answer for a user reads the history the model was trained with
plus the events since (:mod:`attnrec.recommend.live`). Two backends implement it:

* :class:`~attnrec.store.sqlite_store.SqliteStore`: one file, embedded (the standard library's
  ``sqlite3`` in WAL mode), the default; one server, or several processes on one machine;
* :class:`~attnrec.store.redis_store.RedisStore`: a Redis server shared by several server replicas.

:func:`open_store` picks the backend from a name: ``redis://`` / ``rediss://`` / ``unix://`` URLs are
Redis, anything else is the path of a SQLite file.

Retention: a store keeps at most ``retention`` events per user (the newest by time); older ones are
dropped when new ones arrive. Reads are bounded too: a recommender asks for the newest events its
model can read plus a margin (:meth:`attnrec.recommend.Recommender.use_store`), never for all.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, Self, runtime_checkable

import pandas as pd

from attnrec.data.schema import DataError
from attnrec.data.signals import find_signal, signals
from attnrec.store.event_records import Event, Recent, StoredRow, signal_columns

DEFAULT_RETENTION = 10_000
"""Events kept per user by default: far more than any model reads (``max_len`` is 50-200), few enough
that one runaway client cannot fill the disk with one user."""
#: The columns every export has: the IDs and the built-in signals; then one column per declared signal
#: that a stored event carries (:func:`export_frame`).
EXPORT_COLUMNS = ("user", "item", *(s.name for s in signals() if s.builtin))
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")  # a scheme (two letters at least: C:// is a drive)


class StoreUnavailable(RuntimeError):
    """The store cannot be reached or stays busy (a Redis server down, a SQLite file locked too long)."""


@contextmanager
def unavailable_on(
    errors: type[Exception] | tuple[type[Exception], ...], message: Callable[[Exception], str]
) -> Iterator[None]:
    """A backend's ``errors`` raised in the block become :class:`StoreUnavailable` (``message(e)``)."""
    try:
        yield
    except errors as e:
        raise StoreUnavailable(message(e)) from None


@runtime_checkable
class HistoryStore(Protocol):
    """Per-user event histories: append, read the newest, forget a user, export everything.

    Every method is safe to call from several threads. An event :meth:`append` returned for is
    durable as the backend promises (see each backend and ``docs/how-to/live-histories.md``).
    """

    retention: int

    def append(self, events: Sequence[Event]) -> int:
        """Store ``events`` (all or none); returns how many. Each user keeps its newest ``retention``."""
        ...

    def recent(self, users: Sequence[str], limit: int) -> dict[str, Recent]:
        """The newest ``limit`` events of each of ``users`` (oldest first, by time then arrival), one
        entry per user (empty for a user without events); ``forgotten`` says who was forgotten."""
        ...

    def forget(self, user: str) -> int:
        """Delete every event of ``user`` and remember that it was forgotten (a privacy request);
        returns how many events were deleted. Events that arrive later are kept again."""
        ...

    def export(self, until: int | None = None) -> pd.DataFrame:
        """Every stored event as a table (:data:`EXPORT_COLUMNS` and the declared signals the events carry;
        ``event``, ``rating`` and a signal's value null where absent), per user oldest first: what the
        next training adds to its log. ``until``: only the events whose arrival number is at most it (a
        :meth:`watermark` taken before)."""
        ...

    def watermark(self) -> int:
        """The arrival number of the newest event appended so far (0 before any): events appended
        later have larger numbers, so a retrain exports up to it and :meth:`trim` removes just those."""
        ...

    def trim(self, until: int) -> int:
        """Delete the events whose arrival number is at most ``until`` (those a retrain moved into the
        new model's log); returns how many. Later events stay."""
        ...

    def forgotten(self) -> list[str]:
        """The users forgotten since the store was created (the next training must drop their old events)."""
        ...

    def clear_forgotten(self, users: Sequence[str], before: int) -> int:
        """Clear the marks of ``users`` forgotten before ``before`` (Unix seconds): a retrain whose log
        dropped their old events has run, so they are ordinary users again; returns how many. A user
        forgotten again since keeps the mark (the next retrain drops its events)."""
        ...

    def count(self) -> int:
        """How many events are stored."""
        ...

    def close(self) -> None:
        """Release the connections (the data stays)."""
        ...


def check_retention(retention: int) -> int:
    if isinstance(retention, bool) or not isinstance(retention, int) or retention < 1:
        raise DataError(f"retention must be a positive number of events per user, not {retention!r}")
    return retention


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise DataError(f"limit must be a number of events >= 0, not {limit!r}")
    return limit


def export_frame(rows: Sequence[tuple[str, *StoredRow]]) -> pd.DataFrame:
    """``rows`` of ``(user, item, timestamp, event, rating, signals)`` as the table
    :meth:`HistoryStore.export` returns: a declared signal's values in one column of its name (numbers
    as float64 with NaN, text as objects with None, where an event has none)."""
    frame = pd.DataFrame([r[:5] for r in rows], columns=list(EXPORT_COLUMNS))
    frame = frame.astype(
        {"user": object, "item": object, "timestamp": "int64", "event": object, "rating": "float64"}
    )
    for name, values in signal_columns([r[5] for r in rows]).items():
        signal = find_signal(name)
        numeric = (
            signal.kind == "numeric" if signal is not None else all(isinstance(v, float) for v in values)
        )
        frame[name] = pd.Series(values, dtype="float64" if numeric else object)
    return frame


class StoreBackend(ABC):
    """What the backends share: the contract's checks of ``retention``, ``limit`` and empty requests,
    and one store under every copy of a recommender. A backend implements :meth:`_append` and
    :meth:`_recent` (called with events, and with distinct users, only) and the rest of
    :class:`HistoryStore`."""

    def __init__(self, retention: int) -> None:
        self.retention = check_retention(retention)

    def __deepcopy__(self, memo: dict[int, object]) -> Self:
        """The store itself: a copied recommender (copy-on-write in serving) shares its store."""
        return self

    def append(self, events: Sequence[Event]) -> int:
        return self._append(events) if events else 0

    def recent(self, users: Sequence[str], limit: int) -> dict[str, Recent]:
        check_limit(limit)
        distinct = list(dict.fromkeys(str(u) for u in users))
        return self._recent(distinct, limit) if distinct else {}

    @abstractmethod
    def _append(self, events: Sequence[Event]) -> int:
        """Store the (one or more) ``events`` in one transaction; returns how many."""

    @abstractmethod
    def _recent(self, users: list[str], limit: int) -> dict[str, Recent]:
        """:meth:`HistoryStore.recent` of one or more distinct ``users``."""


def open_store(spec: str, *, retention: int = DEFAULT_RETENTION) -> HistoryStore:
    """The store named by ``spec``: a Redis URL (``redis://host:6379/0``) or a SQLite file path
    (created when missing, with its parent directory); any other URL is a one-line :class:`DataError`
    (``http://host`` was a SQLite file ``http:/host`` made under the working directory)."""
    url = _URL.match(spec)
    if url is not None and f"{url[1].lower()}://" not in REDIS_SCHEMES:
        raise DataError(
            f"store {spec!r}: a {url[1]}:// URL is no history store; give a "
            f"{', '.join(REDIS_SCHEMES[:-1])} or {REDIS_SCHEMES[-1]} URL (Redis) or a SQLite file path"
        )
    if url is not None:
        from attnrec.store.redis_store import RedisStore

        return RedisStore(spec, retention=retention)
    from attnrec.store.sqlite_store import SqliteStore

    return SqliteStore(spec, retention=retention)


__all__ = [
    "DEFAULT_RETENTION",
    "EXPORT_COLUMNS",
    "HistoryStore",
    "StoreBackend",
    "StoreUnavailable",
    "check_limit",
    "check_retention",
    "export_frame",
    "open_store",
]
