"""Format detection: which of :data:`~attnrec.data.formats.FORMATS` an interaction file is in.

The name decides first (``.parquet``, ``.json``, ``u.data``, ``.csv``), then the first 200
lines: separators, field counts, numeric fields, JSON keys.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from attnrec.data.files import base_name, iter_lines
from attnrec.data.formats import FORMATS
from attnrec.data.readers.jsonlines import parse_record
from attnrec.data.readers.table import table_format
from attnrec.data.schema import DataError

_HEAD_LINES = 200


def detect_format(path: str | Path) -> str:
    """Guess the format of an interaction file from its name, then from its first lines."""
    p = Path(path)
    name = base_name(p)
    tf = table_format(p)
    if tf == "parquet":
        return "parquet"
    if name.endswith((".json", ".jsonl", ".ndjson")):
        return _json_format(p)
    lines = list(islice((line for _, line in iter_lines(p, "latin-1")), _HEAD_LINES))
    if not lines:
        raise DataError(f"{p}: the file is empty (no interactions)")
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
    return _text_format(p, lines)


def _csv_format(first: str) -> str:
    """A ``.csv`` file: MovieLens-20M, Amazon "ratings only" or a generic table, by its first line."""
    head = [h.strip().lower() for h in first.split(",")]
    if head[:4] == ["userid", "movieid", "rating", "timestamp"]:
        return "ml20m"
    if len(head) == 4 and _numeric(head[2]) and _numeric(head[3]):
        return "amazon-ratings-csv"  # headerless user,item,rating,timestamp (Amazon "ratings only")
    return "csv"


def _text_format(p: Path, lines: list[str]) -> str:
    """A file whose name says nothing: pairs, user lines, ``u.data`` layout or a delimited table."""
    first = lines[0]
    tokens = [ln.split() for ln in lines]
    if all(_numeric(t) for t in tokens[0]) or not any(c in first for c in ",;\t|"):
        if all(len(t) == 2 for t in tokens):
            return "pairs"
        if "\t" in first and all(_is_ml100k_line(ln) for ln in lines):
            return "ml100k"
        if all(len(t) >= 2 for t in tokens) and not any(c in first for c in ",;|"):
            return "user-lines"
    if "\t" in first:
        return "tsv"
    if "," in first or ";" in first or "|" in first:
        return "csv"
    raise DataError(f"{p}: cannot tell the format from the content; pass format= one of {', '.join(FORMATS)}")


def _is_ml100k_line(line: str) -> bool:
    fields = line.split("\t")
    return len(fields) == 4 and all(_numeric(t) for t in fields)


def _numeric(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _json_format(p: Path) -> str:
    """Amazon reviews, Steam reviews or OTTO sessions, by the keys of the first record."""
    for n, line in iter_lines(p):
        keys = set(parse_record(line, p, n))
        if {"reviewerID", "asin"} <= keys:
            return "amazon-json"
        if {"username", "product_id"} <= keys:
            return "steam-json"
        if {"session", "events"} <= keys:
            return "otto-jsonl"
        raise DataError(
            f"{p}:{n}: unknown JSON layout (keys {sorted(keys)[:10]}); expected Amazon reviews "
            "(reviewerID, asin), Steam reviews (username, product_id) or OTTO sessions (session, events)"
        )
    raise DataError(f"{p}: the file is empty (no interactions)")
