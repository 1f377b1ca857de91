"""Field-level parsing shared by the line readers: numbers, timestamps, split lines, fast columns.

Every error names the file and the line, so a bad value in a million-line log can be found.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from attnrec.data.files import content_sha256, is_gzip, iter_lines, open_text
from attnrec.data.schema import DataError, DataSource


def file_source(path: str | Path, fmt: str, name: str | None) -> DataSource:
    """Where a log came from: its name (default the file name), path, format and content hash."""
    return DataSource(name or Path(path).name, str(path), fmt, content_sha256(path))


def number(text: str, path: str | Path, line: int, what: str) -> float:
    """``text`` as a float; not a number or NaN is a :class:`DataError` naming ``what`` and the line."""
    try:
        value = float(text)
    except ValueError:
        raise DataError(f"{path}:{line}: {what} {text[:40]!r} is not a number") from None
    if value != value:  # NaN
        raise DataError(f"{path}:{line}: {what} is NaN")
    return value


def seconds(value: object, path: str | Path, line: int) -> float:
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
            raise DataError(
                f"{path}:{line}: timestamp {text[:40]!r} is neither a number nor a date"
            ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def split_lines(
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


def fast_columns(
    path: str | Path, sep: str | None, n_fields: int, encoding: str = "utf-8"
) -> list[np.ndarray] | None:
    """Columns of a headerless delimited file read by pandas' C parser, or ``None`` when the file
    is not perfectly regular (then the caller's line-by-line parser finds and names the bad line).

    ``sep=None`` splits on whitespace; a multi-character ``sep`` (``::``) is rewritten to a tab.
    """
    p = Path(path)
    if not p.is_file():
        return None
    source: Path | io.StringIO = p
    text_encoding: str | None = encoding
    try:
        compression: str | None = "gzip" if is_gzip(p) else None
        if sep is not None and len(sep) > 1:
            with open_text(p, encoding) as fh:
                text = fh.read()
            if "\t" in text:
                return None
            # Already decoded and decompressed: pandas reads the text as it is.
            source, sep, compression, text_encoding = io.StringIO(text.replace(sep, "\t")), "\t", None, None
        # Every field as text, nothing read as missing: IDs stay exactly as written.
        df = pd.read_csv(
            source,
            header=None,
            dtype=object,
            keep_default_na=False,
            na_filter=False,
            skip_blank_lines=True,
            engine="c",
            sep=r"\s+" if sep is None else sep,
            compression=compression,
            encoding=text_encoding,
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, OSError):
        return None
    if df.shape[1] != n_fields or len(df) == 0:
        return None
    cols = [df[c].to_numpy(dtype=object) for c in df.columns]
    if any((c == "").any() for c in cols):
        return None
    return cols
