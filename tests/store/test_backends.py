"""What is particular to each backend and to the events: validation, opening, bad files, a server that is
down."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import pytest

from attnrec.data.schema import DataError
from attnrec.data.signals import Signal, register_signal, unregister_signal
from attnrec.store import Event, RedisStore, SqliteStore, StoreUnavailable, open_store
from attnrec.store.redis_store import _row
from redis_server import free_port, require_redis


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"user": "", "item": "a", "timestamp": 1}, "user must have 1 to 256 characters"),
        ({"user": True, "item": "a", "timestamp": 1}, "user must be a string or an integer"),
        ({"user": "u", "item": "a\x00", "timestamp": 1}, "control characters"),
        ({"user": "u", "item": "a", "timestamp": float("nan")}, "timestamp must be a finite number"),
        ({"user": "u", "item": "a", "timestamp": 2.0**60}, "within"),
        ({"user": "u", "item": "a", "timestamp": 1, "rating": -1}, "rating must be a finite number >= 0"),
        ({"user": "u", "item": "a", "timestamp": 1, "event": ""}, "event must have"),
        ({"user": "u", "item": "a\ud800", "timestamp": 1}, "lone UTF-16 surrogate"),
    ],
)
def test_a_bad_event_is_a_one_line_data_error(fields: dict[str, object], message: str) -> None:
    with pytest.raises(DataError, match=message):
        Event(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"devise": "tv"}, r"'devise' is not a declared signal \(declared: device, price\)"),
        ({"event": "view"}, "'event' is not a declared signal"),  # a built-in has its own field
        ({"device": ""}, "device must have 1 to 256 characters"),
        ({"device": 1.5}, "device must be a string or an integer"),
        ({"price": "cheap"}, "price must be a finite number"),
        ({"price": float("inf")}, "price must be a finite number"),
        ({"price": -1}, "price must be at least 0"),
        (["device"], "signals must map declared signal names to values"),
    ],
)
def test_a_bad_signal_value_is_a_one_line_data_error(values: object, message: str) -> None:
    register_signal(Signal("device", "categorical"))
    register_signal(Signal("price", "numeric", minimum=0.0))
    try:
        with pytest.raises(DataError, match=message):
            Event("u", "a", 1, signals=values)  # type: ignore[arg-type]
        assert Event("u", "a", 1, signals={"device": 7, "price": 1}).signals == {"device": "7", "price": 1.0}
    finally:
        unregister_signal("device")
        unregister_signal("price")


def test_a_sqlite_file_written_before_signals_were_kept_still_opens(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the layout of the first format, without the signals column
        conn.executescript(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
            "INSERT INTO meta VALUES ('format', 'attnrec-events-1');"
            "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL, "
            "item TEXT NOT NULL, ts INTEGER NOT NULL, event TEXT, rating REAL);"
            "CREATE TABLE forgotten (user TEXT PRIMARY KEY, at INTEGER NOT NULL);"
            "INSERT INTO events (user, item, ts, event, rating) VALUES ('u', 'a', 1, 'view', NULL);"
        )
    conn.close()
    store = SqliteStore(path)
    try:
        store.append([Event("u", "b", 2)])
        got = store.recent(["u"], 5)["u"]
        assert got.items == ["a", "b"] and got.events == ["view", None] and got.signals == {}
        assert store.export()["item"].tolist() == ["a", "b"]
    finally:
        store.close()


def test_a_redis_member_written_before_signals_were_kept_still_reads() -> None:
    assert _row(f"{1:020d}\x1fa\x1fview\x1f4.5", 7.0) == ("a", 7, "view", 4.5, {})


def test_an_event_normalises_ids_and_floors_its_time() -> None:
    e = Event(42, 7, 10.9, rating=4)  # type: ignore[arg-type]
    assert (e.user, e.item, e.timestamp, e.rating) == ("42", "7", 10, 4.0)
    assert Event("u", "\U00052850 é", 1).item == "\U00052850 é"  # any text but control characters


def test_open_store_picks_the_backend_from_the_name(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "sub" / "events.db"), retention=7)
    assert (
        isinstance(store, SqliteStore) and store.retention == 7 and (tmp_path / "sub" / "events.db").is_file()
    )
    with pytest.raises(StoreUnavailable, match="Redis at redis://127.0.0.1"):
        open_store(f"redis://127.0.0.1:{free_port()}/0")


@pytest.mark.parametrize("spec", ["http://cache:6379/0", "sqlite:///events.db", "postgres://db/events"])
def test_a_url_of_another_kind_is_no_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    """``http://host`` was opened as the SQLite file ``http:/host`` under the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=f"store '{spec}': a .+:// URL is no history store; give a redis://"):
        open_store(spec)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DataError, match="REDIS://127.0.0.1:1/0: not a Redis URL"):
        open_store("REDIS://127.0.0.1:1/0")  # Redis's in capitals: redis's own message


def test_sqlite_refuses_a_file_that_is_not_an_event_store(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(DataError, match="not an attnrec event store"):
        SqliteStore(other)
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a database at all" * 100)
    with pytest.raises(DataError, match="cannot be opened as an event store"):
        SqliteStore(text)
    with pytest.raises(DataError, match="is a directory"):
        SqliteStore(tmp_path)
    with pytest.raises(DataError, match="durability must be one of full, normal"):
        SqliteStore(tmp_path / "x.db", durability="sometimes")
    with pytest.raises(DataError, match="retention must be a positive number"):
        SqliteStore(tmp_path / "y.db", retention=0)


def test_sqlite_runs_in_wal_mode_with_the_durability_asked_for(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "e.db", durability="normal")
    conn = store._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (FULL is 2)
    assert SqliteStore(tmp_path / "f.db")._conn().execute("PRAGMA synchronous").fetchone()[0] == 2


def _open_files(path: Path) -> int:
    """How many of this process's file descriptors are ``path`` (Linux: /proc/self/fd)."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(path.resolve()))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
def test_sqlite_closes_the_connection_of_a_thread_that_has_ended(tmp_path: Path) -> None:
    """A server opens the store from a new thread at each reload: the connections of ended threads must
    not pile up (each holds a file descriptor and SQLite's page cache)."""
    path = tmp_path / "events.db"
    store = SqliteStore(path)
    store.append([Event("u", "i", 1)])
    for _ in range(20):
        reader = threading.Thread(target=store.count)
        reader.start()
        reader.join()
    # This thread's connection, the last ended thread's (closed when the next one opens), and one file
    # SQLite keeps open after a close while another connection of the process holds a lock on the file.
    assert _open_files(path) <= 3
    assert store.count() == 1
    store.close()
    assert _open_files(path) == 0


def test_a_redis_store_hides_the_password_of_its_url(tmp_path: Path) -> None:
    require_redis({})
    with pytest.raises(StoreUnavailable) as caught:
        RedisStore(f"redis://:s3cret-password@127.0.0.1:{free_port()}/0", timeout_s=1)
    assert "s3cret" not in str(caught.value)


def test_a_missing_redis_server_skips_here_and_fails_under_ci(tmp_path: Path) -> None:
    absent = str(tmp_path / "redis-server")
    with pytest.raises(pytest.fail.Exception, match="CI must run them"):
        require_redis({"CI": "true"}, absent)
    with pytest.raises(pytest.skip.Exception, match="redis-server"):
        require_redis({}, absent)
