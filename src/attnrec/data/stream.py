"""Streaming reader for Parquet interaction logs larger than memory.

:func:`read_parquet_stream` reads a Parquet file (or a directory of Parquet files) in record
batches with pyarrow, never holding the raw table: each batch's user and item IDs are turned into
int32 codes by incremental ID maps (vectorised for integer IDs, one dictionary lookup per distinct
string per batch for text IDs) and written into preallocated arrays; timestamps and ratings are
converted batch by batch. Only the encoded columns (4 + 4 + 8 bytes per row, plus 8 per rating)
and the ID maps live in memory, so a log of 20M rows needs a few hundred MB whatever the size of
its raw IDs. The result equals :func:`attnrec.data.readers.table.read_table` on the same file: same ID maps
(order of first appearance), same ordering (user, then time, ties in file order), same
``min_rating`` / ``k_core`` filtering.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from attnrec.data.boundary import Origin, check_time_format, id_text, number_column, time_column
from attnrec.data.build import check_filters, k_core_mask
from attnrec.data.files import content_sha256
from attnrec.data.readers.columns import resolve_columns
from attnrec.data.schema import DataError, DataSource, IdMap, Interactions
from attnrec.data.signals import declared

BATCH_ROWS = 1 << 20


class MissingValue(DataError):
    """A missing ID at ``row`` (0-based) of the batch passed to :meth:`IdEncoder.encode`."""

    def __init__(self, row: int) -> None:
        super().__init__(f"row {row + 1}: missing value")
        self.row = row


class IdEncoder:
    """Incremental map from external IDs to codes ``0..n-1`` in order of first appearance.

    Integer IDs (and integral floats) are mapped with sorted numpy arrays; text IDs (stripped of
    surrounding whitespace, as :func:`read_table` does) through a dict, one lookup per distinct
    value of each batch.
    """

    def __init__(self) -> None:
        self.n = 0
        self._vals = np.zeros(0, dtype=np.int64)  # sorted known integer IDs
        self._codes = np.zeros(0, dtype=np.int32)  # their codes
        self._int_ext: list[np.ndarray] = []  # integer IDs in code order, per batch
        self._index: dict[str, int] = {}  # text IDs -> codes (insertion order = code order)

    def encode(self, arr: pa.Array) -> np.ndarray:
        """Codes (int32) of a batch's ID column; a null or empty ID raises :class:`MissingValue`."""
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        if arr.null_count:
            raise MissingValue(_first_null(arr))
        if pa.types.is_floating(arr.type):
            f = arr.to_numpy(zero_copy_only=False)
            finite = np.isfinite(f)
            if not finite.all():  # NaN (or an infinity) is no ID
                raise MissingValue(int(np.flatnonzero(~finite)[0]))
            if np.all(f == np.round(f)):
                return self._encode_ints(f.astype(np.int64))
            arr = pc.cast(arr, pa.string())
        if pa.types.is_integer(arr.type):
            return self._encode_ints(arr.to_numpy(zero_copy_only=False).astype(np.int64))
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            arr = pc.cast(arr, pa.string())
        return self._encode_text(arr)

    def _encode_ints(self, vals: np.ndarray) -> np.ndarray:
        if self._index:
            raise DataError("an ID column mixes text and numbers across batches")
        u, first, inv = np.unique(vals, return_index=True, return_inverse=True)
        pos = np.searchsorted(self._vals, u)
        found = np.zeros(len(u), dtype=bool)
        if len(self._vals):
            found = self._vals[pos.clip(max=len(self._vals) - 1)] == u
        codes_u = np.empty(len(u), dtype=np.int32)
        codes_u[found] = self._codes[pos[found]]
        new = np.flatnonzero(~found)  # value order
        by_first = new[np.argsort(first[new], kind="stable")]  # first-appearance order
        codes_u[by_first] = np.arange(self.n, self.n + len(new), dtype=np.int32)
        self.n += len(new)
        self._int_ext.append(u[by_first])
        self._vals = np.insert(self._vals, pos[new], u[new])
        self._codes = np.insert(self._codes, pos[new], codes_u[new])
        return codes_u[inv.reshape(-1)]

    def _encode_text(self, arr: pa.Array) -> np.ndarray:
        if self._int_ext:
            raise DataError("an ID column mixes text and numbers across batches")
        enc = pc.dictionary_encode(arr)
        distinct = pc.utf8_trim_whitespace(enc.dictionary).to_pylist()  # first-appearance order
        idx: np.ndarray = enc.indices.to_numpy(zero_copy_only=False)
        if "" in distinct:
            raise MissingValue(int(np.flatnonzero(idx == distinct.index(""))[0]))
        values = [id_text(v) for v in distinct]  # "1.0" -> "1", as every reader does
        index = self._index
        codes_u = np.fromiter(
            (index.setdefault(v, len(index)) for v in values), dtype=np.int32, count=len(values)
        )
        self.n = len(index)
        codes: np.ndarray = codes_u[idx]
        return codes

    def external(self) -> np.ndarray:
        """External IDs (str, object array) in code order."""
        if self._int_ext:
            return np.concatenate(self._int_ext).astype(str).astype(object)
        return np.array(list(self._index), dtype=object)


def _first_null(arr: pa.Array) -> int:
    return int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".parquet", ".pq"))
        if not files:
            raise DataError(f"{path}: no .parquet files in this directory")
        return files
    if not path.exists():
        raise DataError(f"{path}: file not found")
    return [path]


def _sha256(files: list[Path]) -> str:
    """One file's content hash (Parquet is never gzip: the bytes as stored), or the hash of the files'
    hashes."""
    if len(files) == 1:
        return content_sha256(files[0])
    return hashlib.sha256("".join(content_sha256(f) for f in files).encode()).hexdigest()


def read_parquet_stream(
    path: str | Path,
    columns: Mapping[str, str | int] | None = None,
    *,
    name: str | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
    batch_rows: int = BATCH_ROWS,
    time_format: str | None = None,
) -> Interactions:
    """Read a Parquet interaction log (a file or a directory of files) in batches of ``batch_rows``.

    ``columns`` maps roles (user, item, timestamp, rating, event) to column names as in
    :func:`attnrec.data.readers.table.read_table`, which this function matches row for row; it
    holds only the encoded columns in memory, never the raw table. Values pass the boundary of
    :mod:`attnrec.data.boundary` (``time_format`` as there); errors (missing values, bad numbers)
    name the row (1-based, across files in name order).
    """
    check_time_format(time_format)
    check_filters(min_rating, k_core)
    p = Path(path)
    files = _files(p)
    try:
        dataset = pads.dataset([str(f) for f in files], format="parquet")
        n_rows = dataset.count_rows()
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"{p}: cannot be read as Parquet ({e})") from e
    if n_rows == 0:
        raise DataError(f"{p}: the file is empty (no interactions)")
    roles = resolve_columns(dataset.schema.names, columns, p)
    if min_rating is not None and "rating" not in roles:
        raise DataError("min_rating was given but the data has no rating column")
    buf = _Buffers(n_rows, roles, p, time_format)
    row0 = 0
    scanner = dataset.scanner(
        columns=[str(c) for c in roles.values()], batch_size=batch_rows, use_threads=False
    )
    try:
        for batch in scanner.to_batches():
            if batch.num_rows > 0:
                buf.add({role: batch.column(str(label)) for role, label in roles.items()}, row0, min_rating)
                row0 += batch.num_rows
    except pa.ArrowInvalid as e:
        raise DataError(f"{p}: cannot be read as Parquet ({e})") from e
    if buf.filled == 0:
        raise DataError(f"{p}: no interactions (empty file or everything filtered out)")
    pa.default_memory_pool().release_unused()
    return buf.to_interactions(k_core, DataSource(name or p.name, str(p), "parquet", _sha256(files)))


class _Buffers:
    """The encoded columns of the whole log, preallocated and filled batch by batch.

    Timestamp, rating and event columns exist only when the file maps those roles, and a declared
    signal's (:mod:`attnrec.data.signals`) only when the file has it: categorical values as codes of
    their own encoder, numbers as float64.
    """

    def __init__(self, n_rows: int, roles: dict[str, object], p: Path, time_format: str | None) -> None:
        self.labels = roles
        self.p = p
        self.time_format = time_format
        self.users, self.items, self.events = IdEncoder(), IdEncoder(), IdEncoder()
        self.user = np.empty(n_rows, dtype=np.int32)
        self.item = np.empty(n_rows, dtype=np.int32)
        self.ts = np.empty(n_rows, dtype=np.float64) if "timestamp" in roles else None
        self.rt = np.empty(n_rows, dtype=np.float64) if "rating" in roles else None
        self.ev = np.empty(n_rows, dtype=np.int32) if "event" in roles else None
        self.extra = {s.name: s for s in declared() if s.name in roles}
        self.encoders = {k: IdEncoder() for k, s in self.extra.items() if s.kind == "categorical"}
        self.signals = {
            k: np.empty(n_rows, dtype=np.int32 if k in self.encoders else np.float64) for k in self.extra
        }
        self.filled = 0

    def add(self, cols: dict[str, pa.Array], row0: int, min_rating: float | None) -> None:
        """Convert, filter by ``min_rating`` and encode one batch whose first row is ``row0``."""

        def line_of(row: int) -> str:
            return f"row {row0 + row + 1}"

        labels, origin = self.labels, Origin(str(self.p), line_of)
        p = self.p
        keep: np.ndarray | None = None
        rating = time = None
        if "rating" in cols:
            rating = number_column(cols["rating"], "rating", labels["rating"], origin)
            if min_rating is not None:
                keep = rating >= min_rating
        if "timestamp" in cols:
            time = time_column(cols["timestamp"], labels["timestamp"], origin, self.time_format)
        if keep is not None and not keep.all():
            sel = pa.array(keep)
            cols = {role: pc.filter(c, sel) for role, c in cols.items()}
            rating = rating[keep] if rating is not None else None
            time = time[keep] if time is not None else None
        sl = slice(self.filled, self.filled + len(cols["user"]))
        self.user[sl] = _checked(self.users, cols["user"], f"user (column {labels['user']!r})", row0, p, keep)
        self.item[sl] = _checked(self.items, cols["item"], f"item (column {labels['item']!r})", row0, p, keep)
        if self.ev is not None:
            self.ev[sl] = _checked(
                self.events, cols["event"], f"event (column {labels['event']!r})", row0, p, keep
            )
        if self.ts is not None and time is not None:
            self.ts[sl] = time
        if self.rt is not None and rating is not None:
            self.rt[sl] = rating
        for name, values in self.signals.items():
            what = f"{name} (column {labels[name]!r})"
            enc = self.encoders.get(name)
            if enc is not None:
                values[sl] = _checked(enc, cols[name], what, row0, p, keep)
            else:
                values[sl] = number_column(cols[name], name, labels[name], origin)
        self.filled = sl.stop

    def to_interactions(self, k_core: int, source: DataSource) -> Interactions:
        """The filled rows, ``k_core``-filtered, sorted by user then time, as a log.

        The buffers are handed over (not copied) and dropped column by column, so at most one
        extra column is alive at a time; the object is spent afterwards.
        """
        n = self.filled
        user, item = self.user[:n], self.item[:n]
        ts = None if self.ts is None else self.ts[:n]
        rt = None if self.rt is None else self.rt[:n]
        ev = None if self.ev is None else self.ev[:n]
        extra = {k: v[:n] for k, v in self.signals.items()}
        del self.user, self.item, self.ts, self.rt, self.ev, self.signals
        user_ext, item_ext = self.users.external(), self.items.external()
        if k_core > 1:
            mask = k_core_mask(user, item, self.users.n, self.items.n, k_core)
            if not mask.any():
                raise DataError(f"{k_core}-core filtering removed every interaction")
            if not mask.all():  # all kept: the codes are already in first-appearance order
                user, user_ext = _renumber(user[mask], user_ext)
                item, item_ext = _renumber(item[mask], item_ext)
                ts = None if ts is None else ts[mask]
                rt = None if rt is None else rt[mask]
                ev = None if ev is None else ev[mask]
                extra = {k: v[mask] for k, v in extra.items()}
            del mask
        # User, then time; ties keep file order (both sorts are stable). Each column is gathered in
        # turn and its buffer dropped.
        order = np.lexsort((ts, user)) if ts is not None else np.argsort(user, kind="stable")
        user_out = user[order].astype(np.int64)
        del user
        item_out = item[order].astype(np.int64)
        item_out += 1
        del item
        ts_out = None if ts is None else ts[order]
        del ts
        rt_out = None if rt is None else rt[order]
        del rt
        ev_out = None if ev is None else self.events.external()[ev[order]]
        signals = {
            k: self.encoders[k].external()[v[order]] if k in self.encoders else v[order]
            for k, v in extra.items()
        }
        return Interactions(
            user=user_out,
            item=item_out,
            users=IdMap(user_ext, 0),
            items=IdMap(item_ext, 1),
            timestamp=ts_out,
            rating=rt_out,
            event=ev_out,
            source=source,
            signals=signals,
        )


def _checked(
    enc: IdEncoder, arr: pa.Array, what: str, row0: int, p: Path, keep: np.ndarray | None
) -> np.ndarray:
    try:
        return enc.encode(arr)
    except MissingValue as e:
        row = e.row if keep is None else int(np.flatnonzero(keep)[e.row])  # row of the unfiltered batch
        raise DataError(f"{p}: row {row0 + row + 1}: missing {what}") from None
    except DataError as e:
        raise DataError(f"{p}: {what}: {e}") from None


def _renumber(codes: np.ndarray, ext: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of the kept rows renumbered ``0..`` in order of first appearance, and their external IDs."""
    u, first = np.unique(codes, return_index=True)
    kept = u[np.argsort(first, kind="stable")]
    table = np.full(len(ext), -1, dtype=np.int32)
    table[kept] = np.arange(len(kept), dtype=np.int32)
    return table[codes], ext[kept]


def parquet_rows(path: str | Path) -> int:
    """Rows of a Parquet file or directory, from the metadata only."""
    return int(pads.dataset([str(f) for f in _files(Path(path))], format="parquet").count_rows())


__all__ = ["IdEncoder", "MissingValue", "read_parquet_stream", "parquet_rows"]
