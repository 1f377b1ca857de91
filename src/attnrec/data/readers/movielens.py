"""MovieLens rating files: ``ratings.dat`` (1M/10M), ``u.data`` (100k) and ``ratings.csv`` (20M+)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from attnrec.data.build import from_columns
from attnrec.data.readers.fields import fast_columns, file_source, number, split_lines
from attnrec.data.readers.table import read_table
from attnrec.data.schema import Interactions


def read_movielens_dat(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """MovieLens-1M/10M ``ratings.dat``: ``user::item::rating::timestamp`` per line."""
    return _read_rating_lines(
        path, "::", "user::item::rating::timestamp", "movielens-dat", name, min_rating, k_core
    )


def read_ml100k(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """MovieLens-100k ``u.data``: ``user<TAB>item<TAB>rating<TAB>timestamp`` per line (unsorted)."""
    return _read_rating_lines(
        path, "\t", "user<TAB>item<TAB>rating<TAB>timestamp", "ml100k", name, min_rating, k_core
    )


def read_ml20m(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """MovieLens-20M/25M/latest ``ratings.csv`` (header ``userId,movieId,rating,timestamp``)."""
    return read_table(
        path,
        {"user": "userId", "item": "movieId", "rating": "rating", "timestamp": "timestamp"},
        sep=",",
        name=name,
        min_rating=min_rating,
        k_core=k_core,
        format="ml20m",
    )


def _read_rating_lines(
    path: str | Path,
    sep: str,
    expected: str,
    fmt: str,
    name: str | None,
    min_rating: float | None,
    k_core: int,
) -> Interactions:
    """``user item rating timestamp`` lines (latin-1, as GroupLens writes them)."""
    fast = fast_columns(path, sep, 4, encoding="latin-1")
    if fast is not None:
        r = pd.to_numeric(pd.Series(fast[2]), errors="coerce").to_numpy(dtype=np.float64)
        t = pd.to_numeric(pd.Series(fast[3]), errors="coerce").to_numpy(dtype=np.float64)
        if not (np.isnan(r).any() or np.isnan(t).any()):
            return from_columns(
                np.char.strip(fast[0].astype(str)),
                np.char.strip(fast[1].astype(str)),
                t,
                r,
                source=file_source(path, fmt, name),
                min_rating=min_rating,
                k_core=k_core,
            )
    # Not perfectly regular: the line-by-line parser finds and names the bad line.
    users: list[str] = []
    items: list[str] = []
    ratings: list[float] = []
    times: list[float] = []
    for n, (u, i, rs, ts) in split_lines(path, sep, 4, expected, encoding="latin-1"):
        users.append(u.strip())
        items.append(i.strip())
        ratings.append(number(rs, path, n, "rating"))
        times.append(number(ts, path, n, "timestamp"))
    return from_columns(
        users,
        items,
        times,
        ratings,
        source=file_source(path, fmt, name),
        min_rating=min_rating,
        k_core=k_core,
    )
