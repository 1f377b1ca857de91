"""The interaction-file formats by name, and the reader of each.

``READERS`` is the one registry: :func:`attnrec.data.datasets.read_file` dispatches on it and
every :class:`~attnrec.data.catalog.NamedDataset` names its raw file's reader from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from attnrec.data.readers.jsonlines import read_amazon_json, read_otto_jsonl, read_steam_json
from attnrec.data.readers.lines import read_pairs, read_user_lines
from attnrec.data.readers.movielens import read_ml20m, read_ml100k, read_movielens_dat
from attnrec.data.readers.table import read_table
from attnrec.data.readers.taobao import read_taobao
from attnrec.data.schema import Interactions

#: Explicit formats accepted by :func:`~attnrec.data.datasets.load_dataset` (``"auto"`` detects one).
FORMATS = (
    "pairs",
    "user-lines",
    "csv",
    "tsv",
    "parquet",
    "json-lines",
    "movielens-dat",
    "ml100k",
    "ml20m",
    "amazon-json",
    "steam-json",
    "otto-jsonl",
    "amazon-ratings-csv",
    "taobao-csv",
)

#: Formats that are tables with named or numbered columns.
TABLE_FORMATS = ("csv", "tsv", "parquet")

#: Formats whose columns (or keys) are found by name: ``columns=`` applies to them.
COLUMN_FORMATS = (*TABLE_FORMATS, "json-lines")

#: Formats without a rating column (``min_rating`` is an error for them).
UNRATED_FORMATS = ("pairs", "user-lines", "otto-jsonl", "taobao-csv")


class Reader(Protocol):
    """A reader of one fixed-layout format: a path in, a built log out."""

    def __call__(
        self, path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
    ) -> Interactions: ...


def _read_otto(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    # OTTO has no ratings; read_file rejects a min_rating before it gets here.
    return read_otto_jsonl(path, name=name, k_core=k_core)


def _read_amazon_ratings_csv(
    path: str | Path, *, name: str | None = None, min_rating: float | None = None, k_core: int = 0
) -> Interactions:
    """Amazon "ratings only" files: headerless ``user,item,rating,timestamp``."""
    return read_table(
        path,
        {"user": 0, "item": 1, "rating": 2, "timestamp": 3},
        sep=",",
        header=False,
        name=name,
        min_rating=min_rating,
        k_core=k_core,
        format="amazon-ratings-csv",
    )


#: The reader of every fixed-layout format (the formats of :data:`COLUMN_FORMATS` go through
#: :func:`read_table` and :func:`~attnrec.data.readers.jsonlines.read_json_table` with their columns).
READERS: dict[str, Reader] = {
    "pairs": read_pairs,
    "user-lines": read_user_lines,
    "movielens-dat": read_movielens_dat,
    "ml100k": read_ml100k,
    "ml20m": read_ml20m,
    "amazon-json": read_amazon_json,
    "steam-json": read_steam_json,
    "otto-jsonl": _read_otto,
    "amazon-ratings-csv": _read_amazon_ratings_csv,
    "taobao-csv": read_taobao,
}
