"""Readers for interaction logs. Every reader is a pure function of a path.

Gzip is detected from the file's magic bytes. Errors name the file and the line.
"""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnrec.data.build import from_columns
from attnrec.data.schema import DataError, DataSource, Interactions


def open_text(path: str | Path, encoding: str = "utf-8") -> io.TextIOBase:
    """Open a text file, transparently decompressing gzip."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a file")
    with open(p, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding=encoding, errors="strict")
    return open(p, encoding=encoding)


def content_sha256(path: str | Path) -> str:
    """sha256 of the (decompressed) content, so ``x.txt`` and ``x.txt.gz`` hash alike."""
    p = Path(path)
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    with opener(p, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """``(line_number, stripped_line)`` for non-empty lines; decoding errors name the line.

    Lines are decoded one by one, so an undecodable byte is reported on its own line; a UTF-8
    byte-order mark at the start is dropped.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a file")
    n = 0
    opener: Any = gzip.open if is_gzip(p) else open
    try:
        with opener(p, "rb") as fh:
            for n, raw in enumerate(fh, start=1):  # noqa: B007
                try:
                    s = raw.decode(encoding).strip()
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}:{n}: not valid {encoding} text ({e.reason})") from e
                if n == 1 and s.startswith("\ufeff"):
                    s = s[1:].strip()
                if s:
                    yield n, s
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot be read after line {n} ({e})") from e


def read_pairs(path: str | Path, name: str | None = None, **build: object) -> Interactions:
    """``user item`` pairs, one per line (the SASRec/BERT4Rec files); file order is chronology."""
    users: list[str] | np.ndarray
    items: list[str] | np.ndarray
    fast = _fast_columns(path, None, 2)
    if fast is not None:
        users, items = fast[0], fast[1]
    else:  # the exact, line-by-line parser (names the bad line)
        users, items = [], []
        for n, line in iter_lines(path):
            parts = line.split()
            if len(parts) != 2:
                raise DataError(f"{path}:{n}: expected 'user item', got {line[:80]!r}")
            users.append(parts[0])
            items.append(parts[1])
    src = DataSource(name or Path(path).name, str(path), "pairs", content_sha256(path))
    return from_columns(users, items, source=src, **build)  # type: ignore[arg-type]


def _fast_columns(
    path: str | Path, sep: str | None, n_fields: int, encoding: str = "utf-8"
) -> list[np.ndarray] | None:
    """Columns of a headerless delimited file read by pandas' C parser, or ``None`` when the file
    is not perfectly regular (then the caller's line-by-line parser finds and names the bad line).

    ``sep=None`` splits on whitespace; a multi-character ``sep`` (``::``) is rewritten to a tab.
    """
    p = Path(path)
    if not p.is_file():
        return None
    try:
        if sep is not None and len(sep) > 1:
            with open_text(p, encoding) as fh:
                text = fh.read()
            if "\t" in text:
                return None
            source: Any = io.StringIO(text.replace(sep, "\t"))
            kw: dict[str, Any] = {"sep": "\t"}
        else:
            source = p
            kw = {"sep": r"\s+" if sep is None else sep, "compression": "gzip" if is_gzip(p) else None,
                  "encoding": encoding}
        df = pd.read_csv(source, header=None, dtype=object, keep_default_na=False, na_filter=False,
                         skip_blank_lines=True, engine="c", **kw)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OSError):
        return None
    if df.shape[1] != n_fields or len(df) == 0:
        return None
    cols = [df[c].to_numpy(dtype=object) for c in df.columns]
    if any((c == "").any() for c in cols):
        return None
    return cols


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------

#: Roles of an interaction table and the column names recognised for each when not mapped.
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "user": ("user", "user_id", "userid", "uid", "reviewerid", "session", "session_id", "visitorid",
             "customer_id", "username"),
    "item": ("item", "item_id", "itemid", "iid", "movieid", "movie_id", "asin", "aid", "product_id",
             "article_id", "productid"),
    "timestamp": ("timestamp", "time", "ts", "datetime", "date", "unixreviewtime", "event_time", "t_dat"),
    "rating": ("rating", "overall", "score", "stars"),
    "event": ("event", "event_type", "type", "action", "behavior", "behaviour"),
}  # fmt: skip
_REQUIRED = ("user", "item")


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes."""
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def base_name(path: str | Path) -> str:
    """File name in lower case without a trailing ``.gz`` (``ratings.csv.gz`` -> ``ratings.csv``)."""
    name = Path(path).name.lower()
    return name[:-3] if name.endswith(".gz") else name


def require_nonempty(path: str | Path, encoding: str = "utf-8") -> None:
    """Raise a :class:`DataError` when the file is missing or holds no non-blank line."""
    for _ in iter_lines(path, encoding):
        return
    raise DataError(f"{path}: the file is empty (no interactions)")


def _source(path: str | Path, fmt: str, name: str | None) -> DataSource:
    return DataSource(name or Path(path).name, str(path), fmt, content_sha256(path))


def _number(text: str, path: str | Path, line: int, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{path}:{line}: {what} {text[:40]!r} is not a number") from None
    if value != value:  # NaN
        raise DataError(f"{path}:{line}: {what} is NaN")
    return value


def _seconds(value: object, path: str | Path, line: int) -> float:
    """A timestamp as unix seconds: numbers pass through, ISO dates and 'Mon DD, YYYY' are parsed."""
    if isinstance(value, bool):
        raise DataError(f"{path}:{line}: timestamp {value!r} is not a time")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            stamp = datetime.strptime(text, "%B %d, %Y")  # Steam's "December 17, 2017" style
        except ValueError:
            raise DataError(f"{path}:{line}: timestamp {text[:40]!r} is neither a number nor a date") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def _split_lines(
    path: str | Path, sep: str | None, n_fields: int, expected: str, encoding: str = "utf-8"
) -> Iterator[tuple[int, list[str]]]:
    """Lines split on ``sep`` (whitespace when None) with exactly ``n_fields`` fields, else an error."""
    empty = True
    for n, line in iter_lines(path, encoding):
        empty = False
        parts = line.split(sep)
        if len(parts) != n_fields or any(not p.strip() for p in parts):
            raise DataError(f"{path}:{n}: expected '{expected}', got {line[:80]!r}")
        yield n, parts
    if empty:
        raise DataError(f"{path}: the file is empty (no interactions)")


# --------------------------------------------------------------------------------------------
# Research formats
# --------------------------------------------------------------------------------------------


def read_user_lines(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """One line per user: ``user item item ...``; the items are in chronological order.

    A user may appear on several lines; the lines are concatenated in file order. A line with a
    user and no item is an error naming the line.
    """
    if min_rating is not None:
        raise DataError(f"{path}: min_rating needs ratings, and a user-lines file has none")
    users: list[str] = []
    items: list[str] = []
    for n, line in iter_lines(path):
        parts = line.split()
        if len(parts) < 2:
            raise DataError(f"{path}:{n}: expected 'user item item ...', got only {line[:80]!r}")
        users.extend([parts[0]] * (len(parts) - 1))
        items.extend(parts[1:])
    if not users:
        raise DataError(f"{path}: the file is empty (no interactions)")
    return from_columns(users, items, source=_source(path, "user-lines", name), k_core=k_core)


def read_movielens_dat(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """MovieLens-1M/10M ``ratings.dat``: ``user::item::rating::timestamp`` per line."""
    return _read_rating_lines(path, "::", "user::item::rating::timestamp", "movielens-dat", name,
                              min_rating, k_core)  # fmt: skip


def read_ml100k(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """MovieLens-100k ``u.data``: ``user<TAB>item<TAB>rating<TAB>timestamp`` per line (unsorted)."""
    return _read_rating_lines(path, "\t", "user<TAB>item<TAB>rating<TAB>timestamp", "ml100k", name,
                              min_rating, k_core)  # fmt: skip


def _read_rating_lines(
    path: str | Path, sep: str, expected: str, fmt: str, name: str | None,
    min_rating: float | None, k_core: int,
) -> Interactions:  # fmt: skip
    fast = _fast_columns(path, sep, 4, encoding="latin-1")
    if fast is not None:
        r = pd.to_numeric(pd.Series(fast[2]), errors="coerce").to_numpy(dtype=np.float64)
        t = pd.to_numeric(pd.Series(fast[3]), errors="coerce").to_numpy(dtype=np.float64)
        if not (np.isnan(r).any() or np.isnan(t).any()):
            return from_columns(np.char.strip(fast[0].astype(str)), np.char.strip(fast[1].astype(str)), t, r,
                                source=_source(path, fmt, name), min_rating=min_rating, k_core=k_core)  # fmt: skip
    users: list[str] = []
    items: list[str] = []
    ratings: list[float] = []
    times: list[float] = []
    for n, (u, i, rs, ts) in _split_lines(path, sep, 4, expected, encoding="latin-1"):
        users.append(u.strip())
        items.append(i.strip())
        ratings.append(_number(rs, path, n, "rating"))
        times.append(_number(ts, path, n, "timestamp"))
    return from_columns(users, items, times, ratings, source=_source(path, fmt, name),
                        min_rating=min_rating, k_core=k_core)  # fmt: skip


def read_ml20m(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """MovieLens-20M/25M/latest ``ratings.csv`` (header ``userId,movieId,rating,timestamp``)."""
    return read_table(
        path, {"user": "userId", "item": "movieId", "rating": "rating", "timestamp": "timestamp"},
        sep=",", name=name, min_rating=min_rating, k_core=k_core, format="ml20m",
    )  # fmt: skip


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

    Lines that are not JSON but Python dict literals (older Amazon and Steam dumps) are read
    with :func:`ast.literal_eval`, which only accepts literals (never ``eval``). ``user`` and
    ``item`` are required on every line; an optional role present on the first line must be on
    every line. Timestamps may be numbers or dates (``2017-12-17``).
    """
    for role in _REQUIRED:
        if role not in keys:
            raise DataError(f"read_json_lines: keys must name the {role!r} key")
    cols: dict[str, list[Any]] = {role: [] for role in keys}
    optional: set[str] | None = None
    for n, line in iter_lines(path):
        rec = _parse_record(line, path, n)
        if optional is None:  # roles other than user/item are used when the first record has them
            optional = {r for r in keys if r not in _REQUIRED and keys[r] in rec}
        for role in (*_REQUIRED, *sorted(optional)):
            key = keys[role]
            if key not in rec or rec[key] is None or rec[key] == "":
                raise DataError(f"{path}:{n}: missing {key!r} ({role}); keys on this line: {sorted(rec)[:12]}")
            value = rec[key]
            if role == "timestamp":
                value = _seconds(value, path, n)
            elif role == "rating":
                value = _number(str(value), path, n, "rating")
            cols[role].append(value)
    if optional is None:
        raise DataError(f"{path}: the file is empty (no interactions)")
    return from_columns(
        cols["user"], cols["item"],
        cols["timestamp"] if "timestamp" in optional else None,
        cols["rating"] if "rating" in optional else None,
        cols["event"] if "event" in optional else None,
        source=_source(path, format, name), min_rating=min_rating, k_core=k_core,
    )  # fmt: skip


def _parse_record(line: str, path: str | Path, n: int) -> dict[str, Any]:
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
        rec = _parse_record(line, path, n)
        if "session" not in rec or not isinstance(rec.get("events"), list):
            raise DataError(f"{path}:{n}: expected {{'session': ..., 'events': [...]}}")
        for ev in rec["events"]:
            if not isinstance(ev, dict) or "aid" not in ev or "ts" not in ev:
                raise DataError(f"{path}:{n}: every event needs 'aid' and 'ts', got {str(ev)[:80]}")
            users.append(str(rec["session"]))
            items.append(str(ev["aid"]))
            times.append(_number(str(ev["ts"]), path, n, "ts") / 1000.0)
            events.append(str(ev.get("type", "")))
    if not users:
        raise DataError(f"{path}: the file is empty (no interactions)")
    return from_columns(users, items, times, events=events, source=_source(path, "otto-jsonl", name),
                        k_core=k_core)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Tables: CSV / TSV / Parquet
# --------------------------------------------------------------------------------------------


def table_format(path: str | Path) -> str:
    """``"parquet"``, ``"tsv"`` or ``"csv"`` from the extension (``.gz`` ignored); ``"table"`` otherwise."""
    name = base_name(path)
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".tsv", ".tab")):
        return "tsv"
    if name.endswith(".csv"):
        return "csv"
    return "table"


def _sniff_sep(path: str | Path) -> str:
    for _, line in iter_lines(path):
        for sep in ("\t", ",", ";", "|"):
            if sep in line:
                return sep
        return r"\s+"
    raise DataError(f"{path}: the file is empty (no interactions)")


def resolve_columns(
    available: Sequence[object], columns: Mapping[str, str | int] | None, path: str | Path
) -> dict[str, object]:
    """Map roles to actual column labels: explicit ``columns`` first, then the known aliases.

    A missing required role (user, item) or an explicitly mapped column that does not exist is
    a :class:`DataError` naming the column and the available ones.
    """
    labels = list(available)
    lower = {str(c).strip().lower(): c for c in labels}
    out: dict[str, object] = {}
    columns = dict(columns or {})
    unknown = set(columns) - set(COLUMN_ALIASES)
    if unknown:
        raise DataError(f"unknown column roles {sorted(unknown)}; use {list(COLUMN_ALIASES)}")
    shown = ", ".join(repr(str(c)) for c in labels[:30])
    for role, aliases in COLUMN_ALIASES.items():
        want = columns.get(role)
        if want is not None:
            if isinstance(want, int) and not isinstance(want, bool):
                if not 0 <= want < len(labels):
                    raise DataError(f"{path}: no column number {want} for {role}; the file has {len(labels)} columns")
                out[role] = labels[want]
            elif want in labels:
                out[role] = want
            elif str(want).strip().lower() in lower:
                out[role] = lower[str(want).strip().lower()]
            else:
                raise DataError(f"{path}: missing column {want!r} (mapped as {role}); available columns: {shown}")
            continue
        for alias in aliases:
            if alias in lower:
                out[role] = lower[alias]
                break
        else:
            if role in _REQUIRED:
                raise DataError(
                    f"{path}: missing column for {role} (looked for {', '.join(aliases[:6])}, ...); "
                    f"available columns: {shown}; map it with columns={{'{role}': '<column name>'}}"
                )
    return out


def read_table(
    path: str | Path,
    columns: Mapping[str, str | int] | None = None,
    sep: str | None = None,
    *,
    header: bool = True,
    name: str | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
    format: str | None = None,
) -> Interactions:
    """Read a CSV, TSV or Parquet interaction table (gzip-compressed text is fine).

    Parameters
    ----------
    path : str or Path
        The file. Parquet is recognised by its ``.parquet``/``.pq`` extension; text files use
        ``sep`` or, when it is None, ``,`` for ``.csv``, tab for ``.tsv`` and a sniffed
        separator (tab, comma, semicolon, pipe, whitespace) otherwise.
    columns : mapping, optional
        ``{"user": ..., "item": ..., "timestamp": ..., "rating": ..., "event": ...}``: the file's
        column name (or 0-based position) for each role. Unmapped roles are found by common
        names (``user_id``, ``userId``, ``movieId``, ``asin``, ``timestamp``, ``rating`` ...);
        user and item are required, the others optional.
    header : bool
        Whether a text file starts with a header line; without one, map roles by position
        (default ``user`` = 0, ``item`` = 1).
    min_rating, k_core
        Passed to :func:`attnrec.data.build.from_columns`.

    Timestamps may be numbers (unix time) or date strings. Missing or malformed values give a
    :class:`DataError` naming the file and line.
    """
    p = Path(path)
    require_nonempty(p) if table_format(p) != "parquet" else _require_file(p)
    fmt = table_format(p)
    if fmt == "parquet":
        df = _read_parquet(p)
        roles = resolve_columns(list(df.columns), columns, p)
        line_of: Callable[[int], str] = lambda row: f"row {row + 1}"  # noqa: E731
    else:
        if sep is None:
            sep = {"csv": ",", "tsv": "\t"}.get(fmt) or _sniff_sep(p)
        if not header:
            columns = dict(columns or {"user": 0, "item": 1})
            bad = {r: c for r, c in columns.items() if not isinstance(c, int)}
            if bad:
                raise DataError(f"{p}: without a header, map columns by position (0, 1, ...), not {bad}")
        roles, df = _read_text_table(p, columns, sep, header)
        first = 2 if header else 1
        line_of = lambda row: f"line {_line_of_row(p, row, first)}"  # noqa: E731
    fmt_name = format or (fmt if fmt != "table" else "csv")
    cols: dict[str, np.ndarray] = {}
    for role, label in roles.items():
        values = df[label]
        missing = values.isna().to_numpy()
        if role in ("user", "item", "event"):
            ids = _id_strings(values) if not missing.any() else None
            if ids is not None:
                missing = ids == ""
            if missing.any():
                row = int(np.flatnonzero(missing)[0])
                raise DataError(f"{p}: {line_of(row)}: missing {role} (column {label!r})")
            assert ids is not None
            cols[role] = ids
        elif role == "rating":
            cols[role] = _numeric_column(values, missing, p, label, role, line_of)
        else:
            cols[role] = _time_column(values, missing, p, label, line_of)
    return from_columns(
        cols["user"], cols["item"], cols.get("timestamp"), cols.get("rating"), cols.get("event"),
        source=_source(p, fmt_name, name), min_rating=min_rating, k_core=k_core,
    )  # fmt: skip


def _require_file(p: Path) -> None:
    if not p.exists():
        raise DataError(f"{p}: file not found")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a file")
    if p.stat().st_size == 0:
        raise DataError(f"{p}: the file is empty (no interactions)")


def _read_parquet(p: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(p)
    except Exception as e:  # pyarrow raises several exception types for corrupt files
        raise DataError(f"{p}: cannot be read as Parquet ({e})") from e
    if len(df) == 0:
        raise DataError(f"{p}: the file is empty (no interactions)")
    return df


def _read_text_table(
    p: Path, columns: Mapping[str, str | int] | None, sep: str, header: bool
) -> tuple[dict[str, object], pd.DataFrame]:
    compression = "gzip" if is_gzip(p) else None
    kw: dict[str, Any] = {"sep": sep, "compression": compression, "header": 0 if header else None}
    try:
        head = pd.read_csv(p, nrows=5 if not header else 0, **kw)
    except pd.errors.EmptyDataError:
        raise DataError(f"{p}: the file is empty (no interactions)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{p}: cannot be read as a table ({e})") from e
    roles = resolve_columns(list(head.columns), columns, p)
    ids = [roles[r] for r in ("user", "item", "event") if r in roles]
    try:
        # No usecols: with it pandas silently accepts rows with extra fields.
        df = pd.read_csv(p, dtype={c: object for c in ids}, **kw)
    except pd.errors.ParserError as e:
        raise DataError(_parser_error(p, str(e))) from None
    except UnicodeDecodeError as e:
        raise DataError(f"{p}: not valid utf-8 text ({e.reason})") from None
    except ValueError as e:
        raise DataError(f"{p}: cannot be read as a table ({e})") from e
    if len(df) == 0:
        raise DataError(f"{p}: the file has a header but no rows (no interactions)")
    return roles, df


def _parser_error(p: Path, msg: str) -> str:
    m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", msg)
    if m:
        return f"{p}:{m.group(2)}: expected {m.group(1)} fields, saw {m.group(3)}"
    return f"{p}: malformed table ({msg.strip()})"


def _line_of_row(p: Path, row: int, first: int) -> int:
    """1-based line number of data row ``row`` (0-based), skipping blank lines as pandas does."""
    target = row + first - 1  # 0-based index among non-blank lines
    for k, (n, _) in enumerate(iter_lines(p)):
        if k == target:
            return n
    return row + first


def _id_strings(values: pd.Series) -> np.ndarray:
    """IDs as text; integral floats (from Parquet) lose their ``.0`` so ``42.0`` is ``"42"``."""
    if pd.api.types.is_float_dtype(values.dtype):
        arr = values.to_numpy(dtype=np.float64)
        if np.all(arr == np.round(arr)):
            return arr.astype(np.int64).astype(str).astype(object)
    if pd.api.types.is_integer_dtype(values.dtype):
        return values.to_numpy().astype(str).astype(object)
    return np.array([str(v).strip() for v in values.to_numpy(dtype=object)], dtype=object)


def _numeric_column(
    values: pd.Series, missing: np.ndarray, p: Path, label: object, role: str, line_of: Callable[[int], str]
) -> np.ndarray:
    if missing.any():
        raise DataError(f"{p}: {line_of(int(np.flatnonzero(missing)[0]))}: missing {role} (column {label!r})")
    num = pd.to_numeric(values, errors="coerce")
    bad = num.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(f"{p}: {line_of(row)}: {role} {str(values.iloc[row])[:40]!r} is not a number")
    return num.to_numpy(dtype=np.float64)


def _time_column(
    values: pd.Series, missing: np.ndarray, p: Path, label: object, line_of: Callable[[int], str]
) -> np.ndarray:
    if missing.any():
        raise DataError(f"{p}: {line_of(int(np.flatnonzero(missing)[0]))}: missing timestamp (column {label!r})")
    if pd.api.types.is_datetime64_any_dtype(values.dtype):
        stamps = pd.to_datetime(values, utc=True)
        return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64)
    num = pd.to_numeric(values, errors="coerce")
    bad_num = num.isna().to_numpy()
    if not bad_num.any():
        return num.to_numpy(dtype=np.float64)
    if not bad_num.all():  # a numeric column with a stray value: name it
        row = int(np.flatnonzero(bad_num)[0])
        raise DataError(f"{p}: {line_of(row)}: timestamp {str(values.iloc[row])[:40]!r} is not a number")
    stamps = pd.to_datetime(values.astype(str), utc=True, errors="coerce", format="mixed")
    bad = stamps.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{p}: {line_of(row)}: timestamp {str(values.iloc[row])[:40]!r} is neither a number nor a date"
        )
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64)


# --------------------------------------------------------------------------------------------
# Item titles
# --------------------------------------------------------------------------------------------


def read_movielens_titles(path: str | Path) -> dict[str, str]:
    """MovieLens ``movies.dat`` (``id::title::genres``, latin-1) -> ``{movie_id: title}``."""
    out: dict[str, str] = {}
    for n, line in iter_lines(path, "latin-1"):
        parts = line.split("::")
        if len(parts) < 2 or not parts[0].strip():
            raise DataError(f"{path}:{n}: expected 'id::title::genres', got {line[:80]!r}")
        out[parts[0].strip()] = parts[1].strip()
    return out


def read_ml100k_titles(path: str | Path) -> dict[str, str]:
    """MovieLens-100k ``u.item`` (``id|title|release date|...``, latin-1) -> ``{item_id: title}``."""
    out: dict[str, str] = {}
    for n, line in iter_lines(path, "latin-1"):
        parts = line.split("|")
        if len(parts) < 2 or not parts[0].strip():
            raise DataError(f"{path}:{n}: expected 'id|title|...', got {line[:80]!r}")
        out[parts[0].strip()] = parts[1].strip()
    return out


def read_movies_csv_titles(path: str | Path) -> dict[str, str]:
    """MovieLens-20M ``movies.csv`` (header ``movieId,title,genres``, quoted titles) -> ``{id: title}``."""
    with open_text(path) as fh:
        reader = csv.reader(fh)
        head = next(reader, None)
        if head is None:
            raise DataError(f"{path}: the file is empty")
        lower = [h.strip().lower() for h in head]
        if "title" not in lower:
            raise DataError(f"{path}: missing column 'title'; available columns: {head}")
        id_col = next((lower.index(c) for c in ("movieid", "item", "item_id", "id") if c in lower), 0)
        t_col = lower.index("title")
        out: dict[str, str] = {}
        for row in reader:
            if not row:
                continue
            if len(row) <= max(id_col, t_col):
                raise DataError(f"{path}:{reader.line_num}: expected {len(head)} fields, got {len(row)}")
            out[row[id_col].strip()] = row[t_col].strip()
    return out


def read_steam_titles(path: str | Path) -> dict[str, str]:
    """Steam ``steam_games.json.gz`` (dict lines with ``id`` and ``app_name``/``title``) -> titles."""
    out: dict[str, str] = {}
    for n, line in iter_lines(path):
        rec = _parse_record(line, path, n)
        title = rec.get("app_name") or rec.get("title")
        if "id" in rec and title:
            out[str(rec["id"])] = str(title)
    return out


def read_id_mapping(path: str | Path) -> dict[str, str]:
    """Two IDs a line, ``new_id original_id`` (e.g. SASRec's ``sas_to_original_items.txt``)."""
    out: dict[str, str] = {}
    for n, line in iter_lines(path):
        parts = line.split()
        if len(parts) != 2:
            raise DataError(f"{path}:{n}: expected 'new_id original_id', got {line[:80]!r}")
        out[parts[0]] = parts[1]
    return out


def read_titles(path: str | Path, mapping: str | Path | Mapping[str, str] | None = None) -> dict[str, str]:
    """Item titles from ``movies.dat``, ``u.item``, ``movies.csv``, ``steam_games.json`` or a
    two-column ``item<TAB>title`` file (format from the name, then the content).

    With ``mapping`` (a ``new_id original_id`` file or dict), titles are re-keyed to the new IDs:
    ``{new: titles[original]}``, e.g. for SASRec's remapped ``ml-1m.txt``.
    """
    name = base_name(path)
    if name.endswith(".dat"):
        titles = read_movielens_titles(path)
    elif name == "u.item":
        titles = read_ml100k_titles(path)
    elif name.endswith(".csv"):
        titles = read_movies_csv_titles(path)
    elif name.endswith((".json", ".jsonl")):
        titles = read_steam_titles(path)
    else:
        first = next(iter_lines(path, "latin-1"), (0, ""))[1]
        if "::" in first:
            titles = read_movielens_titles(path)
        elif "|" in first and "\t" not in first:
            titles = read_ml100k_titles(path)
        else:
            titles = {}
            for n, line in iter_lines(path):
                parts = line.split("\t", 1)
                if len(parts) != 2:
                    raise DataError(f"{path}:{n}: expected 'item<TAB>title', got {line[:80]!r}")
                titles[parts[0].strip()] = parts[1].strip()
    if mapping is not None:
        table = read_id_mapping(mapping) if isinstance(mapping, (str, Path)) else dict(mapping)
        titles = map_titles(titles, table)
    return titles


def map_titles(titles: Mapping[str, str], mapping: Mapping[str, str]) -> dict[str, str]:
    """Re-key titles through a ``{new_id: original_id}`` mapping (unmapped IDs are dropped)."""
    return {new: titles[orig] for new, orig in mapping.items() if orig in titles}


def with_titles(data: Interactions, titles: Mapping[str, str] | None) -> Interactions:
    """A copy of ``data`` whose ``item_titles`` are the given titles of its known items (merged
    over any it already has)."""
    if not titles:
        return data
    merged = dict(data.item_titles or {})
    merged.update({k: v for k, v in titles.items() if k in data.items})
    return replace(data, item_titles=merged or None)
