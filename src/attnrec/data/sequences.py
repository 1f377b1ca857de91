"""Ragged per-user item sequences (CSR) with their per-event columns, one per declared signal.

Re-exported by :mod:`attnrec.data.schema`, whose conventions hold here: item index 0 is padding, and
a column's name and dtype are those of its :class:`~attnrec.data.signals.Signal`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from attnrec.data import signals as sig
from attnrec.data.errors import DataError


def _checked_columns(columns: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Columns in their fixed dtypes; an unknown name or a length other than ``n`` is a :class:`DataError`."""
    out: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        declared = sig.find_signal(name)
        if declared is None:
            known = ", ".join(s.name for s in sig.signals())
            raise DataError(f"unknown sequence column {name!r}; use {known} (or declare it as a signal)")
        dtype = declared.dtype
        arr = np.asarray(values, dtype=dtype)
        if arr.shape != (n,):
            raise DataError(f"sequence column {name!r} has shape {arr.shape}, expected ({n},) like the items")
        out[name] = arr
    return out


@dataclass(frozen=True)
class Sequences:
    """Ragged per-user item sequences in CSR form: user ``u`` owns ``items[offsets[u]:offsets[u+1]]``.

    ``columns`` holds optional per-event columns (names and dtypes of :mod:`attnrec.data.signals`),
    each aligned with ``items``; every operation below carries them along.
    """

    offsets: np.ndarray
    items: np.ndarray
    n_items: int
    columns: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.columns:
            object.__setattr__(self, "columns", _checked_columns(self.columns, len(self.items)))

    def column(self, name: str) -> np.ndarray:
        """The per-event column ``name`` (aligned with ``items``); a :class:`DataError` when absent."""
        values = self.columns.get(name)
        if values is None:
            have = ", ".join(self.columns) or "none"
            raise DataError(f"these sequences have no {name!r} column (columns: {have})")
        return values

    def _with(self, offsets: np.ndarray, idx: np.ndarray) -> Sequences:
        """The elements at ``idx`` (indices or a boolean mask; items and every column) under new
        ``offsets``."""
        return Sequences(offsets, self.items[idx], self.n_items, {k: v[idx] for k, v in self.columns.items()})

    @property
    def n_users(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def owners(self) -> np.ndarray:
        """``(M,)`` int64: the row (user) each element belongs to, aligned with ``items``."""
        return np.repeat(np.arange(self.n_users, dtype=np.int64), self.lengths())

    def __getitem__(self, u: int) -> np.ndarray:
        return self.items[self.offsets[u] : self.offsets[u + 1]]

    @classmethod
    def from_lists(cls, seqs: Sequence[Sequence[int]], n_items: int) -> Sequences:
        lengths = np.array([len(s) for s in seqs], dtype=np.int64)
        offsets = np.zeros(len(seqs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter((i for s in seqs for i in s), dtype=np.int64, count=int(offsets[-1]))
        return cls(offsets, flat, n_items)

    def take(self, users: np.ndarray) -> Sequences:
        """Sequences of the given users, in that order."""
        users = np.asarray(users, dtype=np.int64)
        lengths = self.lengths()[users]
        offsets = np.zeros(len(users) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        idx = np.repeat(self.offsets[users] - offsets[:-1], lengths) + np.arange(offsets[-1])
        return self._with(offsets, idx)

    def truncate_end(self, drop: int) -> Sequences:
        """Each sequence without its last ``drop`` items (shorter ones become empty)."""
        lengths = np.maximum(self.lengths() - drop, 0)
        offsets = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        idx = np.repeat(self.offsets[:-1] - offsets[:-1], lengths) + np.arange(offsets[-1])
        return self._with(offsets, idx)

    def spans(self, starts: np.ndarray, ends: np.ndarray) -> Sequences:
        """One row per span ``items[starts[k]:ends[k]]`` of the flat arrays (every column with them), e.g.
        the histories before given events."""
        starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        lengths = np.maximum(ends - starts, 0)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return self._with(offsets, np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1]))

    def select(self, keep: np.ndarray) -> Sequences:
        """The same users with only the elements where the boolean mask ``keep`` is true."""
        counts = np.bincount(self.owners()[keep], minlength=self.n_users)
        offsets = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return self._with(offsets, keep)

    def padded(self, max_len: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Left-padded ``(n, max_len)`` int64 matrix of the last ``max_len`` items per row."""
        return self._left_padded(self.items, np.dtype(np.int64), max_len, rows)

    def padded_column(self, name: str, max_len: int, rows: np.ndarray | None = None) -> np.ndarray:
        """The column ``name`` left-padded exactly like :meth:`padded` (with zeros): position
        ``[r, j]`` of both matrices describes the same event."""
        values = self.column(name)
        return self._left_padded(values, values.dtype, max_len, rows)

    def _left_padded(
        self, values: np.ndarray, dtype: np.dtype[np.generic], max_len: int, rows: np.ndarray | None
    ) -> np.ndarray:
        rows = np.arange(self.n_users) if rows is None else np.asarray(rows, dtype=np.int64)
        out = np.zeros((len(rows), max_len), dtype=dtype)
        if len(rows) == 0 or max_len == 0:
            return out
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lens = np.minimum(ends - starts, max_len)
        # Column j of row r holds element ends[r] - max_len + j when that index is >= the row start.
        col = np.arange(max_len)[None, :]
        src = ends[:, None] - max_len + col
        valid = col >= (max_len - lens)[:, None]
        out[valid] = values[src[valid]]
        return out

    def user_item_keys(self) -> np.ndarray:
        """Sorted ``user * (n_items + 1) + item`` keys, for vectorised membership tests."""
        return np.unique(self.owners() * (self.n_items + 1) + self.items)


__all__ = ["Sequences"]
