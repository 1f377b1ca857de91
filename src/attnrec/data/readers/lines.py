"""The papers' plain-text logs: ``user item`` pairs and one-line-per-user sequences.

These files carry no time column: their line order is the chronology.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attnrec.data.build import from_columns
from attnrec.data.files import iter_lines
from attnrec.data.readers.fields import fast_columns, file_source
from attnrec.data.schema import DataError, Interactions


def read_pairs(
    path: str | Path, name: str | None = None, *, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """``user item`` pairs, one per line (the SASRec/BERT4Rec files); file order is chronology."""
    users: list[str] | np.ndarray
    items: list[str] | np.ndarray
    fast = fast_columns(path, None, 2)
    if fast is not None:
        users, items = fast[0], fast[1]
    else:  # the exact, line-by-line parser (names the bad line)
        users, items = [], []
        for n, line in iter_lines(path):
            parts = line.split()
            if len(parts) != 2:
                raise DataError(f"{path}:{n}: expected 'user item', got {line[:80]!r}")
            users.append(parts[0])
            items.append(parts[1])
    return from_columns(
        users, items, source=file_source(path, "pairs", name), min_rating=min_rating, k_core=k_core
    )


def read_user_lines(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """One line per user: ``user item item ...``; the items are in chronological order.

    A user may appear on several lines; the lines are concatenated in file order. A line with a
    user and no item is an error naming the line.
    """
    if min_rating is not None:
        raise DataError(f"{path}: min_rating needs ratings, and a user-lines file has none")
    users: list[str] = []
    items: list[str] = []
    for n, line in iter_lines(path):
        parts = line.split()
        if len(parts) < 2:
            raise DataError(f"{path}:{n}: expected 'user item item ...', got only {line[:80]!r}")
        users.extend([parts[0]] * (len(parts) - 1))
        items.extend(parts[1:])
    if not users:
        raise DataError(f"{path}: the file is empty (no interactions)")
    return from_columns(users, items, source=file_source(path, "user-lines", name), k_core=k_core)
