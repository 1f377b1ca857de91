"""The embedded backend: one SQLite file (standard library ``sqlite3``), in WAL mode.

Durability: every :meth:`SqliteStore.append` is one transaction, committed before it returns. With
``durability="full"`` (the default, SQLite's ``synchronous=FULL``) the commit waits for the
write-ahead log to reach the disk (``fsync``): an acknowledged event survives a killed server
(``kill -9``), an operating-system crash and a power cut. ``durability="normal"``
(``synchronous=NORMAL``) skips that wait at commit: a killed server still loses nothing (the log is
in the operating system's hands), but an operating-system crash or a power cut may lose the last
commits before the next checkpoint. One transaction per batch makes the fsync cheap per event:
``benchmarks/results/store-ingest.md`` has the measured throughput of both.

An event's declared signal values (:attr:`~attnrec.store.Event.signals`) are one JSON object in the
``signals`` column; a file written before that column existed gets it, empty, when it is opened.

Several threads (and several processes on one machine) may use one file: each thread has its own
connection; WAL lets readers read while one writer writes; writers wait up to ``busy_seconds`` for
each other.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from attnrec.data.schema import DataError
from attnrec.store.contract import (
    DEFAULT_RETENTION,
    StoreBackend,
    StoreUnavailable,
    export_frame,
    unavailable_on,
)
from attnrec.store.event_records import Event, Recent, SignalValues

if TYPE_CHECKING:
    pass

FORMAT = "attnrec-events-1"
DURABILITY = {"full": "FULL", "normal": "NORMAL"}
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    user TEXT NOT NULL, item TEXT NOT NULL, ts INTEGER NOT NULL, event TEXT, rating REAL, signals TEXT
);
CREATE INDEX IF NOT EXISTS events_by_user ON events (user, ts, seq);
CREATE TABLE IF NOT EXISTS forgotten (user TEXT PRIMARY KEY, at INTEGER NOT NULL);
"""
_TRIM = (
    "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE user = ? "
    "ORDER BY ts DESC, seq DESC LIMIT -1 OFFSET ?)"
)
_LAST = 2**63 - 1  # no arrival number is larger
_RECENT = (
    "SELECT item, ts, event, rating, signals FROM events WHERE user = ? ORDER BY ts DESC, seq DESC LIMIT ?"
)
_PARAMS = 500  # host parameters per IN (...) list, under SQLite's limit


def _signals_text(values: SignalValues) -> str | None:
    """An event's declared signal values as stored: a JSON object, NULL without any."""
    return json.dumps(dict(values), sort_keys=True, allow_nan=False) if values else None


def _signals_of(text: str | None) -> SignalValues:
    signals: SignalValues = json.loads(text) if text else {}
    return signals


class SqliteStore(StoreBackend):
    """A :class:`~attnrec.store.contract.HistoryStore` in the SQLite file ``path`` (see the module doc)."""

    def __init__(
        self,
        path: str | Path,
        *,
        retention: int = DEFAULT_RETENTION,
        durability: str = "full",
        busy_seconds: float = 30.0,
    ) -> None:
        if durability not in DURABILITY:
            raise DataError(f"durability must be one of {', '.join(DURABILITY)}, not {durability!r}")
        self.path = Path(path)
        super().__init__(retention)
        self.durability = durability
        self._busy = busy_seconds
        self._local = threading.local()
        # Every open connection with the thread that opened it: one a thread, closed once the thread has
        # ended (a server's reloads and warm-ups each run on a new thread).
        self._all: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._lock = threading.Lock()
        self._closed = False
        if self.path.is_dir():
            raise DataError(f"{self.path}: is a directory; give the store's file path")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._set_up(self._conn())

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r}, retention={self.retention}, durability={self.durability!r})"

    # -- connections -----------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreUnavailable(f"{self.path}: the store is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, timeout=self._busy, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={DURABILITY[self.durability]}")
            except sqlite3.DatabaseError as e:
                raise DataError(f"{self.path}: cannot be opened as an event store ({e})") from None
            self._local.conn = conn
            with self._lock:
                ended = [c for t, c in self._all if not t.is_alive()]
                self._all = [(t, c) for t, c in self._all if t.is_alive()]
                self._all.append((threading.current_thread(), conn))
            for old in ended:
                old.close()
        return conn

    def _set_up(self, conn: sqlite3.Connection) -> None:
        try:
            with self._write(conn):
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if tables and "meta" not in tables:
                    raise DataError(f"{self.path}: a SQLite file, but not an attnrec event store")
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    conn.execute(statement)
                if "signals" not in {r[1] for r in conn.execute("PRAGMA table_info(events)")}:
                    # a file written before events kept declared signals: a column of NULLs, no rewrite
                    conn.execute("ALTER TABLE events ADD COLUMN signals TEXT")
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (FORMAT,))
                found = conn.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()[0]
            if found != FORMAT:
                raise DataError(
                    f"{self.path}: an event store of format {found!r}; this attnrec reads {FORMAT!r}"
                )
        except sqlite3.DatabaseError as e:
            raise DataError(f"{self.path}: cannot be opened as an event store ({e})") from None

    @contextmanager
    def _write(self, conn: sqlite3.Connection) -> Iterator[None]:
        """One write transaction (taken at once, so writers queue instead of failing to upgrade)."""
        with self._busy_is_unavailable():
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _busy_is_unavailable(self) -> AbstractContextManager[None]:
        """A file still locked after ``busy_seconds`` (or gone read-only) is :class:`StoreUnavailable`."""
        return unavailable_on(sqlite3.OperationalError, lambda e: f"{self.path}: {e}")

    # -- the contract ----------------------------------------------------------------------------
    def _append(self, events: Sequence[Event]) -> int:
        conn = self._conn()
        rows = [(e.user, e.item, e.timestamp, e.event, e.rating, _signals_text(e.signals)) for e in events]
        with self._write(conn):
            conn.executemany(
                "INSERT INTO events (user, item, ts, event, rating, signals) VALUES (?, ?, ?, ?, ?, ?)", rows
            )
            conn.executemany(_TRIM, [(u, self.retention) for u in {e.user for e in events}])
        return len(rows)

    def _recent(self, users: list[str], limit: int) -> dict[str, Recent]:
        conn = self._conn()
        with self._busy_is_unavailable():
            return self._snapshot(conn, users, limit)

    def _snapshot(self, conn: sqlite3.Connection, users: list[str], limit: int) -> dict[str, Recent]:
        conn.execute("BEGIN")  # one snapshot for every user of the batch
        try:
            gone = self._forgotten_among(conn, users)
            out = {}
            for u in users:
                rows = conn.execute(_RECENT, (u, limit)).fetchall()[::-1] if limit else []
                out[u] = Recent.from_rows([(*r[:4], _signals_of(r[4])) for r in rows], u in gone)
        finally:
            conn.execute("COMMIT")
        return out

    def _forgotten_among(self, conn: sqlite3.Connection, users: list[str]) -> set[str]:
        gone: set[str] = set()
        for lo in range(0, len(users), _PARAMS):
            part = users[lo : lo + _PARAMS]
            marks = ",".join("?" * len(part))
            gone.update(
                r[0] for r in conn.execute(f"SELECT user FROM forgotten WHERE user IN ({marks})", part)
            )
        return gone

    def forget(self, user: str) -> int:
        conn = self._conn()
        with self._write(conn):
            deleted = conn.execute("DELETE FROM events WHERE user = ?", (str(user),)).rowcount
            conn.execute("INSERT OR REPLACE INTO forgotten VALUES (?, ?)", (str(user), int(time.time())))
        return int(deleted)

    def export(self, until: int | None = None) -> pd.DataFrame:
        last = _LAST if until is None else int(until)
        rows = self._conn().execute(
            "SELECT user, item, ts, event, rating, signals FROM events WHERE seq <= ? ORDER BY user, ts, seq",
            (last,),
        )
        return export_frame([(*r[:5], _signals_of(r[5])) for r in rows.fetchall()])

    def watermark(self) -> int:
        # AUTOINCREMENT never reuses a number, even of deleted events: sqlite_sequence holds the largest.
        row = self._conn().execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
        return int(row[0]) if row else 0

    def trim(self, until: int) -> int:
        conn = self._conn()
        with self._write(conn):
            return int(conn.execute("DELETE FROM events WHERE seq <= ?", (int(until),)).rowcount)

    def forgotten(self) -> list[str]:
        return [r[0] for r in self._conn().execute("SELECT user FROM forgotten ORDER BY user")]

    def clear_forgotten(self, users: Sequence[str], before: int) -> int:
        conn = self._conn()
        with self._write(conn):
            return sum(
                conn.execute(
                    "DELETE FROM forgotten WHERE user = ? AND at < ?", (str(u), int(before))
                ).rowcount
                for u in users
            )

    def count(self) -> int:
        return int(self._conn().execute("SELECT count(*) FROM events").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for _, conn in self._all:
                conn.close()
            self._all.clear()


__all__ = ["DURABILITY", "FORMAT", "SqliteStore"]
