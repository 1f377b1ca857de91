"""The one validated boundary for IDs, numbers and times, whatever they come from.

Every way into attnrec converts its columns here: the table readers (CSV/TSV/Parquet), the
streaming Parquet reader, :func:`~attnrec.data.build.from_columns` and DataFrames
(:mod:`attnrec.data.frames`). So every entry point accepts the same values and rejects the same
bad ones with the same one-line :class:`~attnrec.data.schema.DataError`, naming the row (or the
file's line) and the column:

* **IDs** (users, items, events) become text. An integral number written as a float (``1.0``,
  ``"1.0"``, Parquet's float columns) is that integer (``"1"``), so IDs from a float column match
  the same IDs elsewhere (title files, requests). Text is stripped of surrounding whitespace.
  A missing ID (``None``, ``NaN``, ``NaT``, empty text) is an error.
* **Numbers** (ratings) become float64; missing, non-numeric or infinite values are errors.
* **Times** become unix seconds (float64): numbers pass through; ``datetime64`` columns of any
  unit (``s``, ``ms``, ``us``, ``ns``; time-zone-aware too, converted to UTC) and datetime objects
  are converted exactly; text is parsed (ISO 8601 and other unambiguous forms; no time zone means
  UTC). Dates written ``03/04/2020`` (``dd/mm/yyyy`` or ``mm/dd/yyyy``, with ``/``, ``-`` or ``.``)
  are refused unless a time format says which order they are in (:data:`NAMED_TIME_FORMATS` or a
  ``strptime`` pattern such as ``"%d/%m/%Y"``): read month-first without a word, they would
  reorder events inside users.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeGuard

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from attnrec.data.schema import DataError

LineOf = Callable[[int], str]

#: Time formats by name: the order of day and month in ``03/04/2020``-style dates.
NAMED_TIME_FORMATS = ("dayfirst", "monthfirst")
_INTEGRAL_TEXT = r"-?\d+\.0+"
_TICKS_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
# day/month/year or month/day/year: two 1-2 digit fields, one separator twice, a 2- or 4-digit year
_AMBIGUOUS_DATE = r"^(\d{1,2})([/.-])(\d{1,2})\2(\d{4}|\d{2})(?!\d)(.*)$"


def row_label(row: int) -> str:
    """Row ``row`` (0-based) of a DataFrame or array, as errors name it (``row 1`` is the first)."""
    return f"row {row + 1}"


@dataclass(frozen=True)
class Origin:
    """Where a column comes from, for errors: the source (a path, ``DataFrame``) and how rows are named."""

    source: str
    line_of: LineOf = row_label

    def error(self, row: int, what: str) -> DataError:
        """A :class:`DataError` about row ``row`` (0-based)."""
        return DataError(f"{self.source}: {self.line_of(row)}: {what}")


ColumnValues: TypeAlias = Sequence[object] | np.ndarray | pd.Series | pa.Array | pa.ChunkedArray


def as_series(values: ColumnValues) -> pd.Series:
    """A column of any accepted kind (list, numpy array, pandas Series, pyarrow array) as a Series
    with a fresh 0-based index (so row numbers in errors count from the top)."""
    if isinstance(values, pd.Series):
        return values.reset_index(drop=True)
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.to_pandas()
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise DataError(f"a column must be one-dimensional, got shape {values.shape}")
        # object arrays stay object (no copy, no inference of a string dtype: IDs are checked as they are)
        return pd.Series(values, dtype=object, copy=False) if values.dtype == object else pd.Series(values)
    return pd.Series(values)


def _first(mask: np.ndarray | pd.Series) -> int:
    return int(np.flatnonzero(np.asarray(mask, dtype=bool))[0])


def _shown(value: object) -> str:
    return repr(str(value)[:40])


def check_missing(s: pd.Series, role: str, label: object, origin: Origin) -> None:
    """A missing value (``None``, ``NaN``, ``NaT``, ``pd.NA``) is a :class:`DataError` naming its row."""
    missing = s.isna().to_numpy()
    if missing.any():
        raise origin.error(_first(missing), f"missing {role} (column {label!r})")


def is_count(value: object, least: int = 0) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is a whole number (a numpy integer too, never a boolean) of at least ``least``:
    the one rule for counts that callers give (``k``, ``k_core``, an index's cells)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        return False
    return bool(value >= least)


# -- IDs ---------------------------------------------------------------------------------------------
_PLAIN_INTS = frozenset({int, np.int64, np.int32})  # IDs that need no further look


def is_id(value: object) -> bool:
    """Whether ``value`` can be an external ID: text that is not blank, or a number. A missing value
    (``None``, ``NaN``), a boolean, bytes and a container (a list, set, dict, array) cannot: the one
    rule for a request's IDs and for each value of a column read one by one."""
    if type(value) in _PLAIN_INTS:  # the common case first: a request's histories run to 1,000 IDs
        return True
    if isinstance(value, str):
        return bool(value.strip())
    return not (isinstance(value, bool | np.bool_ | bytes | Iterable) or pd.isna(value))


def id_text(value: object) -> str:
    """One ID as text by the rule of :func:`id_column` (``1.0`` and ``"1.0"`` -> ``"1"``); no checks."""
    if isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        return str(int(value))
    text = str(value).strip()
    return text.split(".", 1)[0] if re.fullmatch(_INTEGRAL_TEXT, text) else text


def id_column(values: ColumnValues, role: str, label: object, origin: Origin) -> np.ndarray:
    """IDs as text (an object array of ``str``): integral floats lose their ``.0``, text is stripped;
    a missing or empty ID is a :class:`DataError` naming the row and the column."""
    s = as_series(values)
    check_missing(s, role, label, origin)
    if pd.api.types.is_bool_dtype(s.dtype):
        raise DataError(f"{origin.source}: column {label!r} ({role}) holds booleans, not IDs")
    if pd.api.types.is_float_dtype(s.dtype):
        arr: np.ndarray = s.to_numpy(dtype=np.float64)
        finite = np.isfinite(arr)
        if not finite.all():
            row = _first(~finite)
            raise origin.error(row, f"{role} {arr[row]} is not an ID (column {label!r})")
        integral = arr == np.floor(arr)
        out: np.ndarray = arr.astype(str).astype(object)
        out[integral] = arr[integral].astype(np.int64).astype(str)
        return out
    if pd.api.types.is_integer_dtype(s.dtype):
        ints: np.ndarray = s.to_numpy(dtype=np.int64)
        return ints.astype(str).astype(object)
    if pd.api.types.infer_dtype(s, skipna=False) == "string":
        return _text_ids(s, role, label, origin)
    # numbers, mixed or other objects: one by one, each by the rule of a request's IDs
    values = s.to_numpy(dtype=object)
    texts = np.empty(len(values), dtype=object)
    for row, value in enumerate(values):
        if not is_id(value):
            raise origin.error(
                row, f"{role} {type(value).__name__} {_shown(value)} is not an ID (column {label!r})"
            )
        texts[row] = id_text(value)
    return _text_ids(pd.Series(texts, dtype=object, copy=False), role, label, origin)


def _text_ids(s: pd.Series, role: str, label: object, origin: Origin) -> np.ndarray:
    """Text IDs stripped, integral-float text (``"1.0"``) as its integer, an empty one an error.
    Vectorised by Arrow; a column that needs no change is returned without a copy."""
    raw = pa.array(s.to_numpy(dtype=object, copy=False) if s.dtype == object else s, type=pa.string())
    text = pc.utf8_trim_whitespace(raw)
    empty = pc.equal(text, "")
    if pc.any(empty).as_py():
        row = _first(empty.to_numpy(zero_copy_only=False))
        raise origin.error(row, f"missing {role} (column {label!r}: empty)")
    dotted = pc.any(pc.match_substring(text, ".")).as_py()
    integral = pc.match_substring_regex(text, "^" + _INTEGRAL_TEXT + "$") if dotted else None
    if integral is not None and pc.any(integral).as_py():
        text = pc.if_else(integral, pc.replace_substring_regex(text, r"\.0+$", ""), text)
    elif s.dtype == object and pc.all(pc.equal(text, raw)).as_py():
        unchanged: np.ndarray = s.to_numpy(dtype=object, copy=False)
        return unchanged
    out: np.ndarray = text.to_numpy(zero_copy_only=False)
    return out.astype(object, copy=False)


# -- numbers -----------------------------------------------------------------------------------------
def reads_as_number(text: str) -> bool:
    """True when ``text`` parses as a float (``"3"``, ``"-0.5"``, ``"1e3"``, ``"nan"``)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def number_column(values: ColumnValues, role: str, label: object, origin: Origin) -> np.ndarray:
    """A rating-like column as float64; the first missing, non-numeric or infinite value is a
    :class:`DataError`."""
    s = as_series(values)
    check_missing(s, role, label, origin)
    if pd.api.types.is_bool_dtype(s.dtype) or pd.api.types.is_datetime64_any_dtype(s.dtype):
        raise DataError(f"{origin.source}: column {label!r} ({role}) holds {s.dtype}, not numbers")
    num = pd.to_numeric(s, errors="coerce")
    bad = num.isna().to_numpy()
    if bad.any():
        row = _first(bad)
        raise origin.error(row, f"{role} {_shown(s.iloc[row])} is not a number (column {label!r})")
    out: np.ndarray = num.to_numpy(dtype=np.float64)
    endless = ~np.isfinite(out)  # "inf" reads as a number; as a rating it made NaN losses
    if endless.any():
        row = _first(endless)
        raise origin.error(row, f"{role} {out[row]} is not a finite number (column {label!r})")
    return out


# -- times -------------------------------------------------------------------------------------------
def check_time_format(time_format: str | None) -> str | None:
    """``time_format`` when it is a name of :data:`NAMED_TIME_FORMATS` or a ``strptime`` pattern."""
    if time_format is None or time_format in NAMED_TIME_FORMATS or "%" in time_format:
        return time_format
    raise DataError(
        f"time format {time_format!r}: use {' or '.join(NAMED_TIME_FORMATS)}, or a strptime pattern "
        "such as '%d/%m/%Y %H:%M'"
    )


def time_column(
    values: ColumnValues, label: object, origin: Origin, time_format: str | None = None
) -> np.ndarray:
    """A timestamp column as unix seconds (float64): numbers, ``datetime64`` of any unit, datetime
    objects or text (see the module docstring). ``time_format`` says how text dates are written;
    with it, the column must be text (or numbers such as ``20200131`` for ``"%Y%m%d"``)."""
    check_time_format(time_format)
    s = as_series(values)
    check_missing(s, "timestamp", label, origin)
    if pd.api.types.is_datetime64_any_dtype(s.dtype):
        _no_format_for(time_format, "datetimes", label, origin)
        return datetime_seconds(s)
    if pd.api.types.is_bool_dtype(s.dtype):
        raise DataError(f"{origin.source}: column {label!r} (timestamp) holds booleans, not times")
    if pd.api.types.is_numeric_dtype(s.dtype) and (time_format is None or time_format in NAMED_TIME_FORMATS):
        _no_format_for(time_format, "numbers", label, origin)
        return _finite_seconds(s.to_numpy(dtype=np.float64), label, origin)
    kind = pd.api.types.infer_dtype(s, skipna=False)
    if kind in ("datetime", "datetime64", "date"):
        _no_format_for(time_format, "datetimes", label, origin)
        try:
            return datetime_seconds(pd.to_datetime(s, utc=True))
        except (ValueError, TypeError) as e:
            raise DataError(f"{origin.source}: column {label!r} (timestamp): {e}") from None
    text = s.astype(str).str.strip() if kind != "string" else s.astype(object).str.strip()
    if time_format is None or time_format in NAMED_TIME_FORMATS:
        num = pd.to_numeric(text, errors="coerce")
        not_num = num.isna().to_numpy()
        if not not_num.any():
            _no_format_for(time_format, "numbers", label, origin)
            return _finite_seconds(num.to_numpy(dtype=np.float64), label, origin)
        if not not_num.all():  # a numeric column with a stray value: name it
            row = _first(not_num)
            raise origin.error(row, f"timestamp {_shown(text.iloc[row])} is not a number (column {label!r})")
    return _text_seconds(text.astype(object), label, origin, time_format)


def _no_format_for(time_format: str | None, kind: str, label: object, origin: Origin) -> None:
    if time_format is not None:
        raise DataError(
            f"{origin.source}: column {label!r} (timestamp) holds {kind}, not text dates: "
            f"the time format {time_format!r} does not apply"
        )


def _finite_seconds(arr: np.ndarray, label: object, origin: Origin) -> np.ndarray:
    finite = np.isfinite(arr)
    if not finite.all():
        row = _first(~finite)
        raise origin.error(row, f"timestamp {arr[row]} is not a time (column {label!r})")
    return arr


def _text_seconds(text: pd.Series, label: object, origin: Origin, time_format: str | None) -> np.ndarray:
    """Text dates as unix seconds; ``dd/mm/yyyy``-like dates only with a named or explicit format."""
    if time_format is not None and time_format not in NAMED_TIME_FORMATS:
        stamps = pd.to_datetime(text, utc=True, errors="coerce", format=time_format)
        failed = "does not match the time format " + repr(time_format)
    else:
        text = _ambiguous_as_iso(text, label, origin, time_format)
        stamps = pd.to_datetime(text, utc=True, errors="coerce", format="mixed")
        failed = "is neither a number nor a date"
    bad = stamps.isna().to_numpy()
    if bad.any():
        row = _first(bad)
        raise origin.error(row, f"timestamp {_shown(text.iloc[row])} {failed} (column {label!r})")
    return datetime_seconds(stamps)


def _ambiguous_as_iso(text: pd.Series, label: object, origin: Origin, order: str | None) -> pd.Series:
    """``text`` with its ``03/04/2020``-like dates rewritten as ISO ``yyyy-mm-dd`` in the given
    ``order`` (``dayfirst``/``monthfirst``); without an order such a date is a :class:`DataError`."""
    parts = text.str.extract(_AMBIGUOUS_DATE)
    ambiguous = parts[0].notna().to_numpy()
    if not ambiguous.any():
        return text
    if order is None:
        row = _first(ambiguous)
        raise origin.error(
            row,
            f"timestamp {_shown(text.iloc[row])} (column {label!r}) could be day/month/year or "
            "month/day/year: say which with time_format='dayfirst' or 'monthfirst' (--time-format in "
            "the CLI), or give a strptime pattern such as '%d/%m/%Y'",
        )
    rows = np.flatnonzero(ambiguous)
    first = parts[0].iloc[rows].astype(int).to_numpy()
    second = parts[2].iloc[rows].astype(int).to_numpy()
    day, month = (first, second) if order == "dayfirst" else (second, first)
    wrong = (month < 1) | (month > 12) | (day < 1) | (day > 31)
    if wrong.any():
        row = int(rows[_first(wrong)])
        written = "day/month/year" if order == "dayfirst" else "month/day/year"
        raise origin.error(row, f"timestamp {_shown(text.iloc[row])} is not {written} (column {label!r})")
    year_text = parts[3].iloc[rows]
    year = year_text.astype(int).to_numpy()
    short = (year_text.str.len() == 2).to_numpy()
    year = np.where(short, np.where(year < 69, 2000 + year, 1900 + year), year)  # strptime's %y rule
    iso = [
        f"{y:04d}-{m:02d}-{d:02d}{rest}"
        for y, m, d, rest in zip(year, month, day, parts[4].iloc[rows], strict=True)
    ]
    out = text.copy()
    out.iloc[rows] = iso
    return out


def datetime_seconds(stamps: pd.Series) -> np.ndarray:
    """``datetime64`` values of any unit (naive ones are UTC; aware ones are converted) as float64
    unix seconds, counted exactly in the column's own unit."""
    if isinstance(stamps.dtype, pd.DatetimeTZDtype):
        stamps = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    arr = stamps.to_numpy()
    unit, count = np.datetime_data(arr.dtype)
    if unit not in _TICKS_PER_SECOND or count != 1:  # days, minutes ...: counted in microseconds
        arr, unit = arr.astype("datetime64[us]"), "us"
    out: np.ndarray = arr.view(np.int64) / _TICKS_PER_SECOND[unit]
    return out


__all__ = [
    "NAMED_TIME_FORMATS",
    "Origin",
    "as_series",
    "check_time_format",
    "datetime_seconds",
    "id_column",
    "id_text",
    "number_column",
    "row_label",
    "time_column",
]
