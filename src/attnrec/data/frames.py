"""DataFrames in: an interaction log from a pandas DataFrame, a pyarrow Table or a polars DataFrame.

The columns playing each role (user, item, timestamp, event, rating) are named by the caller or
guessed from their names exactly as the file readers guess them
(:func:`~attnrec.data.readers.columns.resolve_columns`: ``userId``, ``user_id``, ``movieId``,
``item_id``, ``timestamp``, ``rating`` ...); their values pass the boundary of
:mod:`attnrec.data.boundary`, so a frame is read exactly like the same table in a file. polars is
never required: a polars frame is recognised by its type's module and read through its Arrow
export.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa

from attnrec.data.boundary import Origin, id_column, id_text, number_column, time_column
from attnrec.data.build import CheckedColumns, build_log, signal_columns
from attnrec.data.feature_files import FeatureSource, with_features
from attnrec.data.readers.columns import ID_ALIASES, resolve_columns
from attnrec.data.schema import DataError, DataSource, Interactions
from attnrec.data.titles import check_titles_name_items

FrameLike: TypeAlias = "pd.DataFrame | pa.Table"
"""What :func:`from_frame` reads: a pandas DataFrame or a pyarrow Table (and, at run time, a polars
DataFrame)."""

_HINT = "{role}='<column name>'"


def is_frame(obj: object) -> bool:
    """Whether ``obj`` is a table :func:`from_frame` reads (pandas, pyarrow, polars)."""
    return isinstance(obj, (pd.DataFrame, pa.Table)) or _is_polars(obj)


def _is_polars(obj: object) -> bool:
    return type(obj).__module__.split(".", 1)[0] == "polars" and type(obj).__name__ == "DataFrame"


def _labels(frame: object) -> list[object]:
    if isinstance(frame, pd.DataFrame):
        return list(frame.columns)
    if isinstance(frame, pa.Table):
        return list(frame.column_names)
    polars_frame: Any = frame  # polars is optional: typed loosely
    return list(polars_frame.columns)


def _selected(frame: object, labels: list[object]) -> pd.DataFrame:
    """The columns ``labels`` of ``frame`` as a pandas DataFrame (only those columns are converted)."""
    if isinstance(frame, pd.DataFrame):
        return frame[labels].reset_index(drop=True)
    names = [str(c) for c in labels]
    if isinstance(frame, pa.Table):
        return frame.select(names).to_pandas()
    polars_frame: Any = frame
    table: pa.Table = polars_frame.select(names).to_arrow()
    return table.to_pandas()


def from_frame(
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
    signals: Mapping[str, str] | None = None,
) -> Interactions:
    """An interaction log from a DataFrame (pandas, pyarrow Table, polars).

    ``user``, ``item``, ``timestamp``, ``event`` and ``rating`` name the frame's column for each
    role; a role left out is found by the names the file readers know (``userId``, ``user_id``,
    ``movieId``, ``item_id``, ``timestamp``, ``rating``, ``event_type`` ...): user and item are
    required, the others used when present. Values are checked as in
    :mod:`attnrec.data.boundary`: IDs become text (``1.0`` -> ``"1"``), ``datetime64`` columns of
    any unit and date strings become unix seconds (``time_format``: ``"dayfirst"``,
    ``"monthfirst"`` or a ``strptime`` pattern, needed for ``03/04/2020``-like dates); a missing
    or malformed value is a :class:`DataError` naming its row and column.

    Rows are ordered per user by time (ties in frame order; without a time column the frame order
    is the chronology). ``min_rating`` and ``k_core`` filter as in
    :func:`~attnrec.data.build.from_columns`; ``titles`` is ``{item: title}`` or a frame with an
    item column and a ``title`` column; ``item_features``/``user_features`` are feature tables
    (a DataFrame, a file or a :class:`~attnrec.data.features.FeatureTable`, see
    :func:`~attnrec.data.feature_files.with_features`; ``missing_features="empty"`` gives the IDs
    without a row empty features instead of an error). ``signals`` maps declared signals
    (:mod:`attnrec.data.signals`) to their columns; one left out is found by its aliases.
    """
    if not is_frame(frame):
        raise DataError(
            "from_frame reads a pandas DataFrame, a pyarrow Table or a polars DataFrame, not "
            f"{type(frame).__name__}"
        )
    given = {"user": user, "item": item, "timestamp": timestamp, "event": event, "rating": rating}
    given |= dict(signals or {})  # declared signals (attnrec.data.signals) -> their columns
    roles = resolve_columns(_labels(frame), {r: c for r, c in given.items() if c is not None}, name, _HINT)
    df = _selected(frame, list(roles.values()))
    df.columns = list(roles)  # role names: one column per role, even when two roles share a label
    origin = Origin(name)

    def ids(role: str) -> np.ndarray:
        return id_column(df[role], role, roles[role], origin)

    columns = CheckedColumns(
        ids("user"),
        ids("item"),
        time_column(df["timestamp"], roles["timestamp"], origin, time_format)
        if "timestamp" in roles
        else None,
        number_column(df["rating"], "rating", roles["rating"], origin) if "rating" in roles else None,
        ids("event") if "event" in roles else None,
        signal_columns(lambda role: df[role], roles, origin),
    )
    if time_format is not None and columns.timestamp is None:
        raise DataError(
            f"{name}: time_format={time_format!r} was given but the frame has no timestamp column"
        )
    table = _titles(titles, name)
    data = build_log(
        columns,
        source=DataSource(name, format="dataframe"),
        min_rating=min_rating,
        k_core=k_core,
        item_titles=table,
    )
    if table is not None:
        check_titles_name_items(data, table, f"{name} titles")
    return with_features(data, item_features, user_features, missing=missing_features)


def _titles(titles: Mapping[Any, str] | pd.DataFrame | None, name: str) -> dict[str, str] | None:
    """``{item: title}`` from a mapping or a frame with an item column (guessed) and a ``title`` column."""
    if titles is None or isinstance(titles, Mapping):
        return None if titles is None else {id_text(k): str(v) for k, v in titles.items()}
    if not isinstance(titles, pd.DataFrame):
        raise DataError(f"titles must be a mapping or a DataFrame, not {type(titles).__name__}")
    where = f"{name} titles"
    lower = {str(c).strip().lower(): c for c in titles.columns}
    if "title" not in lower:
        raise DataError(f"{where}: no 'title' column; available columns: {list(titles.columns)[:30]}")
    key = next((lower[a] for a in (*ID_ALIASES["item"], "id") if a in lower), None)
    if key is None:
        raise DataError(
            f"{where}: no item ID column (looked for {', '.join(ID_ALIASES['item'][:6])}, ..., id); "
            f"available columns: {list(titles.columns)[:30]}"
        )
    items = id_column(titles[key], "item", key, Origin(where))
    named = titles[lower["title"]].notna().to_numpy()  # an item without a title has none, not "nan"
    texts = titles[lower["title"]].astype(str).str.strip().to_numpy()
    out: dict[str, str] = {}
    for row in np.flatnonzero(named):
        item, text = str(items[row]), str(texts[row])
        if out.setdefault(item, text) != text:  # the last one won, without a word
            raise DataError(
                f"{where}: row {row + 1}: item {item!r} already has the title {out[item]!r}, "
                f"not {text[:80]!r}"
            )
    return out


def as_interactions(data: Interactions | FrameLike) -> Interactions:
    """``data`` itself when it is a log, else the log of a DataFrame with its columns guessed
    (:func:`from_frame`); anything else is a :class:`DataError`."""
    if isinstance(data, Interactions):
        return data
    if is_frame(data):
        return from_frame(data)
    raise DataError(
        f"expected an Interactions log or a DataFrame (pandas, pyarrow, polars), not {type(data).__name__}; "
        "read files with attnrec.data.load_dataset"
    )


__all__ = ["FrameLike", "as_interactions", "from_frame", "is_frame"]
