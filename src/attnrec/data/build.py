"""Turn raw columns into an :class:`Interactions` log: ordering, filtering, ID maps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from attnrec.data.schema import DataError, DataSource, IdMap, Interactions, event_vocabulary

if TYPE_CHECKING:
    from attnrec.data.features import FeatureTable


def from_columns(
    users: Sequence[object] | np.ndarray,
    items: Sequence[object] | np.ndarray,
    timestamps: Sequence[float] | np.ndarray | None = None,
    ratings: Sequence[float] | np.ndarray | None = None,
    events: Sequence[object] | np.ndarray | None = None,
    *,
    source: DataSource = DataSource("unnamed"),
    item_titles: dict[str, str] | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
    item_features: FeatureTable | None = None,
    user_features: FeatureTable | None = None,
) -> Interactions:
    """Build an interaction log from aligned columns of external IDs.

    Rows are ordered per user by timestamp with ties kept in input order (stable sort); without
    timestamps the input order is the chronology. ``min_rating`` keeps only rows rated at least
    that much (implicit feedback from ratings); ``k_core`` repeatedly drops users and items with
    fewer than ``k_core`` interactions. Event names get their vocabulary here (sorted distinct
    names of the rows kept; code = index + 1). Feature tables are keyed by external IDs, so
    they are attached as given whatever the filters drop.
    """
    u = np.asarray(users).astype(str).astype(object)
    it = np.asarray(items).astype(str).astype(object)
    n = len(u)
    if len(it) != n:
        raise DataError("user and item columns have different lengths")
    ts = None if timestamps is None else np.asarray(timestamps, dtype=np.float64)
    rt = None if ratings is None else np.asarray(ratings, dtype=np.float64)
    ev = None if events is None else np.asarray(events).astype(str).astype(object)
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
    if k_core > 1:
        mask = _k_core_mask(u, it, k_core)
        if not mask.any():
            raise DataError(f"{k_core}-core filtering removed every interaction")
        u, it = u[mask], it[mask]
        ts = None if ts is None else ts[mask]
        rt = None if rt is None else rt[mask]
        ev = None if ev is None else ev[mask]

    user_codes, user_ext = _codes_in_first_appearance_order(u)
    item_codes, item_ext = _codes_in_first_appearance_order(it)
    order = np.lexsort((ts,) + (user_codes,)) if ts is not None else np.argsort(user_codes, kind="stable")
    # lexsort is stable, so equal (user, timestamp) rows keep their file order.
    return Interactions(
        user=user_codes[order],
        item=item_codes[order] + 1,
        users=IdMap(user_ext, 0),
        items=IdMap(item_ext, 1),
        timestamp=None if ts is None else ts[order],
        rating=None if rt is None else rt[order],
        event=None if ev is None else ev[order],
        item_titles=item_titles,
        source=source,
        events=None if ev is None else event_vocabulary(ev),
        item_features=item_features,
        user_features=user_features,
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
