"""Building a :class:`~attnrec.data.features.FeatureTable` from a pandas DataFrame.

Each column other than the ID column is one field. Without declared kinds, a column's kind is
inferred from its values (missing and empty values are ignored):

1. booleans -> ``categorical``; numbers (a numeric dtype, or text that all parses as numbers)
   -> ``numeric``;
2. lists, tuples or arrays, or text with a ``|`` separator (``Action|Comedy``) -> ``multi``;
3. text where more than half of the values contain a space and more than half are distinct
   (titles, descriptions) -> ``text``;
4. any other text -> ``categorical``.

A text column in which at least 90% of (10 or more) values are numbers is taken for a numeric
column with typos: the first value that is not a number is an error naming its line (declare
the column ``categorical`` if it is one, e.g. zip codes with letters). Declared kinds are
``categorical``, ``multi``, ``numeric``, ``text`` or ``auto`` (inferred); with declared
kinds only the declared columns are used.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from attnrec.data.boundary import LineOf, reads_as_number, row_label
from attnrec.data.features import (
    FIELD_KINDS,
    CategoricalField,
    FeatureField,
    FeatureTable,
    MultiField,
    NumericField,
    tokens,
)
from attnrec.data.schema import DataError, IdMap

MULTI_SEPARATOR = "|"
_NUMERIC_LOOKING = 0.9  # share of numbers that makes a text column "numeric with typos"


def _missing(v: object) -> bool:
    if isinstance(v, str):
        return not v.strip()
    if isinstance(v, (list, tuple, set, np.ndarray)):
        return False
    return v is None or (isinstance(v, (float, np.floating)) and v != v) or v is pd.NA or v is pd.NaT


def as_text(v: object) -> str:
    """A value as an ID/category string: integral floats lose their ``.0`` (``42.0`` -> ``"42"``)."""
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v).strip()


def infer_kind(values: pd.Series, name: str, source: str, line_of: LineOf) -> str:
    """The kind of a column by the rules of this module's docstring."""
    if pd.api.types.is_bool_dtype(values.dtype):
        return "categorical"
    if pd.api.types.is_numeric_dtype(values.dtype):
        return "numeric"
    present = [(r, v) for r, v in enumerate(values.to_numpy(dtype=object)) if not _missing(v)]
    if any(isinstance(v, (list, tuple, set, np.ndarray)) for _, v in present):
        return "multi"
    texts = [(r, str(v).strip()) for r, v in present]
    numbers = [reads_as_number(t) for _, t in texts]
    if texts and all(numbers):
        return "numeric"
    if len(texts) >= 10 and sum(numbers) >= _NUMERIC_LOOKING * len(texts):
        row, bad = next(rt for rt, ok in zip(texts, numbers, strict=True) if not ok)
        raise DataError(
            f"{source}: {line_of(row)}: field {name!r} looks numeric but has {bad[:40]!r}; "
            f"fix the value, or declare the field's kind (e.g. {name}=categorical)"
        )
    if any(MULTI_SEPARATOR in t for _, t in texts):
        return "multi"
    spaced = sum(" " in t for _, t in texts)
    if texts and spaced > len(texts) / 2 and len({t for _, t in texts}) > len(texts) / 2:
        return "text"
    return "categorical"


def _label(v: object) -> str | None:
    """A single value as text, ``None`` when missing (strings, the common case, first)."""
    if isinstance(v, str):
        return v.strip() or None
    return None if _missing(v) else as_text(v)


def _categorical(values: np.ndarray) -> CategoricalField:
    labels = [_label(v) for v in values]
    distinct = sorted({x for x in labels if x is not None})
    code = {x: i + 1 for i, x in enumerate(distinct)}
    codes = np.fromiter((0 if x is None else code[x] for x in labels), dtype=np.int64, count=len(labels))
    return CategoricalField(IdMap(np.array(distinct, dtype=object), offset=1), codes)


def _value_lists(values: np.ndarray, name: str, source: str, line_of: LineOf) -> list[list[str]]:
    """Each row's values: list-likes as they are, text split on ``|``; duplicates dropped, order kept."""
    out: list[list[str]] = []
    for r, v in enumerate(values):
        if _missing(v):
            out.append([])
            continue
        if isinstance(v, (list, tuple, set, np.ndarray)):
            parts = [as_text(x) for x in v if not _missing(x)]
        elif isinstance(v, str):
            parts = [p.strip() for p in v.split(MULTI_SEPARATOR) if p.strip()]
        elif isinstance(v, (int, float, np.integer, np.floating)):
            parts = [as_text(v)]
        else:
            raise DataError(
                f"{source}: {line_of(r)}: field {name!r}: {str(v)[:40]!r} is not a list of values"
            )
        out.append(list(dict.fromkeys(parts)))
    return out


def _multi(lists: list[list[str]], kind: str, keep: set[str] | None = None) -> MultiField:
    """A multi field from per-row value lists (only the values in ``keep`` when given)."""
    if keep is not None:
        lists = [[x for x in row if x in keep] for row in lists]
    distinct = sorted({x for row in lists for x in row})
    code = {x: i + 1 for i, x in enumerate(distinct)}
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(row) for row in lists], out=offsets[1:])
    codes = np.fromiter((code[x] for row in lists for x in row), dtype=np.int64, count=int(offsets[-1]))
    return MultiField(IdMap(np.array(distinct, dtype=object), offset=1), offsets, codes, kind)


def _text(values: np.ndarray, min_count: int, max_vocab: int | None) -> MultiField:
    """Free text as a ``text`` multi field: word tokens kept when in at least ``min_count`` rows,
    the ``max_vocab`` most frequent of them when given (ties by the token)."""
    lists = [[] if _missing(v) else list(dict.fromkeys(tokens(str(v)))) for v in values]
    counts = Counter(t for row in lists for t in row)
    kept = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
    return _multi(lists, "text", set(kept if max_vocab is None else kept[:max_vocab]))


def _numeric(values: pd.Series, name: str, source: str, line_of: LineOf) -> NumericField:
    raw = values.to_numpy(dtype=object)
    missing = np.array([_missing(v) for v in raw], dtype=bool)
    num = pd.to_numeric(pd.Series(np.where(missing, np.nan, raw)), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(num) & ~missing  # inf was taken and made every value of the field NaN
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{source}: {line_of(row)}: numeric field {name!r}: {str(raw[row])[:40]!r} is not a finite number"
        )
    return NumericField(num)


def _field(
    values: pd.Series, kind: str, name: str, source: str, line_of: LineOf, text: tuple[int, int | None]
) -> FeatureField:
    if kind == "numeric":
        return _numeric(values, name, source, line_of)
    raw = values.to_numpy(dtype=object)
    if kind == "categorical":
        bad = next((r for r, v in enumerate(raw) if isinstance(v, (list, tuple, set, np.ndarray))), None)
        if bad is not None:
            raise DataError(
                f"{source}: {line_of(bad)}: categorical field {name!r} has a list; declare it multi"
            )
        return _categorical(raw)
    if kind == "text":
        return _text(raw, *text)
    return _multi(_value_lists(raw, name, source, line_of), "multi")


def _id_strings(values: pd.Series, column: str, source: str, line_of: LineOf) -> np.ndarray:
    """The ID column as text; a missing or repeated ID is a :class:`DataError` naming its line."""
    raw = values.to_numpy(dtype=object)
    seen: dict[str, int] = {}
    for r, v in enumerate(raw):
        key = _label(v)
        if key is None:
            raise DataError(f"{source}: {line_of(r)}: missing ID (column {column!r})")
        first = seen.setdefault(key, r)
        if first != r:
            raise DataError(
                f"{source}: {line_of(r)}: ID {key!r} already has a row ({line_of(first)}); "
                "a feature table has one row per ID"
            )
    return np.array(list(seen), dtype=object)


def check_kinds(fields: Mapping[str, str], columns: Iterable[object], source: str) -> None:
    """Declared fields name existing columns and known kinds, else a :class:`DataError`."""
    labels = [str(c) for c in columns]
    for name, kind in fields.items():
        if kind not in (*FIELD_KINDS, "auto"):
            raise DataError(
                f"{source}: field {name!r} has unknown kind {kind!r}; use {', '.join(FIELD_KINDS)} or auto"
            )
        if name not in labels:
            raise DataError(
                f"{source}: no column {name!r} for a feature field; available columns: "
                f"{', '.join(repr(c) for c in labels[:30])}"
            )


def from_frame(
    df: pd.DataFrame,
    id_column: str,
    fields: Mapping[str, str] | None = None,
    *,
    source: str = "DataFrame",
    line_of: LineOf = row_label,
    text_min_count: int = 1,
    text_max_vocab: int | None = None,
) -> FeatureTable:
    """A feature table from ``df``: one row per ID in ``id_column``, one field per other column
    (or per declared column of ``fields``: ``{column: kind}``). Errors name ``source`` and the
    line (``line_of(row)``) of the offending row."""
    columns = [str(c) for c in df.columns]
    if id_column not in columns:
        raise DataError(
            f"{source}: no ID column {id_column!r}; available columns: "
            f"{', '.join(repr(c) for c in columns[:30])}"
        )
    frame = df.set_axis(columns, axis=1)
    if fields is not None:
        check_kinds(fields, columns, source)
        if id_column in fields:
            raise DataError(f"{source}: {id_column!r} is the ID column, not a feature field")
    wanted: dict[str, str] = (
        dict(fields) if fields is not None else {c: "auto" for c in columns if c != id_column}
    )
    ids = _id_strings(frame[id_column], id_column, source, line_of)
    built: dict[str, FeatureField] = {}
    for name, declared in wanted.items():
        values = frame[name]
        kind = infer_kind(values, name, source, line_of) if declared == "auto" else declared
        built[name] = _field(values, kind, name, source, line_of, (text_min_count, text_max_vocab))
    return FeatureTable(IdMap(ids), built, source)


def frame_from_mapping(data: Mapping[Any, Any], id_column: str, value_field: str) -> pd.DataFrame:
    """``{id: value}`` (S3-Rec's ``item2attributes``: ``{"4": [1, 2, 3]}``) or ``{id: {field: value}}``
    as a DataFrame with the IDs in ``id_column`` and, for plain values, a column ``value_field``."""
    keys = [str(k) for k in data]
    values = list(data.values())
    if values and all(isinstance(v, Mapping) for v in values):
        df = pd.DataFrame.from_records(values)
        df.insert(0, id_column, keys)
        return df
    column = pd.Series(values, dtype=object) if values else pd.Series([], dtype=object)
    return pd.DataFrame({id_column: keys, value_field: column})
