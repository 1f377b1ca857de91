"""Columns of an interaction table: which column plays which role, and converting each role.

Shared by the in-memory table reader and the streaming Parquet reader, so both accept the
same column names and reject the same bad values with the same messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnrec.data.schema import DataError

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
#: Roles every interaction log must have.
REQUIRED_ROLES = ("user", "item")


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
                    raise DataError(
                        f"{path}: no column number {want} for {role}; the file has {len(labels)} columns"
                    )
                out[role] = labels[want]
            elif want in labels:
                out[role] = want
            elif str(want).strip().lower() in lower:
                out[role] = lower[str(want).strip().lower()]
            else:
                raise DataError(
                    f"{path}: missing column {want!r} (mapped as {role}); available columns: {shown}"
                )
            continue
        for alias in aliases:
            if alias in lower:
                out[role] = lower[alias]
                break
        else:
            if role in REQUIRED_ROLES:
                raise DataError(
                    f"{path}: missing column for {role} (looked for {', '.join(aliases[:6])}, ...); "
                    f"available columns: {shown}; map it with columns={{'{role}': '<column name>'}}"
                )
    return out


def id_strings(values: pd.Series) -> np.ndarray:
    """IDs as text; integral floats (from Parquet) lose their ``.0`` so ``42.0`` is ``"42"``."""
    if pd.api.types.is_float_dtype(values.dtype):
        arr: np.ndarray = values.to_numpy(dtype=np.float64)
        if np.all(arr == np.round(arr)):
            return arr.astype(np.int64).astype(str).astype(object)
    if pd.api.types.is_integer_dtype(values.dtype):
        ints: np.ndarray = values.to_numpy()
        return ints.astype(str).astype(object)
    return np.array([str(v).strip() for v in values.to_numpy(dtype=object)], dtype=object)


def numeric_column(
    values: pd.Series, missing: np.ndarray, p: Path, label: object, role: str, line_of: Callable[[int], str]
) -> np.ndarray:
    """A rating-like column as float64; the first missing or non-numeric row is a :class:`DataError`.

    ``line_of(row)`` says where row ``row`` (0-based) is in the file (``line 7``, ``row 6``).
    """
    if missing.any():
        raise DataError(f"{p}: {line_of(int(np.flatnonzero(missing)[0]))}: missing {role} (column {label!r})")
    num = pd.to_numeric(values, errors="coerce")
    bad = num.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DataError(f"{p}: {line_of(row)}: {role} {str(values.iloc[row])[:40]!r} is not a number")
    return _float64(num)


def time_column(
    values: pd.Series, missing: np.ndarray, p: Path, label: object, line_of: Callable[[int], str]
) -> np.ndarray:
    """A timestamp column as unix seconds (float64): numbers, datetimes or date strings.

    A column that is numeric but for a stray value names that value; one that is all text is
    parsed as dates. The first missing or unparseable row is a :class:`DataError`.
    """
    if missing.any():
        raise DataError(
            f"{p}: {line_of(int(np.flatnonzero(missing)[0]))}: missing timestamp (column {label!r})"
        )
    if pd.api.types.is_datetime64_any_dtype(values.dtype):
        return _unix_seconds(pd.to_datetime(values, utc=True))
    num = pd.to_numeric(values, errors="coerce")
    bad_num = num.isna().to_numpy()
    if not bad_num.any():
        return _float64(num)
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
    return _unix_seconds(stamps)


def _unix_seconds(stamps: pd.Series) -> np.ndarray:
    """UTC datetimes as float64 seconds since 1970."""
    return _float64((stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds())


def _float64(values: pd.Series) -> np.ndarray:
    out: np.ndarray = values.to_numpy(dtype=np.float64)
    return out
