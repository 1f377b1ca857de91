"""CSV, TSV and Parquet interaction tables, with columns found by name or position."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from attnrec.data.boundary import Origin, id_column, number_column, time_column
from attnrec.data.build import CheckedColumns, build_log, signal_columns
from attnrec.data.files import base_name, is_gzip, iter_lines, require_file, require_nonempty
from attnrec.data.readers.columns import resolve_columns
from attnrec.data.readers.fields import file_source
from attnrec.data.schema import DataError, Interactions
from attnrec.data.signals import signals


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


def sniff_separator(path: str | Path) -> str:
    """The separator of a delimited text file: the first of tab, comma, semicolon, pipe on its
    first line, else whitespace."""
    for _, line in iter_lines(path):
        for sep in ("\t", ",", ";", "|"):
            if sep in line:
                return sep
        return r"\s+"
    raise DataError(f"{path}: the file is empty (no interactions)")


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
    time_format: str | None = None,
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
    time_format : str, optional
        How text dates are written: ``"dayfirst"``, ``"monthfirst"`` or a ``strptime`` pattern
        (see :mod:`attnrec.data.boundary`); needed for ``03/04/2020``-like dates.

    Values pass the boundary of :mod:`attnrec.data.boundary`: timestamps may be numbers (unix
    time), datetimes or date strings. Missing or malformed values give a :class:`DataError`
    naming the file and line.
    """
    p = Path(path)
    fmt = table_format(p)
    if fmt == "parquet":
        _require_nonempty_binary(p)
        df = _read_parquet(p)
        roles = resolve_columns(list(df.columns), columns, p)
        line_of: Callable[[int], str] = lambda row: f"row {row + 1}"  # noqa: E731
    else:
        require_nonempty(p)
        if sep is None:
            sep = {"csv": ",", "tsv": "\t"}.get(fmt) or sniff_separator(p)
        if not header:
            columns = dict(columns or {"user": 0, "item": 1})
            bad = {r: c for r, c in columns.items() if not isinstance(c, int)}
            if bad:
                raise DataError(f"{p}: without a header, map columns by position (0, 1, ...), not {bad}")
        roles, df = _read_text_table(p, columns, sep, header)
        first = 2 if header else 1
        line_of = lambda row: f"line {line_of_row(p, row, first)}"  # noqa: E731
    cols = _role_columns(df, roles, Origin(str(p), line_of), time_format)
    fmt_name = format or (fmt if fmt != "table" else "csv")
    return build_log(cols, source=file_source(p, fmt_name, name), min_rating=min_rating, k_core=k_core)


def _role_columns(
    df: pd.DataFrame, roles: Mapping[str, object], origin: Origin, time_format: str | None
) -> CheckedColumns:
    """Each role's column through the boundary: IDs and events as text, ratings as numbers, times as
    seconds."""

    def ids(role: str) -> np.ndarray:
        return id_column(df[roles[role]], role, roles[role], origin)

    return CheckedColumns(
        ids("user"),
        ids("item"),
        time_column(df[roles["timestamp"]], roles["timestamp"], origin, time_format)
        if "timestamp" in roles
        else None,
        number_column(df[roles["rating"]], "rating", roles["rating"], origin) if "rating" in roles else None,
        ids("event") if "event" in roles else None,
        signal_columns(lambda role: df[roles[role]], roles, origin),
    )


def _require_nonempty_binary(p: Path) -> None:
    """A binary file has no lines to look at: an empty one has zero bytes."""
    if require_file(p).stat().st_size == 0:
        raise DataError(f"{p}: the file is empty (no interactions)")


def _read_parquet(p: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(p)
    except Exception as e:  # pyarrow raises several exception types for corrupt files
        raise DataError(f"{p}: cannot be read as Parquet ({e})") from e
    if len(df) == 0:
        raise DataError(f"{p}: the file is empty (no interactions)")
    return df


def _check_unique_roles(p: Path, sep: str, compression: str | None, roles: Mapping[str, object]) -> None:
    """A :class:`DataError` when the header line names a column that a role reads twice: pandas renames a
    second ``item`` to ``item.1``, so the first was read without a word. Repeats among other columns
    are left alone."""
    raw = pd.read_csv(p, sep=sep, compression=compression, header=None, nrows=1, dtype=str)
    names = [str(v).strip() for v in raw.iloc[0]] if len(raw) else []
    for role, label in roles.items():
        if names.count(str(label).strip()) > 1:
            raise DataError(
                f"{p}: the header names {str(label)!r} twice; which is the {role}? rename or drop one"
            )


def _read_text_table(
    p: Path, columns: Mapping[str, str | int] | None, sep: str, header: bool
) -> tuple[dict[str, object], pd.DataFrame]:
    compression = "gzip" if is_gzip(p) else None
    header_row = 0 if header else None
    try:
        head = pd.read_csv(
            p, nrows=5 if not header else 0, sep=sep, compression=compression, header=header_row
        )
    except pd.errors.EmptyDataError:
        raise DataError(f"{p}: the file is empty (no interactions)") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{p}: cannot be read as a table ({e})") from e
    roles = resolve_columns(list(head.columns), columns, p)
    if header:
        _check_unique_roles(p, sep, compression, roles)
    ids = [roles[r] for r in ("user", "item", *_text_signals()) if r in roles]
    try:
        # No usecols: with it pandas silently accepts rows with extra fields.
        df = pd.read_csv(
            p, dtype={c: object for c in ids}, sep=sep, compression=compression, header=header_row
        )
    except pd.errors.ParserError as e:
        raise DataError(parser_error(p, str(e))) from None
    except UnicodeDecodeError as e:
        raise DataError(f"{p}: not valid utf-8 text ({e.reason})") from None
    except ValueError as e:
        raise DataError(f"{p}: cannot be read as a table ({e})") from e
    if len(df) == 0:
        raise DataError(f"{p}: the file has a header but no rows (no interactions)")
    return roles, df


def _text_signals() -> list[str]:
    """The roles read as text (not numbers): the categorical signals."""
    return [s.name for s in signals() if s.kind == "categorical"]


def parser_error(p: Path, msg: str) -> str:
    """A pandas parser error as ``file:line: what`` when it names the line."""
    m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", msg)
    if m:
        return f"{p}:{m.group(2)}: expected {m.group(1)} fields, saw {m.group(3)}"
    return f"{p}: malformed table ({msg.strip()})"


def line_of_row(p: Path, row: int, first: int) -> int:
    """1-based line number of data row ``row`` (0-based), skipping blank lines as pandas does."""
    target = row + first - 1  # 0-based index among non-blank lines
    for k, (n, _) in enumerate(iter_lines(p)):
        if k == target:
            return n
    return row + first
