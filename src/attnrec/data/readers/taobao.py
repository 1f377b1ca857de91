"""Alibaba Taobao ``UserBehavior.csv`` (Tianchi dataset 649) and prefixes of it.

Headerless ``user_id,item_id,category_id,behavior_type,timestamp`` lines with behaviour ``pv``,
``cart``, ``fav`` or ``buy``. The file is grouped by user but not time-sorted within a user:
rows are sorted by timestamp per user, ties in file order (a stable sort). Each item's category
becomes the item feature ``category`` (an item listed under several categories keeps the one of
its first row).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnrec.data.build import from_columns
from attnrec.data.feature_frames import from_frame
from attnrec.data.readers.fields import fast_columns, file_source, number, split_lines
from attnrec.data.schema import DataError, Interactions

EXPECTED = "user_id,item_id,category_id,behavior_type,timestamp"
BEHAVIOURS = ("buy", "cart", "fav", "pv")


def read_taobao(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """Read a Taobao user-behaviour file (see the module docstring); it has no ratings."""
    if min_rating is not None:
        raise DataError(f"{path}: min_rating needs ratings, and the Taobao log has none")
    cols = fast_columns(path, ",", 5)
    if cols is not None:
        ts = pd.to_numeric(pd.Series(cols[4]), errors="coerce").to_numpy(dtype=np.float64)
        behaviour = np.char.strip(cols[3].astype(str))
        if np.isnan(ts).any() or not np.isin(behaviour, BEHAVIOURS).all():
            cols = None  # the line-by-line parser below names the bad line
    if cols is None:
        rows = list(split_lines(path, ",", 5, EXPECTED))
        for n, parts in rows:
            if parts[3].strip() not in BEHAVIOURS:
                raise DataError(
                    f"{path}:{n}: behavior {parts[3].strip()[:20]!r} is not one of {', '.join(BEHAVIOURS)}"
                )
        ts = np.array([number(p[4], path, n, "timestamp") for n, p in rows], dtype=np.float64)
        cols = [np.array([p[k].strip() for _, p in rows], dtype=object) for k in range(4)]
        behaviour = cols[3].astype(str)
    users, items, categories = (np.char.strip(c.astype(str)).astype(object) for c in cols[:3])
    firsts = pd.DataFrame({"item": items, "category": categories}).drop_duplicates("item", keep="first")
    table = from_frame(firsts, "item", {"category": "categorical"}, source=str(path))
    return from_columns(
        users,
        items,
        ts,
        events=behaviour.astype(object),
        source=file_source(path, "taobao-csv", name),
        k_core=k_core,
        item_features=table,
    )
