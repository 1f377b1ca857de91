"""JSON-lines logs: a generic reader by key mapping, and the Amazon, Steam and OTTO dumps.

Lines that are not JSON but Python dict literals (older Amazon and Steam dumps) are read with
:func:`ast.literal_eval`, which only accepts literals (never ``eval``).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from attnrec.data.build import from_columns
from attnrec.data.files import iter_lines
from attnrec.data.readers.columns import REQUIRED_ROLES
from attnrec.data.readers.fields import file_source, number, seconds
from attnrec.data.schema import DataError, Interactions


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


def read_json_lines(
    path: str | Path,
    keys: dict[str, str],
    *,
    format: str = "json-lines",
    name: str | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
) -> Interactions:
    """One JSON object per line; ``keys`` maps roles (user, item, rating, timestamp, event) to keys.

    ``user`` and ``item`` are required on every line; an optional role present on the first line
    must be on every line. Timestamps may be numbers or dates (``2017-12-17``).
    """
    for role in REQUIRED_ROLES:
        if role not in keys:
            raise DataError(f"read_json_lines: keys must name the {role!r} key")
    ids: dict[str, list[object]] = {role: [] for role in keys}
    times: list[float] = []
    ratings: list[float] = []
    optional: set[str] | None = None
    for n, line in iter_lines(path):
        rec = parse_record(line, path, n)
        if optional is None:  # roles other than user/item are used when the first record has them
            optional = {r for r in keys if r not in REQUIRED_ROLES and keys[r] in rec}
        for role in (*REQUIRED_ROLES, *sorted(optional)):
            key = keys[role]
            value = rec.get(key)
            if value is None or value == "":
                raise DataError(
                    f"{path}:{n}: missing {key!r} ({role}); keys on this line: {sorted(rec)[:12]}"
                )
            if role == "timestamp":
                times.append(seconds(value, path, n))
            elif role == "rating":
                ratings.append(number(str(value), path, n, "rating"))
            else:
                ids[role].append(value)
    if optional is None:
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
    )


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
    ``ts`` (milliseconds) the time, converted to seconds.
    """
    users: list[str] = []
    items: list[str] = []
    times: list[float] = []
    events: list[str] = []
    for n, line in iter_lines(path):
        rec = parse_record(line, path, n)
        session_events = rec.get("events")
        if "session" not in rec or not isinstance(session_events, list):
            raise DataError(f"{path}:{n}: expected {{'session': ..., 'events': [...]}}")
        for ev in session_events:
            if not isinstance(ev, dict) or "aid" not in ev or "ts" not in ev:
                raise DataError(f"{path}:{n}: every event needs 'aid' and 'ts', got {str(ev)[:80]}")
            users.append(str(rec["session"]))
            items.append(str(ev["aid"]))
            times.append(number(str(ev["ts"]), path, n, "ts") / 1000.0)
            events.append(str(ev.get("type", "")))
    if not users:
        raise DataError(f"{path}: the file is empty (no interactions)")
    return from_columns(
        users, items, times, events=events, source=file_source(path, "otto-jsonl", name), k_core=k_core
    )
