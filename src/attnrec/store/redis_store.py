"""The shared backend: a Redis server (redis-py), for several server replicas reading one store.

Layout under the ``namespace`` prefix (default ``attnrec``): one sorted set per user,
``NS:e:USER``, scored by timestamp, each member the event's arrival number (20 digits, so equal
timestamps keep their arrival order), its item, event type, rating and declared signal values (a JSON
object; a member stored before they were kept has no such field), separated by the ASCII unit separator
(``\x1f``, a control character no ID, event name or JSON text may contain; an empty field is an absent
one); the set of users with events ``NS:users``; the hash of forgotten users ``NS:forgotten`` (user ->
when); the arrival counter ``NS:seq``. An append is one ``MULTI``/``EXEC`` transaction (all events or none).

Durability is the server's: Redis acknowledges a write once it is in memory and, with the
append-only file on (``appendonly yes``), written to it. ``appendfsync always`` fsyncs before
answering (nothing acknowledged is lost, slowest); ``appendfsync everysec`` (Redis's default once
``appendonly`` is on) fsyncs once a second: a killed ``redis-server`` loses nothing acknowledged, an
operating-system crash or power cut loses up to about the last second (two in the worst case).
Without the append-only file (Debian's and Redis's default) only the periodic RDB snapshots persist:
a crash loses everything since the last one (minutes). :class:`RedisStore` logs a warning when it
finds ``appendonly no``. ``docs/how-to/live-histories.md`` has the settings.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pandas as pd

from attnrec.data.schema import DataError
from attnrec.store.contract import DEFAULT_RETENTION, StoreBackend, export_frame, unavailable_on
from attnrec.store.event_records import Event, Recent, SignalValues, StoredRow

if TYPE_CHECKING:
    pass

log = logging.getLogger("attnrec.store")
SEQ_DIGITS = 20
SEP = "\x1f"  # between a member's fields: IDs and event names never contain control characters
_USERS_PER_PIPELINE = 500


def _member(seq: int, e: Event) -> str:
    rating = "" if e.rating is None else repr(e.rating)
    signals = json.dumps(dict(e.signals), sort_keys=True, allow_nan=False) if e.signals else ""
    return f"{seq:0{SEQ_DIGITS}d}{SEP}{e.item}{SEP}{e.event or ''}{SEP}{rating}{SEP}{signals}"


def _row(member: str, score: float) -> StoredRow:
    """``(item, timestamp, event, rating, signals)`` of a stored member."""
    _, item, event, rating, *signals = member.split(SEP)  # no signals field: stored before they were kept
    values: SignalValues = json.loads(signals[0]) if signals and signals[0] else {}
    return item, int(score), event or None, float(rating) if rating else None, values


def _arrival(member: str) -> int:
    """The arrival number a stored member starts with."""
    return int(member[:SEQ_DIGITS])


class RedisStore(StoreBackend):
    """A :class:`~attnrec.store.contract.HistoryStore` on the Redis server at ``url`` (see the module doc)."""

    def __init__(
        self,
        url: str,
        *,
        retention: int = DEFAULT_RETENTION,
        namespace: str = "attnrec",
        timeout_s: float = 5.0,
    ) -> None:
        try:
            import redis
        except ImportError:
            raise DataError("a Redis store needs redis-py: pip install 'attnrec[redis]'") from None
        self.url, self.namespace = url, namespace
        super().__init__(retention)
        self._errors: tuple[type[Exception], ...] = (redis.exceptions.RedisError,)
        try:
            self._db: Any = redis.Redis.from_url(
                url, decode_responses=True, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
            )
        except ValueError as e:
            raise DataError(f"{self._public_url()}: not a Redis URL ({e})") from None
        with self._talking():
            self._db.ping()
        self._warn_without_aof()

    def __repr__(self) -> str:
        return f"RedisStore({self._public_url()!r}, retention={self.retention}, namespace={self.namespace!r})"

    def _public_url(self) -> str:
        """The URL without a password (it may be in it)."""
        head, sep, tail = self.url.rpartition("@")
        return f"{self.url.split('://')[0]}://***@{tail}" if sep else self.url

    def _talking(self) -> AbstractContextManager[None]:
        return unavailable_on(
            self._errors, lambda e: f"Redis at {self._public_url()}: {type(e).__name__}: {e}"
        )

    def _warn_without_aof(self) -> None:
        try:
            aof = self._db.config_get("appendonly").get("appendonly")
            fsync = self._db.config_get("appendfsync").get("appendfsync")
        except self._errors:  # managed servers may refuse CONFIG: their persistence is theirs to tell
            return
        if aof == "no":
            log.warning(
                "Redis at %s runs without the append-only file (appendonly no): acknowledged events are lost "
                "on a crash back to the last snapshot; set appendonly yes (appendfsync everysec or always)",
                self._public_url(),
            )
        elif fsync == "no":
            log.warning(
                "Redis at %s: appendfsync no leaves fsync to the OS (about 30 s of events at risk)",
                self._public_url(),
            )

    def _key(self, user: str) -> str:
        return f"{self.namespace}:e:{user}"

    # -- the contract ----------------------------------------------------------------------------
    def _append(self, events: Sequence[Event]) -> int:
        with self._talking():
            last = int(self._db.incrby(f"{self.namespace}:seq", len(events)))
            first = last - len(events) + 1
            per_user: dict[str, dict[str, int]] = {}
            for seq, e in enumerate(events, first):
                per_user.setdefault(e.user, {})[_member(seq, e)] = e.timestamp
            pipe = self._db.pipeline(transaction=True)
            for user, members in per_user.items():
                pipe.zadd(self._key(user), members)
                pipe.zremrangebyrank(self._key(user), 0, -(self.retention + 1))
            pipe.sadd(f"{self.namespace}:users", *per_user)
            pipe.execute()
        return len(events)

    def _recent(self, users: list[str], limit: int) -> dict[str, Recent]:
        with self._talking():
            pipe = self._db.pipeline(transaction=True)  # one snapshot for every user of the batch
            for u in users:
                pipe.zrange(self._key(u), -limit, -1, withscores=True) if limit else pipe.exists(self._key(u))
            pipe.hmget(f"{self.namespace}:forgotten", users)
            *ranges, gone = pipe.execute()
        return {
            u: Recent.from_rows([_row(m, s) for m, s in (r if limit else [])], g is not None)
            for u, r, g in zip(users, ranges, gone, strict=True)
        }

    def forget(self, user: str) -> int:
        user = str(user)
        with self._talking():
            pipe = self._db.pipeline(transaction=True)
            pipe.zcard(self._key(user))
            pipe.delete(self._key(user))
            pipe.srem(f"{self.namespace}:users", user)
            pipe.hset(f"{self.namespace}:forgotten", user, int(time.time()))
            deleted, *_ = pipe.execute()
        return int(deleted)

    def _users(self) -> list[str]:
        with self._talking():
            return sorted(self._db.sscan_iter(f"{self.namespace}:users", count=1000))

    def export(self, until: int | None = None) -> pd.DataFrame:
        users = self._users()
        rows: list[tuple[str, *StoredRow]] = []
        for lo in range(0, len(users), _USERS_PER_PIPELINE):
            part = users[lo : lo + _USERS_PER_PIPELINE]
            with self._talking():
                pipe = self._db.pipeline(transaction=False)
                for u in part:
                    pipe.zrange(self._key(u), 0, -1, withscores=True)
                found = pipe.execute()
            for u, members in zip(part, found, strict=True):
                rows += [(u, *_row(m, s)) for m, s in members if until is None or _arrival(m) <= until]
        return export_frame(rows)

    def watermark(self) -> int:
        with self._talking():
            return int(self._db.get(f"{self.namespace}:seq") or 0)

    def trim(self, until: int) -> int:
        users, deleted = self._users(), 0
        for lo in range(0, len(users), _USERS_PER_PIPELINE):
            part = users[lo : lo + _USERS_PER_PIPELINE]
            with self._talking():
                pipe = self._db.pipeline(transaction=False)
                for u in part:
                    pipe.zrange(self._key(u), 0, -1)
                found = pipe.execute()
                pipe = self._db.pipeline(transaction=True)
                for u, members in zip(part, found, strict=True):
                    old = [m for m in members if _arrival(m) <= until]
                    if old:
                        pipe.zrem(self._key(u), *old)
                        deleted += len(old)
                pipe.execute()
        return deleted

    def forgotten(self) -> list[str]:
        with self._talking():
            return sorted(self._db.hkeys(f"{self.namespace}:forgotten"))

    def clear_forgotten(self, users: Sequence[str], before: int) -> int:
        key, users = f"{self.namespace}:forgotten", [str(u) for u in users]
        if not users:
            return 0
        with self._talking():
            marks = self._db.hmget(key, users)
            old = [u for u, at in zip(users, marks, strict=True) if at is not None and int(at) < before]
            return int(self._db.hdel(key, *old)) if old else 0

    def count(self) -> int:
        users = self._users()
        with self._talking():
            pipe = self._db.pipeline(transaction=False)
            for u in users:
                pipe.zcard(self._key(u))
            return int(sum(pipe.execute())) if users else 0

    def close(self) -> None:
        self._db.close()


__all__ = ["SEQ_DIGITS", "RedisStore"]
