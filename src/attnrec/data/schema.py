"""Immutable data containers: ID maps, interaction logs and per-user sequences.

Conventions used everywhere in attnrec:

* External IDs (what users and files use) are strings. Numeric IDs from files are kept as
  their decimal text, so ``"42"`` and ``42`` name the same user; an integral float is its
  integer, so ``42.0`` and ``"42.0"`` name it too (:mod:`attnrec.data.boundary`).
* Internal item indices run ``1..n_items``; index ``0`` is the padding item and is never
  scored or recommended. Internal user indices run ``0..n_users-1``.
* Per-event context travels with the sequences as named columns aligned with the items, one per
  declared signal (:mod:`attnrec.data.signals`): ``timestamp`` (int64 unix seconds), ``event``
  (int64 code ``1..E`` of the log's event vocabulary, ``0`` = padding), ``rating`` (float32), and
  any declared signal (int64 codes of its vocabulary, ``1`` = unknown, or float32 numbers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnrec.data import signals as sig
from attnrec.data.errors import DataError as DataError  # re-exported: the data layer's error
from attnrec.data.sequences import Sequences as Sequences  # re-exported with the logs it is made from

if TYPE_CHECKING:  # these modules build on this one; the annotations only name their classes
    from attnrec.data.features import FeatureTable
    from attnrec.data.frames import from_frame as read_frame

PAD = 0

TIMESTAMP, EVENT, RATING = sig.TIMESTAMP.name, sig.EVENT.name, sig.RATING.name
#: The built-in per-event columns and the dtype each is stored in (a declared signal's is its
#: :attr:`~attnrec.data.signals.Signal.dtype`).
COLUMN_DTYPES: dict[str, np.dtype[np.generic]] = {s.name: s.dtype for s in sig.signals() if s.builtin}


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


def signal_vocabulary(values: np.ndarray | Sequence[object]) -> IdMap:
    """The vocabulary of a declared categorical signal: its distinct values, sorted; code = index + 2
    (0 = padding, 1 = a value the vocabulary does not hold, :data:`~attnrec.data.signals.UNKNOWN_CODE`)."""
    distinct = {str(x) for x in pd.unique(np.asarray(values, dtype=object))}
    return IdMap(np.array(sorted(distinct), dtype=object), offset=sig.UNKNOWN_CODE + 1)


def signal_codes(vocabulary: IdMap, values: Sequence[object] | np.ndarray) -> np.ndarray:
    """int64 codes of a declared categorical signal's values; a value outside ``vocabulary`` gets
    :data:`~attnrec.data.signals.UNKNOWN_CODE`."""
    arr = np.asarray(values, dtype=object).astype(str)
    codes = np.asarray(pd.Index(vocabulary.external.astype(str)).get_indexer(arr), dtype=np.int64)
    return np.where(codes < 0, sig.UNKNOWN_CODE, codes + vocabulary.offset)


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
    tables keyed by external IDs (see :mod:`attnrec.data.features`). ``signals`` holds the columns of
    declared signals (:mod:`attnrec.data.signals`) by name: text for categorical ones (``vocabularies``
    is theirs, built from them when not given), numbers for numeric ones.
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
    signals: Mapping[str, np.ndarray] = field(default_factory=dict)
    vocabularies: Mapping[str, IdMap] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.event is not None and self.events is None:
            object.__setattr__(self, "events", event_vocabulary(self.event))
        vocabularies = dict(self.vocabularies)
        for name, values in self.signals.items():
            if len(values) != len(self.user):
                raise DataError(
                    f"signal column {name!r} has {len(values)} values for {len(self.user)} events"
                )
            if sig.get_signal(name).kind == "categorical" and name not in vocabularies:
                vocabularies[name] = signal_vocabulary(values)
        object.__setattr__(self, "vocabularies", vocabularies)

    if TYPE_CHECKING:  # the reader's own signature, stated once in attnrec.data.frames
        from_frame = staticmethod(read_frame)
    else:

        @staticmethod
        def from_frame(*args, **kwargs):
            """A log from a pandas DataFrame, pyarrow Table or polars DataFrame; columns not named
            are guessed (``userId``, ``item_id``, ``timestamp`` ...).

            See :func:`attnrec.data.from_frame`, whose signature this takes.
            """
            from attnrec.data.frames import from_frame  # builds on this module

            return from_frame(*args, **kwargs)

    def to_frame(self) -> pd.DataFrame:
        """The log as a pandas DataFrame in its order (user, then time): ``user`` and ``item`` as
        external IDs, and ``timestamp``, ``rating`` and ``event`` when the log has them."""
        out = {
            "user": self.users.external[self.user],
            "item": self.items.external[self.item - self.items.offset],
        }
        optional = {TIMESTAMP: self.timestamp, RATING: self.rating, EVENT: self.event}
        return pd.DataFrame(out | {k: v for k, v in optional.items() if v is not None} | dict(self.signals))

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
        """The log's per-event columns in their signals' dtypes: timestamps floored to whole seconds,
        events as codes of :attr:`events`, ratings as float32, declared categorical signals as codes
        of their :attr:`vocabularies`, numeric ones as float32."""
        cols: dict[str, np.ndarray] = {}
        if self.timestamp is not None:
            if len(self.timestamp) and not np.isfinite(self.timestamp).all():
                raise DataError(f"{self.source.name}: timestamps must be finite numbers")
            cols[TIMESTAMP] = np.floor(self.timestamp).astype(np.int64)
        if self.event is not None and self.events is not None:
            cols[EVENT] = event_codes(self.events, self.event)
        if self.rating is not None:
            cols[RATING] = np.asarray(self.rating, dtype=np.float32)
        for name, values in self.signals.items():
            vocabulary = self.vocabularies.get(name)
            if vocabulary is not None:
                cols[name] = signal_codes(vocabulary, values)
            else:
                cols[name] = np.asarray(values, dtype=sig.get_signal(name).dtype)
        return cols

    def item_popularity(self) -> np.ndarray:
        """Interaction count per internal item index (length ``n_items + 1``, pad = 0)."""
        return np.bincount(self.item, minlength=self.n_items + 1).astype(np.int64)
