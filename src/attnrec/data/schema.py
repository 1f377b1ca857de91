"""Immutable data containers: ID maps, interaction logs and per-user sequences.

Conventions used everywhere in attnrec:

* External IDs (what users and files use) are strings. Numeric IDs from files are kept as
  their decimal text, so ``"42"`` and ``42`` name the same user; an integral float is its
  integer, so ``42.0`` and ``"42.0"`` name it too (:mod:`attnrec.data.boundary`).
* Internal item indices run ``1..n_items``; index ``0`` is the padding item and is never
  scored or recommended. Internal user indices run ``0..n_users-1``.
* Per-event context travels with the sequences as named columns aligned with the items
  (:data:`COLUMN_DTYPES`): ``timestamp`` (int64 unix seconds), ``event`` (int64 code ``1..E`` of
  the log's event vocabulary, ``0`` = padding) and ``rating`` (float32).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # these modules build on this one; the annotations only name their classes
    from attnrec.data.feature_files import FeatureSource
    from attnrec.data.features import FeatureTable
    from attnrec.data.frames import FrameLike

PAD = 0

TIMESTAMP, EVENT, RATING = "timestamp", "event", "rating"
#: The per-event columns a :class:`Sequences` may carry, and the dtype each is stored in.
COLUMN_DTYPES: dict[str, np.dtype[np.generic]] = {
    TIMESTAMP: np.dtype(np.int64),
    EVENT: np.dtype(np.int64),
    RATING: np.dtype(np.float32),
}


class DataError(ValueError):
    """Bad or unusable input data; the message says what and where."""


def _id_text(value: object) -> str:
    """``value`` as an ID (:func:`attnrec.data.boundary.id_text`, which builds on this module)."""
    from attnrec.data.boundary import id_text

    return id_text(value)


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
            seen.setdefault(_id_text(v), None)
        return cls(np.array(list(seen), dtype=object), offset)

    def __len__(self) -> int:
        return len(self.external)

    def __contains__(self, ext: object) -> bool:
        return self.get(ext) is not None

    def get(self, ext: object) -> int | None:
        """Internal index of ``ext`` or ``None`` when unknown; ``ext`` is looked up as written, then
        as :func:`~attnrec.data.boundary.id_text` writes it (``1.0`` -> ``"1"``)."""
        j = self._index.get(str(ext))
        return j if j is not None else self._index.get(_id_text(ext))

    def to_internal(self, ext: Sequence[object]) -> np.ndarray:
        """Internal indices of known IDs; raises :class:`DataError` naming unknown ones."""
        out = np.empty(len(ext), dtype=np.int64)
        missing = []
        for i, e in enumerate(ext):
            j = self.get(e)
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
            j = self.get(e)
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


def event_vocabulary(names: np.ndarray | Sequence[object]) -> IdMap:
    """The event vocabulary of a log: its distinct event names, sorted; code = index + 1 (0 = padding)."""
    distinct = {str(x) for x in pd.unique(np.asarray(names, dtype=object))}
    return IdMap(np.array(sorted(distinct), dtype=object), offset=1)


def event_codes(vocabulary: IdMap, names: Sequence[object] | np.ndarray) -> np.ndarray:
    """int64 codes of event names; a name outside the vocabulary is a :class:`DataError` naming it."""
    values = np.asarray(names)
    if values.dtype != object:
        values = values.astype(str).astype(object)
    codes = np.asarray(pd.Index(vocabulary.external).get_indexer(values))  # -1: not in the vocabulary
    if len(codes) and codes.min() < 0:
        bad = str(values[int(np.argmin(codes))])
        raise DataError(f"event {bad!r} is not in the event vocabulary {vocabulary.to_list()}")
    return codes.astype(np.int64) + 1


def event_names(vocabulary: IdMap, codes: Sequence[int] | np.ndarray) -> list[str]:
    """Event names of codes (``0``, the padding code, gives ``""``)."""
    arr = np.asarray(codes, dtype=np.int64)
    names = np.concatenate([np.array([""], dtype=object), vocabulary.external])
    return [str(x) for x in names[arr]]


@dataclass(frozen=True)
class Interactions(UserItemLog):
    """An interaction log in internal indices, sorted by user then time (stable).

    ``user``/``item`` are int64 arrays of equal length; ``timestamp`` and ``rating`` are
    optional float arrays aligned with them, ``event`` optional event names (``events`` is
    their vocabulary, built from them when not given). ``item_titles`` maps external item IDs
    to display titles when the data has them; ``item_features``/``user_features`` are optional
    tables keyed by external IDs (see :mod:`attnrec.data.features`).
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
    events: IdMap | None = None
    item_features: FeatureTable | None = None
    user_features: FeatureTable | None = None

    def __post_init__(self) -> None:
        if self.event is not None and self.events is None:
            object.__setattr__(self, "events", event_vocabulary(self.event))

    @classmethod
    def from_frame(
        cls,
        frame: FrameLike,
        user: str | None = None,
        item: str | None = None,
        timestamp: str | None = None,
        event: str | None = None,
        rating: str | None = None,
        *,
        time_format: str | None = None,
        min_rating: float | None = None,
        k_core: int = 0,
        titles: Mapping[Any, str] | pd.DataFrame | None = None,
        item_features: FeatureSource | None = None,
        user_features: FeatureSource | None = None,
        missing_features: str = "error",
        name: str = "DataFrame",
    ) -> Interactions:
        """A log from a pandas DataFrame, pyarrow Table or polars DataFrame; columns not named are
        guessed (``userId``, ``item_id``, ``timestamp`` ...). See :func:`attnrec.data.frames.from_frame`."""
        from attnrec.data.frames import from_frame  # builds on this module

        return from_frame(frame, user, item, timestamp, event, rating, time_format=time_format,
                          min_rating=min_rating, k_core=k_core, titles=titles, item_features=item_features,
                          user_features=user_features, missing_features=missing_features,
                          name=name)  # fmt: skip

    def to_frame(self) -> pd.DataFrame:
        """The log as a pandas DataFrame in its order (user, then time): ``user`` and ``item`` as
        external IDs, and ``timestamp``, ``rating`` and ``event`` when the log has them."""
        out = {
            "user": self.users.external[self.user],
            "item": self.items.external[self.item - self.items.offset],
        }
        optional = {TIMESTAMP: self.timestamp, RATING: self.rating, EVENT: self.event}
        return pd.DataFrame(out | {k: v for k, v in optional.items() if v is not None})

    def sequences(self, columns: bool = True) -> Sequences:
        """Per-user item sequences (the log is already in chronological order), carrying the
        per-event columns the log has (:meth:`event_columns`) unless ``columns=False``."""
        counts = np.bincount(self.user, minlength=self.n_users)
        offsets = np.zeros(self.n_users + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        cols = self.event_columns() if columns else {}
        return Sequences(
            offsets=offsets, items=self.item.astype(np.int64), n_items=self.n_items, columns=cols
        )

    def event_columns(self) -> dict[str, np.ndarray]:
        """The log's per-event columns in :data:`COLUMN_DTYPES`: timestamps floored to whole
        seconds, events as codes of :attr:`events`, ratings as float32."""
        cols: dict[str, np.ndarray] = {}
        if self.timestamp is not None:
            if len(self.timestamp) and not np.isfinite(self.timestamp).all():
                raise DataError(f"{self.source.name}: timestamps must be finite numbers")
            cols[TIMESTAMP] = np.floor(self.timestamp).astype(np.int64)
        if self.event is not None and self.events is not None:
            cols[EVENT] = event_codes(self.events, self.event)
        if self.rating is not None:
            cols[RATING] = np.asarray(self.rating, dtype=np.float32)
        return cols

    def item_popularity(self) -> np.ndarray:
        """Interaction count per internal item index (length ``n_items + 1``, pad = 0)."""
        return np.bincount(self.item, minlength=self.n_items + 1).astype(np.int64)


def _checked_columns(columns: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """Columns in their fixed dtypes; an unknown name or a length other than ``n`` is a :class:`DataError`."""
    out: dict[str, np.ndarray] = {}
    for name, values in columns.items():
        dtype = COLUMN_DTYPES.get(name)
        if dtype is None:
            raise DataError(f"unknown sequence column {name!r}; use {', '.join(COLUMN_DTYPES)}")
        arr = np.asarray(values, dtype=dtype)
        if arr.shape != (n,):
            raise DataError(f"sequence column {name!r} has shape {arr.shape}, expected ({n},) like the items")
        out[name] = arr
    return out


@dataclass(frozen=True)
class Sequences:
    """Ragged per-user item sequences in CSR form: user ``u`` owns ``items[offsets[u]:offsets[u+1]]``.

    ``columns`` holds optional per-event columns (names and dtypes in :data:`COLUMN_DTYPES`),
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

    def select(self, keep: np.ndarray) -> Sequences:
        """The same users with only the elements where the boolean mask ``keep`` is true."""
        users = np.repeat(np.arange(self.n_users), self.lengths())
        counts = np.bincount(users[keep], minlength=self.n_users)
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
        users = np.repeat(np.arange(self.n_users, dtype=np.int64), self.lengths())
        return np.unique(users * (self.n_items + 1) + self.items)
