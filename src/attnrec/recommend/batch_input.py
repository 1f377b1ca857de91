"""Where a batch run's users come from: every user of an interaction log, or a file of users and histories.

A source yields one request per row (a dict with ``user`` and/or ``history``, the keys of
:meth:`~attnrec.recommend.Recommender.recommend`), always in the same order, one row at a time:
nothing holds the whole user list, and chunk ``i`` of a re-run holds the same rows as chunk ``i``
of the interrupted run. :meth:`UserSource.describe` says what the source is (with a sha256 of its
content), so a resumed run can check that it reads the same users.

Input files (the format is read from the name; ``.gz`` is accepted for the text formats):

* CSV (``.csv``) or TSV (``.tsv``) with a header row naming a ``user`` column, a ``history``
  column or both (other columns are ignored). A history cell lists external item IDs, oldest
  first, separated by spaces or commas (quote the cell in a CSV); an empty cell is no history.
* JSON lines (``.jsonl``, ``.ndjson``, ``.json``): one object per line with ``user`` (a string or
  an integer) and/or ``history`` (a list of item IDs, or one string as in a CSV cell); blank lines
  are skipped, other keys ignored.
* Parquet (``.parquet``, ``.pq``): a ``user`` column (string or integer) and/or a ``history``
  column (a list of strings or integers, or a string as in a CSV cell).

A row of a file is a ``recommend`` request: a row with only a history is scored from that history;
a row with a user is scored from the history the model stored for it (plus the events of its store,
when it has one), with the row's history, if any, appended; a user the model does not know gets the
most popular items (or is scored from the row's history), with ``fallback`` saying so. The rows of an
interaction log (:class:`DatasetUsers`) are each user's whole history and are scored alone. Every row
needs a user or a history: a row with neither is a :class:`~attnrec.data.schema.DataError` that
names the file and the line (or row).
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol  # Any: JSON values and request dicts

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from attnrec.data.files import content_sha256, open_text, require_file
from attnrec.data.schema import DataError, Interactions

Request = dict[str, Any]
USER, HISTORY = "user", "history"
STORED_HISTORY = "stored_history"  # false: the row's history is the user's whole history (a log's rows)
_SEPARATORS = re.compile(r"[\s,]+")
_SUFFIXES = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_PARQUET_BATCH = 8192  # rows decoded at once from a Parquet file (a few MB at most)


class UserSource(Protocol):
    """The users of a batch run, one request dict per row, in a fixed order."""

    def describe(self) -> dict[str, Any]:
        """What the source is, JSON-ready, with the sha256 of its content (recorded with every run)."""
        ...

    def n_rows(self) -> int | None:
        """How many rows :meth:`rows` yields, when known without reading them all."""
        ...

    def rows(self) -> Iterator[Request]:
        """One request dict (``user`` and/or ``history``) per row."""
        ...


def parse_history(text: str) -> list[str]:
    """``"12 40,7"`` -> ``["12", "40", "7"]``: a history written as one text cell."""
    return [t for t in _SEPARATORS.split(text.strip()) if t]


class DatasetUsers:
    """Every user of an interaction log, each scored from its history in that log (oldest first), alone:
    not appended to the history the model stored for the user, nor to the events of its store."""

    def __init__(self, data: Interactions) -> None:
        self.data = data

    def describe(self) -> dict[str, Any]:
        src = self.data.source
        # The file's sha256 does not cover reading options (k-core, minimum rating): hash the log itself too.
        h = hashlib.sha256()
        for arr in (self.data.user, self.data.item):
            h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
        for ids in (self.data.users, self.data.items):
            h.update("\n".join(ids.to_list()).encode())
            h.update(b"\0")
        return {
            "kind": "dataset",
            "name": src.name,
            "path": src.path,
            "sha256": src.sha256 or h.hexdigest(),
            "content_sha256": h.hexdigest(),
            "users": self.data.n_users,
        }

    def n_rows(self) -> int:
        return self.data.n_users

    def rows(self) -> Iterator[Request]:
        seqs = self.data.sequences()
        users, items = self.data.users.external, self.data.items.external
        for u in range(self.data.n_users):
            hist = seqs[u] - 1  # internal item i is external[i - 1] (index 0 is padding)
            yield {USER: str(users[u]), HISTORY: items[hist].tolist(), STORED_HISTORY: False}


class FileUsers:
    """The rows of a CSV/TSV, JSON-lines or Parquet file of users and/or histories (see the module doc)."""

    def __init__(self, path: str | Path) -> None:
        self.path = require_file(path)
        self.format = file_format(self.path)
        self._sha256: str | None = None

    def describe(self) -> dict[str, Any]:
        if self._sha256 is None:
            self._sha256 = content_sha256(self.path)
        return {
            "kind": "file",
            "name": self.path.name,
            "path": str(self.path),
            "format": self.format,
            "sha256": self._sha256,
        }

    def n_rows(self) -> int | None:
        if self.format != "parquet":
            return None  # text files would have to be read through to count
        return int(_parquet(self.path).metadata.num_rows)

    def rows(self) -> Iterator[Request]:
        if self.format == "parquet":
            return _parquet_rows(self.path)
        if self.format == "jsonl":
            return _jsonl_rows(self.path)
        return _csv_rows(self.path, "\t" if self.format == "tsv" else ",")


def file_format(path: Path) -> str:
    """``csv``, ``tsv``, ``jsonl`` or ``parquet`` from the file's name (``.gz`` stripped)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    fmt = _SUFFIXES.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        raise DataError(f"{path}: cannot tell the format from the name; use .csv, .tsv, .jsonl or .parquet")
    if fmt == "parquet" and path.suffix.lower() == ".gz":
        raise DataError(f"{path}: Parquet files are compressed inside; give the .parquet file itself")
    return fmt


def _row(path: Path, where: str, user: object, history: object) -> Request:
    """The request of one row, its values checked; ``where`` is ``line N`` or ``row N``."""
    if isinstance(user, bool) or not (user is None or isinstance(user, (str, int))):
        raise DataError(f"{path} {where}: user must be a string or an integer, not {json.dumps(user)}")
    if isinstance(history, str):
        history = parse_history(history)
    elif history is not None:
        if not isinstance(history, list) or not all(
            isinstance(i, (str, int)) and not isinstance(i, bool) for i in history
        ):
            raise DataError(f"{path} {where}: history must be a list of item IDs (strings or integers)")
        history = [str(i) for i in history]
    if user is None or user == "":
        if history is None:
            raise DataError(f"{path} {where}: no user and no history")
        return {HISTORY: history}
    return {USER: str(user), HISTORY: history} if history is not None else {USER: str(user)}


def _check_columns(path: Path, names: list[str]) -> None:
    if USER not in names and HISTORY not in names:
        found = ", ".join(repr(n) for n in names[:10]) or "none"
        raise DataError(f"{path}: needs a 'user' or a 'history' column; found {found}")


def _csv_rows(path: Path, sep: str) -> Iterator[Request]:
    with open_text(path) as fh:
        reader = csv.DictReader(fh, delimiter=sep)
        try:
            _check_columns(path, [str(n).strip() for n in reader.fieldnames or []])
            reader.fieldnames = [str(n).strip() for n in reader.fieldnames or []]
            for row in reader:
                if None in row:  # more cells than the header has columns
                    raise DataError(
                        f"{path} line {reader.line_num}: {len(row) - 1 + len(row[None])} cells, "
                        f"the header has {len(row) - 1}"
                    )
                user = (row.get(USER) or "").strip() or None
                history = row.get(HISTORY)
                yield _row(
                    path, f"line {reader.line_num}", user, history if history and history.strip() else None
                )
        except (csv.Error, UnicodeDecodeError) as e:
            raise DataError(f"{path} line {reader.line_num}: {e}") from None


def _jsonl_rows(path: Path) -> Iterator[Request]:
    with open_text(path) as fh:
        n = 0
        try:
            for n, line in enumerate(fh, 1):  # noqa: B007 (n names the line of a decoding error)
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path} line {n}: not valid JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise DataError(f"{path} line {n}: expected a JSON object with 'user' and/or 'history'")
                yield _row(path, f"line {n}", obj.get(USER), obj.get(HISTORY))
        except UnicodeDecodeError as e:
            raise DataError(f"{path} line {n + 1}: not UTF-8 text ({e.reason})") from None


def _parquet(path: Path) -> pq.ParquetFile:
    try:
        # pre_buffer keeps every row group's bytes cached until the reader is closed: memory would grow
        # with the file (about its compressed size); without it, one row group is held at a time.
        return pq.ParquetFile(path, pre_buffer=False)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable Parquet file ({str(e).splitlines()[0]})") from None


def _parquet_column(path: Path, col: pa.Array, name: str) -> list[Any]:
    """A ``user`` column as strings, a ``history`` column as lists of strings (text cells split), in
    Python."""
    t = col.type
    if name == USER:
        if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t)):
            raise DataError(f"{path}: column 'user' must hold strings or integers, not {t}")
        return pc.cast(col, pa.string()).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        v = t.value_type
        if not (pa.types.is_string(v) or pa.types.is_large_string(v) or pa.types.is_integer(v)):
            raise DataError(f"{path}: column 'history' must hold lists of strings or integers, not {t}")
        return pc.cast(col, pa.list_(pa.string())).to_pylist()  # type: ignore[no-any-return]
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return [None if h is None else parse_history(h) for h in col.to_pylist()]
    raise DataError(f"{path}: column 'history' must hold lists of item IDs, not {t}")


def _parquet_rows(path: Path) -> Iterator[Request]:
    pf = _parquet(path)
    names = list(pf.schema_arrow.names)
    _check_columns(path, names)
    cols = [c for c in (USER, HISTORY) if c in names]
    start = 0
    try:
        for batch in pf.iter_batches(batch_size=_PARQUET_BATCH, columns=cols):
            # The columns' types were checked as a whole: the rows need no per-value checks (the hot loop
            # of a million-user file).
            values = {c: _parquet_column(path, batch.column(c), c) for c in cols}
            users = values.get(USER, [None] * batch.num_rows)
            histories = values.get(HISTORY, [None] * batch.num_rows)
            for i, (user, history) in enumerate(zip(users, histories, strict=True)):
                if history is not None and None in history:
                    raise DataError(f"{path} row {start + i + 1}: history has a null item")
                if user:
                    yield {USER: user, HISTORY: history} if history is not None else {USER: user}
                elif history is not None:
                    yield {HISTORY: history}
                else:
                    raise DataError(f"{path} row {start + i + 1}: no user and no history")
            start += batch.num_rows
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: unreadable Parquet data ({str(e).splitlines()[0]})") from None


__all__ = ["DatasetUsers", "FileUsers", "UserSource", "file_format", "parse_history"]
