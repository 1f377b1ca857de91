"""Feature tables of the named datasets, read from their own metadata files.

Each loader takes the dataset's feature file (and optional companions, ``None`` when absent)
and returns a :class:`~attnrec.data.features.FeatureTable` keyed by the file's own IDs
(original MovieLens IDs for ``movies.dat``; :meth:`FeatureTable.rekey` maps them onto the
papers' re-numbered IDs). The catalogue names a loader per dataset (``item_features`` /
``user_features`` in ``resources/datasets.toml``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from attnrec.data.feature_frames import frame_from_mapping, from_frame
from attnrec.data.features import FeatureTable
from attnrec.data.files import iter_lines, open_text
from attnrec.data.readers.table import line_of_row
from attnrec.data.schema import DataError

#: The 19 genres of MovieLens-100k ``u.item``'s flag columns, in order (also in ``u.genre``).
ML100K_GENRES = (
    "unknown",
    "Action",
    "Adventure",
    "Animation",
    "Children's",
    "Comedy",
    "Crime",
    "Documentary",
    "Drama",
    "Fantasy",
    "Film-Noir",
    "Horror",
    "Musical",
    "Mystery",
    "Romance",
    "Sci-Fi",
    "Thriller",
    "War",
    "Western",
)
#: Text fields of the named datasets keep words found in at least this many rows.
TEXT_MIN_COUNT = 2
_YEAR_IN_TITLE = re.compile(r"\((\d{4})\)\s*$")
_NO_GENRES = "(no genres listed)"

Loader = Callable[[Path, list[Path | None]], FeatureTable]


def _lines(path: Path, sep: str, n_fields: int, expected: str) -> tuple[list[list[str]], list[int]]:
    """Latin-1 lines (GroupLens files) split on ``sep`` into ``n_fields`` fields, and their numbers."""
    rows, numbers = [], []
    for n, line in iter_lines(path, "latin-1"):
        parts = line.split(sep)
        if len(parts) != n_fields or not parts[0].strip():
            raise DataError(f"{path}:{n}: expected '{expected}', got {line[:80]!r}")
        rows.append([p.strip() for p in parts])
        numbers.append(n)
    if not rows:
        raise DataError(f"{path}: the file is empty (no feature rows)")
    return rows, numbers


def _table(df: pd.DataFrame, fields: dict[str, str], path: Path, line: Callable[[int], int]) -> FeatureTable:
    """The feature table of ``df`` keyed by its ``id`` column; ``line(row)``: the file's line of a row."""
    return from_frame(
        df,
        "id",
        fields,
        source=str(path),
        line_of=lambda row: f"line {line(row)}",
        text_min_count=TEXT_MIN_COUNT,
    )


def _year(title: str) -> float:
    m = _YEAR_IN_TITLE.search(title)
    return float(m.group(1)) if m else np.nan


def _zip_prefix(zip_code: str) -> str:
    """The first character of a zip code: one of the ten US national areas (letters: Canada ...)."""
    return zip_code.strip()[:1].upper()


def ml100k_items(path: Path, extra: list[Path | None]) -> FeatureTable:
    """``u.item``: ``id|title|release date|video release|IMDb URL|19 genre flags`` -> title (text),
    genres (multi), year (numeric, from the release date)."""
    rows, numbers = _lines(path, "|", 5 + len(ML100K_GENRES), "id|title|release date|...|19 genre flags")
    genres = []
    for row, n in zip(rows, numbers, strict=True):
        flags = row[5:]
        if any(f not in ("0", "1") for f in flags):
            raise DataError(f"{path}:{n}: genre flags must be 0 or 1, got {'|'.join(flags)!r}")
        genres.append([g for g, f in zip(ML100K_GENRES, flags, strict=True) if f == "1"])
    years = [float(r[2][-4:]) if re.fullmatch(r".*\d{4}", r[2]) else np.nan for r in rows]
    df = pd.DataFrame(
        {
            "id": [r[0] for r in rows],
            "title": [r[1] for r in rows],
            "genres": pd.Series(genres, dtype=object),
            "year": years,
        }
    )
    return _table(df, {"title": "text", "genres": "multi", "year": "numeric"}, path, numbers.__getitem__)


def _users(path: Path, sep: str, fields: dict[str, str]) -> FeatureTable:
    """A GroupLens users file, ``id``, the ``fields`` (name -> kind, in the file's order), ``zip``: the
    zip code kept as ``zip_prefix`` (categorical)."""
    names = list(fields)
    rows, numbers = _lines(path, sep, len(names) + 2, sep.join(["id", *names, "zip"]))
    columns = {"id": [r[0] for r in rows]}
    columns |= {name: [r[i] for r in rows] for i, name in enumerate(names, start=1)}
    columns["zip_prefix"] = [_zip_prefix(r[-1]) for r in rows]
    return _table(pd.DataFrame(columns), fields | {"zip_prefix": "categorical"}, path, numbers.__getitem__)


def ml100k_users(path: Path, extra: list[Path | None]) -> FeatureTable:
    """``u.user``: ``id|age|gender|occupation|zip`` -> age (numeric), gender, occupation,
    zip_prefix (categorical)."""
    return _users(path, "|", {"age": "numeric", "gender": "categorical", "occupation": "categorical"})


def movielens_dat_movies(path: Path, extra: list[Path | None]) -> FeatureTable:
    """``movies.dat``: ``id::title::genres`` -> title (text), genres (multi), year (numeric, from the
    title)."""
    rows, numbers = _lines(path, "::", 3, "id::title::genres")
    df = pd.DataFrame(
        {
            "id": [r[0] for r in rows],
            "title": [r[1] for r in rows],
            "genres": [r[2] for r in rows],
            "year": [_year(r[1]) for r in rows],
        }
    )
    return _table(df, {"title": "text", "genres": "multi", "year": "numeric"}, path, numbers.__getitem__)


def movielens_dat_users(path: Path, extra: list[Path | None]) -> FeatureTable:
    """``users.dat``: ``id::gender::age::occupation::zip`` -> gender, age (the file's age-group
    code: 1, 18, 25, 35, 45, 50, 56), occupation (code 0-20), zip_prefix; all categorical."""
    return _users(path, "::", {"gender": "categorical", "age": "categorical", "occupation": "categorical"})


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    try:
        with open_text(path) as fh:
            df = pd.read_csv(fh, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{path}: cannot be read as a table ({e})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; available columns: {list(df.columns)}")
    return df


def movies_csv(path: Path, extra: list[Path | None]) -> FeatureTable:
    """MovieLens ``movies.csv`` (``movieId,title,genres``) -> title (text), genres (multi), year
    (numeric); with ``tags.csv`` (``userId,movieId,tag,timestamp``) beside it, ``tags``: the words
    of every tag given to the movie (text)."""
    df = _read_csv(path, ("movieId", "title", "genres"))
    out = pd.DataFrame(
        {
            "id": df["movieId"],
            "title": df["title"],
            "genres": df["genres"].where(df["genres"] != _NO_GENRES, ""),
            "year": [_year(t) for t in df["title"]],
        }
    )
    kinds = {"title": "text", "genres": "multi", "year": "numeric"}
    tags_file = extra[0] if extra else None
    if tags_file is not None:
        tags = _read_csv(tags_file, ("movieId", "tag"))
        joined = tags.groupby("movieId", sort=False)["tag"].agg(" ; ".join)
        out["tags"] = out["id"].map(joined).fillna("")
        kinds["tags"] = "text"
    return _table(out, kinds, path, lambda row: line_of_row(path, row, 2))


def s3rec_attributes(path: Path, extra: list[Path | None]) -> FeatureTable:
    """S3-Rec's ``*_item2attributes.json`` (``{"item": [attribute ids]}``) -> attributes (multi)."""
    try:
        with open_text(path) as fh:
            data = json.load(fh)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise DataError(f"{path}: expected an object {{item id: [attribute ids]}}")
    keys = [str(k) for k in data]
    return from_frame(
        frame_from_mapping(data, "id", "attributes"),
        "id",
        {"attributes": "multi"},
        source=str(path),
        line_of=lambda row: f"entry {row + 1} (key {keys[row]!r})",
    )


#: The loaders the catalogue may name.
FEATURE_LOADERS: dict[str, Loader] = {
    "ml100k-items": ml100k_items,
    "ml100k-users": ml100k_users,
    "movielens-dat-movies": movielens_dat_movies,
    "movielens-dat-users": movielens_dat_users,
    "movies-csv": movies_csv,
    "s3rec-attributes": s3rec_attributes,
}
