"""Filters applied to a built log: the papers' one-pass minimum counts, then a rebuild.

The k-core (repeated until stable) lives in :func:`attnrec.data.build.from_columns`; the
one-pass filter here counts once over the whole file, as the SASRec preprocessing script does,
so a user may keep fewer interactions than the minimum after items are dropped.
"""

from __future__ import annotations

import numpy as np

from attnrec.data.build import from_columns
from attnrec.data.schema import DataError, Interactions


def rebuild(data: Interactions, keep: np.ndarray | None = None, k_core: int = 0) -> Interactions:
    """The same log (optionally only the rows in ``keep``) rebuilt with fresh contiguous IDs, with its
    per-event columns, declared signals included, and its feature tables."""
    sel = np.ones(len(data), dtype=bool) if keep is None else keep
    titles = data.item_titles
    return from_columns(
        np.asarray(data.users.external, dtype=object)[data.user[sel]],
        np.asarray(data.items.external, dtype=object)[data.item[sel] - data.items.offset],
        None if data.timestamp is None else data.timestamp[sel],
        None if data.rating is None else data.rating[sel],
        None if data.event is None else data.event[sel],
        source=data.source,
        item_titles=titles,
        k_core=k_core,
        item_features=data.item_features,
        user_features=data.user_features,
        signals={name: values[sel] for name, values in data.signals.items()},
    )


def min_count_filter(data: Interactions, min_user: int, min_item: int) -> Interactions:
    """Drop users/items with too few interactions, counted once over the whole log (not a k-core)."""
    if min_user <= 1 and min_item <= 1:
        return data
    ucount = np.bincount(data.user, minlength=data.n_users)
    icount = np.bincount(data.item, minlength=data.n_items + 1)
    keep = (ucount[data.user] >= min_user) & (icount[data.item] >= min_item)
    if keep.all():
        return data
    if not keep.any():
        raise DataError(f"{data.source.name}: the minimum-count filter removed every interaction")
    return rebuild(data, keep)
