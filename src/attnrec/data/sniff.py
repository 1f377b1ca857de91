"""Format detection: which of :data:`~attnrec.data.formats.FORMATS` an interaction file is in.

The name decides first (``.parquet``, ``.json``, ``u.data``, ``.csv``), then the first 200
non-empty lines: separators, field counts, numeric fields, JSON keys. For whitespace-separated
``user item`` pairs and user lines those lines must agree: a few lines with another field count
or, in a column of integer IDs, a few that are not integers, are an error naming the first of
them (not a silent switch of format), and :func:`check_integer_ids` holds the rest of the file to
the integer columns the head shows. An explicit format (``--format pairs``) reads IDs as text.
"""

from __future__ import annotations

import re
from itertools import islice
from pathlib import Path

from attnrec.data.boundary import reads_as_number
from attnrec.data.files import base_name, iter_lines
from attnrec.data.formats import FORMATS
from attnrec.data.readers.columns import ID_ALIASES, REQUIRED_ROLES
from attnrec.data.readers.jsonlines import parse_record
from attnrec.data.readers.table import table_format
from attnrec.data.readers.taobao import BEHAVIOURS
from attnrec.data.schema import DataError, Interactions

_HEAD_LINES = 200
_AGREE = 0.9  # share of the head that fixes a field count or an integer column; the others disagree
_INTEGER = re.compile(r"^-?[0-9]+$")
TEXT_ID_FORMATS = ("pairs", "user-lines")


def detect_format(path: str | Path) -> str:
    """Guess the format of an interaction file from its name, then from its first lines."""
    p = Path(path)
    name = base_name(p)
    tf = table_format(p)
    if tf == "parquet":
        return "parquet"
    if name.endswith((".json", ".jsonl", ".ndjson")):
        return _json_format(p)
    numbered = list(islice(iter_lines(p, "latin-1"), _HEAD_LINES))
    if not numbered:
        raise DataError(f"{p}: the file is empty (no interactions)")
    lines = [line for _, line in numbered]
    first = lines[0]
    if name == "u.data":
        return "ml100k"
    if "::" in first:
        return "movielens-dat"
    if first.startswith("{"):
        return _json_format(p)
    if tf == "csv":
        return _csv_format(first)
    if tf == "tsv":
        return "tsv"
    fmt = _text_format(p, lines)
    if fmt in TEXT_ID_FORMATS:
        _head_agrees(p, numbered, fmt)
    return fmt


def _csv_format(first: str) -> str:
    """A ``.csv`` file: MovieLens-20M, Amazon "ratings only" or a generic table, by its first line."""
    head = [h.strip().lower() for h in first.split(",")]
    if head[:4] == ["userid", "movieid", "rating", "timestamp"]:
        return "ml20m"
    if len(head) == 4 and reads_as_number(head[2]) and reads_as_number(head[3]):
        return "amazon-ratings-csv"  # headerless user,item,rating,timestamp (Amazon "ratings only")
    if len(head) == 5 and head[3] in BEHAVIOURS and reads_as_number(head[4]):
        return "taobao-csv"  # headerless user,item,category,behavior,timestamp (Taobao UserBehavior)
    return "csv"


def _text_format(p: Path, lines: list[str]) -> str:
    """A file whose name says nothing: pairs, user lines, ``u.data`` layout or a delimited table."""
    first = lines[0]
    tokens = [ln.split() for ln in lines]
    if all(reads_as_number(t) for t in tokens[0]) or not any(c in first for c in ",;\t|"):
        if sum(len(t) == 2 for t in tokens) >= _AGREE * len(tokens):
            return "pairs"  # lines of another field count are reported by _head_agrees
        if "\t" in first and all(_is_ml100k_line(ln) for ln in lines):
            return "ml100k"
        if all(len(t) >= 2 for t in tokens) and not any(c in first for c in ",;|"):
            return "user-lines"
    if "\t" in first:
        return "tsv"
    if "," in first or ";" in first or "|" in first:
        return "csv"
    raise DataError(f"{p}: cannot tell the format from the content; pass format= one of {', '.join(FORMATS)}")


def _is_integer(token: str) -> bool:
    return bool(_INTEGER.match(token))


def _integer_columns(tokens: list[list[str]]) -> tuple[bool, bool]:
    """Whether the user column and the item columns of whitespace-split lines hold integer IDs
    (at least :data:`_AGREE` of them; the rest then disagree)."""
    users = [t[0] for t in tokens if t]
    items = [i for t in tokens for i in t[1:]]
    return (
        sum(map(_is_integer, users)) >= _AGREE * max(len(users), 1),
        bool(items) and sum(map(_is_integer, items)) >= _AGREE * len(items),
    )


def _odd_line(p: Path, n: int, line: str, users_int: bool, items_int: bool, fmt: str) -> DataError | None:
    """The error for line ``n`` when it breaks the integer columns, else ``None``."""
    parts = line.split()
    bad = [t for t in parts[:1] if users_int and not _is_integer(t)] + [
        t for t in parts[1:] if items_int and not _is_integer(t)
    ]
    if not bad:
        return None
    column = "user" if users_int and not _is_integer(parts[0]) else "item"
    return DataError(
        f"{p}:{n}: {bad[0][:40]!r} is not an integer ID like the other {column} IDs of the file "
        f"({line[:80]!r}); fix the line, or pass --format {fmt} to read every ID as text"
    )


def _head_agrees(p: Path, numbered: list[tuple[int, str]], fmt: str) -> None:
    """The head lines of a pairs or user-lines file agree on the field count (pairs) and on integer IDs."""
    if fmt == "pairs":
        for n, line in numbered:
            if len(line.split()) != 2:
                raise DataError(
                    f"{p}:{n}: {len(line.split())} fields where the other lines are 'user item' pairs "
                    f"({line[:80]!r}); fix the line, or pass --format user-lines if each line is "
                    "one user's items"
                )
    users_int, items_int = _integer_columns([line.split() for _, line in numbered])
    for n, line in numbered:
        if (e := _odd_line(p, n, line, users_int, items_int, fmt)) is not None:
            raise e


def check_integer_ids(path: str | Path, fmt: str, data: Interactions) -> None:
    """A detected pairs or user-lines file whose head shows integer IDs has them on every line:
    the first line that does not is a :class:`DataError` naming it (read with an explicit
    ``format=`` to take every ID as text)."""
    p = Path(path)
    tokens = [line.split() for _, line in islice(iter_lines(p, "latin-1"), _HEAD_LINES)]
    users_int, items_int = _integer_columns(tokens)
    ok = (not users_int or all(_is_integer(str(u)) for u in data.users.external)) and (
        not items_int or all(_is_integer(str(i)) for i in data.items.external)
    )
    if ok:
        return
    for n, line in iter_lines(p):
        if (e := _odd_line(p, n, line, users_int, items_int, fmt)) is not None:
            raise e


def _is_ml100k_line(line: str) -> bool:
    fields = line.split("\t")
    return len(fields) == 4 and all(reads_as_number(t) for t in fields)


def _json_format(p: Path) -> str:
    """Amazon reviews, Steam reviews or OTTO sessions, by the keys of the first record; else generic JSON
    lines when the first record has a user and an item key by a name the table readers know."""
    for n, line in iter_lines(p):
        keys = set(parse_record(line, p, n))
        if {"reviewerID", "asin"} <= keys:
            return "amazon-json"
        if {"username", "product_id"} <= keys:
            return "steam-json"
        if {"session", "events"} <= keys:
            return "otto-jsonl"
        lower = {str(k).strip().lower() for k in keys}
        if all(lower & set(ID_ALIASES[role]) for role in REQUIRED_ROLES):
            return "json-lines"
        raise DataError(
            f"{p}:{n}: unknown JSON layout (keys {sorted(keys)[:10]}); expected events with user and item "
            "keys (user_id, item_id, ...; other names: format json-lines with columns), Amazon reviews "
            "(reviewerID, asin), Steam reviews (username, product_id) or OTTO sessions (session, events)"
        )
    raise DataError(f"{p}: the file is empty (no interactions)")
