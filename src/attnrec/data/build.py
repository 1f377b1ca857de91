"""Turn raw columns into an :class:`Interactions` log: ordering, filtering, ID maps."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnrec.data.boundary import (
    ColumnValues,
    Origin,
    id_column,
    id_text,
    is_count,
    number_column,
    time_column,
)
from attnrec.data.schema import DataError, DataSource, IdMap, Interactions, event_vocabulary
from attnrec.data.signals import declared, get_signal

if TYPE_CHECKING:
    from attnrec.data.features import FeatureTable


def from_columns(
    users: ColumnValues,
    items: ColumnValues,
    timestamps: ColumnValues | None = None,
    ratings: ColumnValues | None = None,
    events: ColumnValues | None = None,
    *,
    source: DataSource = DataSource("unnamed"),
    item_titles: Mapping[str, str] | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
    item_features: FeatureTable | None = None,
    user_features: FeatureTable | None = None,
    time_format: str | None = None,
    signals: Mapping[str, ColumnValues] | None = None,
) -> Interactions:
    """Build an interaction log from aligned columns of external IDs (lists, numpy arrays, pandas
    Series or pyarrow arrays).

    Every column passes the boundary of :mod:`attnrec.data.boundary`: IDs become text (``1.0`` ->
    ``"1"``), timestamps unix seconds (numbers, ``datetime64`` of any unit, or text dates read
    with ``time_format``), ratings numbers; a missing or malformed value is a :class:`DataError`
    naming the row. Rows are ordered per user by timestamp with ties kept in input order (stable
    sort); without timestamps the input order is the chronology. ``min_rating`` keeps only rows
    rated at least that much (implicit feedback from ratings); ``k_core`` repeatedly drops users
    and items with fewer than ``k_core`` interactions. Event names get their vocabulary here
    (sorted distinct names of the rows kept; code = index + 1). Feature tables are keyed by
    external IDs, so they are attached as given whatever the filters drop. ``signals`` holds the
    columns of declared signals by name (:mod:`attnrec.data.signals`).
    """
    origin = Origin(source.path or source.name)
    n = len(users)
    given = {"items": items, "timestamps": timestamps, "ratings": ratings, "events": events} | dict(
        signals or {}
    )
    for name, col in given.items():
        if col is not None and len(col) != n:
            raise DataError(f"the {name} and users columns have different lengths ({len(col)} and {n} rows)")
    columns = CheckedColumns(
        id_column(users, "user", "users", origin),
        id_column(items, "item", "items", origin),
        None if timestamps is None else time_column(timestamps, "timestamps", origin, time_format),
        None if ratings is None else number_column(ratings, "rating", "ratings", origin),
        None if events is None else id_column(events, "event", "events", origin),
        {name: checked_signal(name, col, name, origin) for name, col in (signals or {}).items()},
    )
    log = build_log(columns, source=source, item_titles=item_titles, min_rating=min_rating, k_core=k_core)
    return replace(log, item_features=item_features, user_features=user_features)


@dataclass(frozen=True)
class CheckedColumns:
    """Aligned columns that passed the boundary (:mod:`attnrec.data.boundary`): IDs and events as
    text, timestamps as unix seconds, ratings as float64."""

    user: np.ndarray
    item: np.ndarray
    timestamp: np.ndarray | None = None
    rating: np.ndarray | None = None
    event: np.ndarray | None = None
    signals: Mapping[str, np.ndarray] = field(default_factory=dict)


def checked_signal(name: str, values: ColumnValues, label: object, origin: Origin) -> np.ndarray:
    """A declared signal's column through the boundary: text for categorical ones, numbers otherwise."""
    sig = get_signal(name)
    if sig.kind == "categorical":
        return id_column(values, name, label, origin)
    return number_column(values, name, label, origin)


def signal_columns(
    column: Callable[[str], ColumnValues], roles: Mapping[str, object], origin: Origin
) -> dict[str, np.ndarray]:
    """The checked columns of the declared signals a table maps (``roles``), read by ``column(role)``."""
    return {
        s.name: checked_signal(s.name, column(s.name), roles[s.name], origin)
        for s in declared()
        if s.name in roles
    }


def check_filters(min_rating: object, k_core: object) -> None:
    """A one-line :class:`DataError` unless ``min_rating`` is None or a number (not NaN) and ``k_core`` a
    whole number at least 0: ``min_rating=nan`` filtered out every event ("no interactions"), ``"4"`` was
    numpy's traceback, ``k_core=-3`` or ``2.5`` was taken and ``"5"`` was a TypeError."""
    if min_rating is not None and (
        isinstance(min_rating, bool | np.bool_)
        or not isinstance(min_rating, numbers.Real)
        or math.isnan(min_rating)
    ):
        raise DataError(f"min_rating must be a number, not {type(min_rating).__name__} {min_rating!r:.40}")
    if not is_count(k_core):
        raise DataError(
            f"k_core must be a whole number at least 0, not {type(k_core).__name__} {k_core!r:.40}"
        )


def build_log(
    columns: CheckedColumns,
    *,
    source: DataSource = DataSource("unnamed"),
    item_titles: Mapping[str, str] | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
) -> Interactions:
    """The log of checked columns: filters, ID maps and the per-user chronological order of
    :func:`from_columns` (which checks its columns, calls this, then attaches the feature tables)."""
    check_filters(min_rating, k_core)
    u, it, ts, rt, ev = columns.user, columns.item, columns.timestamp, columns.rating, columns.event
    extra = dict(columns.signals)
    n = len(u)
    keep = np.ones(n, dtype=bool)
    if min_rating is not None:
        if rt is None:
            raise DataError("min_rating was given but the data has no rating column")
        keep &= rt >= min_rating
    if n == 0 or not keep.any():
        raise DataError(
            f"{source.path or source.name}: no interactions (empty file or everything filtered out)"
        )
    u, it = u[keep], it[keep]
    ts = None if ts is None else ts[keep]
    rt = None if rt is None else rt[keep]
    ev = None if ev is None else ev[keep]
    extra = {k: v[keep] for k, v in extra.items()}
    if k_core > 1:
        mask = _k_core_mask(u, it, k_core)
        if not mask.any():
            raise DataError(f"{k_core}-core filtering removed every interaction")
        u, it = u[mask], it[mask]
        ts = None if ts is None else ts[mask]
        rt = None if rt is None else rt[mask]
        ev = None if ev is None else ev[mask]
        extra = {k: v[mask] for k, v in extra.items()}

    user_codes, user_ext = _codes_in_first_appearance_order(u)
    item_codes, item_ext = _codes_in_first_appearance_order(it)
    order = np.lexsort((ts,) + (user_codes,)) if ts is not None else np.argsort(user_codes, kind="stable")
    # lexsort is stable, so equal (user, timestamp) rows keep their file order.
    titles = None if item_titles is None else {id_text(k): str(v) for k, v in item_titles.items()}
    return Interactions(
        user=user_codes[order],
        item=item_codes[order] + 1,
        users=IdMap(user_ext, 0),
        items=IdMap(item_ext, 1),
        timestamp=None if ts is None else ts[order],
        rating=None if rt is None else rt[order],
        event=None if ev is None else ev[order],
        item_titles=titles,
        source=source,
        events=None if ev is None else event_vocabulary(ev),
        signals={k: v[order] for k, v in extra.items()},
    )


def _codes_in_first_appearance_order(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # pandas.factorize hashes instead of sorting Python strings: same result, ~20x faster.
    codes, uniq = pd.factorize(values)
    ext = np.asarray(uniq, dtype=object)
    return codes.astype(np.int64), ext


def _k_core_mask(u: np.ndarray, it: np.ndarray, k: int) -> np.ndarray:
    uc: np.ndarray = pd.factorize(u)[0]
    ic: np.ndarray = pd.factorize(it)[0]
    return k_core_mask(uc, ic, int(uc.max()) + 1, int(ic.max()) + 1, k)


def k_core_mask(user: np.ndarray, item: np.ndarray, n_users: int, n_items: int, k: int) -> np.ndarray:
    """Rows kept by the ``k``-core of a log given as user and item codes (``0..n-1``).

    Dropping a user can push an item below ``k`` and back, so the counts are redone until no
    row is dropped.
    """
    mask = np.ones(len(user), dtype=bool)
    while True:
        uc = np.bincount(user[mask], minlength=n_users)
        ic = np.bincount(item[mask], minlength=n_items)
        new: np.ndarray = mask & (uc[user] >= k) & (ic[item] >= k)
        if new.sum() == mask.sum():
            return new
        mask = new
