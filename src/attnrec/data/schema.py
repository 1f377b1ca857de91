"""Immutable data containers: ID maps, interaction logs and per-user sequences.

Conventions used everywhere in attnrec:

* External IDs (what users and files use) are strings. Numeric IDs from files are kept as
  their decimal text, so ``"42"`` and ``42`` name the same user.
* Internal item indices run ``1..n_items``; index ``0`` is the padding item and is never
  scored or recommended. Internal user indices run ``0..n_users-1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

PAD = 0


class DataError(ValueError):
    """Bad or unusable input data; the message says what and where."""


@dataclass(frozen=True)
class IdMap:
    """Bijection between external string IDs and contiguous internal indices.

    Parameters
    ----------
    external : np.ndarray
        External IDs (``str``), in internal-index order starting at ``offset``.
    offset : int
        Internal index of ``external[0]``: 1 for items (0 is padding), 0 for users.
    """

    external: np.ndarray
    offset: int = 0
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        ext = np.asarray(self.external, dtype=object)
        object.__setattr__(self, "external", ext)
        index = {str(e): i + self.offset for i, e in enumerate(ext)}
        if len(index) != len(ext):
            raise DataError("IdMap: external IDs are not unique")
        object.__setattr__(self, "_index", index)

    @classmethod
    def from_values(cls, values: Iterable[object], offset: int = 0) -> IdMap:
        """Build a map from IDs in order of first appearance."""
        seen: dict[str, None] = {}
        for v in values:
            seen.setdefault(str(v), None)
        return cls(np.array(list(seen), dtype=object), offset)

    def __len__(self) -> int:
        return len(self.external)

    def __contains__(self, ext: object) -> bool:
        return str(ext) in self._index

    def get(self, ext: object) -> int | None:
        """Internal index of ``ext`` or ``None`` when unknown."""
        return self._index.get(str(ext))

    def to_internal(self, ext: Sequence[object]) -> np.ndarray:
        """Internal indices of known IDs; raises :class:`DataError` naming unknown ones."""
        out = np.empty(len(ext), dtype=np.int64)
        missing = []
        for i, e in enumerate(ext):
            j = self._index.get(str(e))
            if j is None:
                missing.append(str(e))
            else:
                out[i] = j
        if missing:
            raise DataError(f"unknown IDs: {missing[:10]}{' ...' if len(missing) > 10 else ''}")
        return out

    def split_known(self, ext: Sequence[object]) -> tuple[np.ndarray, list[str]]:
        """Internal indices of the known IDs (order kept) and the list of unknown ones."""
        known, unknown = [], []
        for e in ext:
            j = self._index.get(str(e))
            if j is None:
                unknown.append(str(e))
            else:
                known.append(j)
        return np.asarray(known, dtype=np.int64), unknown

    def to_external(self, idx: np.ndarray | Sequence[int]) -> list[str]:
        """External IDs of internal indices."""
        arr = np.asarray(idx, dtype=np.int64) - self.offset
        return [str(x) for x in self.external[arr]]

    def to_list(self) -> list[str]:
        return [str(x) for x in self.external]


@dataclass(frozen=True)
class DataSource:
    """Where a dataset came from; recorded in every evaluation protocol."""

    name: str
    path: str = ""
    format: str = ""
    sha256: str = ""


class UserItemLog:
    """Sizes shared by the logs that index users and items through an :class:`IdMap` each.

    A plain base (not a dataclass): the subclasses declare ``user``, ``users`` and ``items``
    as their own fields.
    """

    user: np.ndarray
    users: IdMap
    items: IdMap

    @property
    def n_users(self) -> int:
        return len(self.users)

    @property
    def n_items(self) -> int:
        return len(self.items)

    def __len__(self) -> int:
        return len(self.user)


@dataclass(frozen=True)
class Interactions(UserItemLog):
    """An interaction log in internal indices, sorted by user then time (stable).

    ``user``/``item`` are int64 arrays of equal length; ``timestamp`` and ``rating`` are
    optional float arrays aligned with them. ``item_titles`` maps external item IDs to
    display titles when the data has them.
    """

    user: np.ndarray
    item: np.ndarray
    users: IdMap
    items: IdMap
    timestamp: np.ndarray | None = None
    rating: np.ndarray | None = None
    event: np.ndarray | None = None
    item_titles: dict[str, str] | None = None
    source: DataSource = DataSource("unnamed")

    def sequences(self) -> Sequences:
        """Per-user item sequences (the log is already in chronological order)."""
        counts = np.bincount(self.user, minlength=self.n_users)
        offsets = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return Sequences(offsets=offsets, items=self.item.astype(np.int64), n_items=self.n_items)

    def item_popularity(self) -> np.ndarray:
        """Interaction count per internal item index (length ``n_items + 1``, pad = 0)."""
        return np.bincount(self.item, minlength=self.n_items + 1).astype(np.int64)


@dataclass(frozen=True)
class Sequences:
    """Ragged per-user item sequences in CSR form: user ``u`` owns ``items[offsets[u]:offsets[u+1]]``."""

    offsets: np.ndarray
    items: np.ndarray
    n_items: int

    @property
    def n_users(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

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
        return Sequences(offsets, self.items[idx], self.n_items)

    def truncate_end(self, drop: int) -> Sequences:
        """Each sequence without its last ``drop`` items (shorter ones become empty)."""
        lengths = np.maximum(self.lengths() - drop, 0)
        offsets = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        idx = np.repeat(self.offsets[:-1] - offsets[:-1], lengths) + np.arange(offsets[-1])
        return Sequences(offsets, self.items[idx], self.n_items)

    def padded(self, max_len: int, rows: np.ndarray | None = None) -> np.ndarray:
        """Left-padded ``(n, max_len)`` int64 matrix of the last ``max_len`` items per row."""
        rows = np.arange(self.n_users) if rows is None else np.asarray(rows, dtype=np.int64)
        out = np.zeros((len(rows), max_len), dtype=np.int64)
        if len(rows) == 0 or max_len == 0:
            return out
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lens = np.minimum(ends - starts, max_len)
        # Column j of row r holds item ends[r] - max_len + j when that index is >= the row start.
        col = np.arange(max_len)[None, :]
        src = ends[:, None] - max_len + col
        valid = col >= (max_len - lens)[:, None]
        out[valid] = self.items[src[valid]]
        return out

    def user_item_keys(self) -> np.ndarray:
        """Sorted ``user * (n_items + 1) + item`` keys, for vectorised membership tests."""
        users = np.repeat(np.arange(self.n_users, dtype=np.int64), self.lengths())
        return np.unique(users * (self.n_items + 1) + self.items)
