"""JSON-lines logs: a generic reader by key mapping, one that finds the keys as the table readers find
columns, and the Amazon, Steam and OTTO dumps.

Lines that are not JSON but Python dict literals (older Amazon and Steam dumps) are read with
:func:`ast.literal_eval`, which only accepts literals (never ``eval``). Every reader also reads the
declared signals (:mod:`attnrec.data.signals`) its records carry, as the table readers do: a signal's key
is the one the caller maps, else the first of its aliases among the first record's keys, and its values
pass the same boundary (:func:`attnrec.data.build.checked_signal`).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnrec.data.boundary import Origin
from attnrec.data.build import checked_signal, from_columns
from attnrec.data.files import iter_lines
from attnrec.data.readers.columns import REQUIRED_ROLES, resolve_columns
from attnrec.data.readers.fields import file_source, number, seconds
from attnrec.data.schema import DataError, Interactions
from attnrec.data.signals import declared, find_signal


def parse_record(line: str, path: str | Path, n: int) -> dict[str, object]:
    """Line ``n`` of ``path`` as an object: JSON, else a Python dict literal, else a :class:`DataError`."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        if not line.startswith("{"):
            raise DataError(f"{path}:{n}: not a JSON object ({e.msg})") from None
        try:  # older dumps: Python dict literals, parsed without evaluating any code
            rec = ast.literal_eval(line)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise DataError(f"{path}:{n}: neither JSON nor a Python dict literal ({e.msg})") from None
    if not isinstance(rec, dict):
        raise DataError(f"{path}:{n}: expected an object ({{...}}), got {type(rec).__name__}")
    return rec


def _missing(path: str | Path, n: int, key: str, role: str, rec: Mapping[str, object]) -> DataError:
    return DataError(f"{path}:{n}: missing {key!r} ({role}); keys on this line: {sorted(rec)[:12]}")


def _present(value: object) -> bool:
    return value is not None and value != ""


@dataclass
class SignalKeys:
    """The declared signals a JSON-lines log carries: each one's key and its values, record by record.

    A signal's key is the one ``mapped`` names for it, else the first of its aliases among the keys of
    the first record (case-insensitive); a signal the first record lacks is not read, and one it has must
    be on every record.
    """

    path: str | Path
    keys: dict[str, str]
    values: dict[str, list[object]] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)  # the file line of each record read

    @classmethod
    def of(cls, first: Mapping[str, object], mapped: Mapping[str, str], path: str | Path) -> SignalKeys:
        lower = {str(k).strip().lower(): k for k in first}
        keys: dict[str, str] = {}
        for signal in declared():
            if signal.name in mapped:
                found: str | None = mapped[signal.name] if mapped[signal.name] in first else None
            else:
                found = next((lower[a] for a in signal.aliases if a in lower), None)
            if found is not None:
                keys[signal.name] = found
        return cls(path, keys, {name: [] for name in keys})

    def add(self, rec: Mapping[str, object], n: int) -> None:
        """Read the signals of record ``rec`` (on line ``n``); a missing value, or a list or object where
        a value belongs, is a :class:`DataError`. Nothing is kept when the log carries no signal."""
        if not self.keys:
            return
        for name, key in self.keys.items():
            value = rec.get(key)
            if not _present(value):
                raise _missing(self.path, n, key, name, rec)
            if isinstance(value, (list, dict)):
                raise DataError(f"{self.path}:{n}: {name} {str(value)[:40]} is not a value (key {key!r})")
            self.values[name].append(value)
        self.lines.append(n)

    def columns(self) -> dict[str, np.ndarray]:
        """Each signal's values through the boundary; a bad one is a :class:`DataError` naming its line."""
        origin = Origin(str(self.path), lambda row: f"line {self.lines[row]}")
        return {name: checked_signal(name, self.values[name], self.keys[name], origin) for name in self.keys}


def read_json_lines(
    path: str | Path,
    keys: dict[str, str],
    *,
    format: str = "json-lines",
    name: str | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
) -> Interactions:
    """One JSON object per line; ``keys`` maps roles (user, item, rating, timestamp, event and any
    declared signal) to keys.

    ``user`` and ``item`` are required on every line; an optional role present on the first line
    must be on every line. Timestamps may be numbers or dates (``2017-12-17``). A declared signal
    (:mod:`attnrec.data.signals`) that ``keys`` does not map is read from the first of its aliases
    among the first line's keys (:class:`SignalKeys`).
    """
    for role in REQUIRED_ROLES:
        if role not in keys:
            raise DataError(f"read_json_lines: keys must name the {role!r} key")
    unknown = sorted(r for r in keys if r not in REQUIRED_ROLES and find_signal(r) is None)
    if unknown:
        raise DataError(f"read_json_lines: {unknown[0]!r} is neither user, item nor a declared signal")
    ids: dict[str, list[object]] = {role: [] for role in keys}
    times: list[float] = []
    ratings: list[float] = []
    optional: set[str] | None = None
    carried: SignalKeys | None = None
    for n, line in iter_lines(path):
        rec = parse_record(line, path, n)
        if optional is None:  # roles other than user/item are used when the first record has them
            carried = SignalKeys.of(rec, keys, path)
            read = set(REQUIRED_ROLES) | set(carried.keys)
            optional = {r for r in keys if r not in read and keys[r] in rec}
        assert carried is not None
        for role in (*REQUIRED_ROLES, *sorted(optional)):
            key = keys[role]
            value = rec.get(key)
            if not _present(value):
                raise _missing(path, n, key, role, rec)
            if role == "timestamp":
                times.append(seconds(value, path, n))
            elif role == "rating":
                ratings.append(number(str(value), path, n, "rating"))
            else:
                ids[role].append(value)
        carried.add(rec, n)
    if optional is None or carried is None:
        raise DataError(f"{path}: the file is empty (no interactions)")
    return from_columns(
        ids["user"],
        ids["item"],
        times if "timestamp" in optional else None,
        ratings if "rating" in optional else None,
        ids["event"] if "event" in optional else None,
        source=file_source(path, format, name),
        min_rating=min_rating,
        k_core=k_core,
        signals=carried.columns(),
    )


def read_json_table(
    path: str | Path,
    columns: Mapping[str, str | int] | None = None,
    *,
    name: str | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
) -> Interactions:
    """JSON lines of flat records, one event each (the ``json-lines`` format): each role's key is found in
    the first record's keys by name, as :func:`~attnrec.data.readers.table.read_table` finds columns
    (``user_id``, ``item_id``, ``timestamp``, ``rating``, ``event_type``, a declared signal's aliases ...),
    or mapped with ``columns`` (a key, or its 0-based position in the first record); then read by
    :func:`read_json_lines`."""
    for n, line in iter_lines(path):
        roles = resolve_columns(list(parse_record(line, path, n)), columns, path)
        keys = {role: str(key) for role, key in roles.items()}
        return read_json_lines(
            path, keys, format="json-lines", name=name, min_rating=min_rating, k_core=k_core
        )
    raise DataError(f"{path}: the file is empty (no interactions)")


def read_amazon_json(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """Amazon review dumps (2014/2018): JSON lines (or Python dict lines) with ``reviewerID``,
    ``asin``, ``overall`` (the 1-5 rating) and ``unixReviewTime``."""
    keys = {"user": "reviewerID", "item": "asin", "rating": "overall", "timestamp": "unixReviewTime"}
    return read_json_lines(path, keys, format="amazon-json", name=name, min_rating=min_rating, k_core=k_core)


def read_steam_json(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """Steam reviews (``steam_reviews.json.gz`` of the SASRec paper): Python dict lines with
    ``username``, ``product_id`` and ``date`` (``YYYY-MM-DD``); there is no rating."""
    keys = {"user": "username", "item": "product_id", "timestamp": "date"}
    return read_json_lines(path, keys, format="steam-json", name=name, min_rating=min_rating, k_core=k_core)


def read_otto_jsonl(path: str | Path, *, name: str | None = None, k_core: int = 0) -> Interactions:
    """OTTO sessions: ``{"session": s, "events": [{"aid", "ts" (ms), "type"}, ...]}`` per line.

    Sessions are the users, ``aid`` the items, ``type`` (clicks/carts/orders) the event and
    ``ts`` (milliseconds) the time, converted to seconds. A declared signal is read from the events'
    keys (its aliases among those of the first event).
    """
    users: list[str] = []
    items: list[str] = []
    times: list[float] = []
    events: list[str] = []
    carried: SignalKeys | None = None
    for n, line in iter_lines(path):
        rec = parse_record(line, path, n)
        session_events = rec.get("events")
        if "session" not in rec or not isinstance(session_events, list):
            raise DataError(f"{path}:{n}: expected {{'session': ..., 'events': [...]}}")
        for ev in session_events:
            if not isinstance(ev, dict) or "aid" not in ev or "ts" not in ev:
                raise DataError(f"{path}:{n}: every event needs 'aid' and 'ts', got {str(ev)[:80]}")
            if carried is None:
                carried = SignalKeys.of(ev, {}, path)
            carried.add(ev, n)
            users.append(str(rec["session"]))
            items.append(str(ev["aid"]))
            times.append(number(str(ev["ts"]), path, n, "ts") / 1000.0)
            events.append(str(ev.get("type", "")))
    if not users or carried is None:
        raise DataError(f"{path}: the file is empty (no interactions)")
    return from_columns(
        users,
        items,
        times,
        events=events,
        source=file_source(path, "otto-jsonl", name),
        k_core=k_core,
        signals=carried.columns(),
    )
