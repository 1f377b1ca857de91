"""Load a dataset by name (``ml-1m``, ``demo`` ...) or from a file, in any supported format.

Named datasets are looked up in ``data_dir``, ``$ATTNREC_DATA`` or ``~/.cache/attnrec`` (see
:mod:`attnrec.data.named`). When no file is there, the official archive is downloaded into
``<root>/<name>/`` (its sha256 is verified when known) unless ``download=False`` or
``ATTNREC_OFFLINE=1``; without network, the :class:`DataError` says which file to download
from where and where to put it.

For every named dataset, the preprocessed ``user item`` file of the SASRec/BERT4Rec papers
(``<name>.txt`` or ``<name>.txt.gz``) is accepted in the same folders and preferred over the
raw download: it is the file their published numbers were computed on.

Item and user feature tables (:mod:`attnrec.data.features`) come with named datasets whose
metadata files are present, or from ``item_features=``/``user_features=`` (a file or a DataFrame).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from attnrec.data.boundary import check_time_format
from attnrec.data.build import check_filters
from attnrec.data.catalog import DATASETS, canonical_name, list_datasets
from attnrec.data.demo import make_demo
from attnrec.data.feature_files import FeatureSource, with_features
from attnrec.data.features import MISSING_POLICIES
from attnrec.data.formats import COLUMN_FORMATS, FORMATS, READERS, TABLE_FORMATS, UNRATED_FORMATS
from attnrec.data.frames import FrameLike, from_frame, is_frame
from attnrec.data.named import load_named
from attnrec.data.readers.columns import ID_ALIASES, column_aliases
from attnrec.data.readers.jsonlines import read_json_table
from attnrec.data.readers.table import read_table, table_format
from attnrec.data.schema import DataError, Interactions
from attnrec.data.signals import get_signal
from attnrec.data.sniff import TEXT_ID_FORMATS, check_integer_ids, detect_format
from attnrec.data.titles import (
    check_titles_name_items,
    map_titles,
    read_id_mapping,
    read_titles,
    with_titles,
)


@dataclass(frozen=True)
class ReadOptions:
    """How :func:`read_file` reads one interaction file: its format, columns (or keys), the filters
    applied to it and its feature tables (each as the keyword of the same name of
    :func:`load_dataset` documents it)."""

    format: str = "auto"
    columns: Mapping[str, str | int] | None = None
    min_rating: float | None = None
    k_core: int = 0
    item_features: FeatureSource | None = None
    user_features: FeatureSource | None = None
    item_feature_columns: Mapping[str, str] | None = None
    user_feature_columns: Mapping[str, str] | None = None
    missing_features: str = "error"
    time_format: str | None = None

    def __post_init__(self) -> None:
        """The policy and date format checked wherever options are built (a one-line :class:`DataError`)."""
        if self.missing_features not in MISSING_POLICIES:
            raise DataError(
                f"missing_features={self.missing_features!r}: use one of {', '.join(MISSING_POLICIES)}"
            )
        object.__setattr__(self, "time_format", check_time_format(self.time_format))
        check_filters(self.min_rating, self.k_core)  # before any file is read

    def attach_features(self, data: Interactions) -> Interactions:
        """``data`` with these options' feature tables (unchanged when there are none)."""
        return with_features(
            data,
            self.item_features,
            self.user_features,
            item_columns=self.item_feature_columns,
            user_columns=self.user_feature_columns,
            missing=self.missing_features,
        )


def load_dataset(
    spec: str | Path | FrameLike,
    *,
    format: str = "auto",
    columns: Mapping[str, str | int] | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
    data_dir: str | Path | None = None,
    titles: str | Path | Mapping[str, str] | None = None,
    title_mapping: str | Path | Mapping[str, str] | None = None,
    download: bool = True,
    item_features: FeatureSource | None = None,
    user_features: FeatureSource | None = None,
    item_feature_columns: Mapping[str, str] | None = None,
    user_feature_columns: Mapping[str, str] | None = None,
    missing_features: str = "error",
    features: bool = True,
    time_format: str | None = None,
) -> Interactions:
    """Load an interaction log.

    Parameters
    ----------
    spec : str, Path or DataFrame
        ``"demo"`` (the built-in generated dataset), a named dataset (``ml-1m``, ``ml-20m``,
        ``ml-100k``, ``beauty``, ``steam``), a path to a file, or a DataFrame (pandas, pyarrow,
        polars; read by :func:`attnrec.data.frames.from_frame`, ``columns`` naming its columns).
    format : str
        For files: ``"auto"`` (from the name, then the content) or one of :data:`FORMATS`.
    columns : mapping, optional
        Column names (or positions) for the roles of a CSV/TSV/Parquet table or the keys of JSON lines
        (``json-lines``); see :func:`attnrec.data.readers.table.read_table`.
    min_rating : float, optional
        Keep only interactions rated at least this much (implicit feedback from ratings).
    k_core : int
        Repeatedly drop users and items with fewer than ``k_core`` interactions.
    data_dir : str or Path, optional
        Where named datasets are looked for and downloaded to (default ``$ATTNREC_DATA``, then
        ``~/.cache/attnrec``).
    titles, title_mapping : optional
        Item titles: a title file (``movies.dat``, ``u.item``, ``movies.csv``, ``item<TAB>title``)
        or a dict, and optionally a ``new_id original_id`` mapping file to re-key them. Named
        MovieLens datasets get their titles automatically.
    download : bool
        Whether a missing named dataset may be downloaded (``ATTNREC_OFFLINE=1`` also forbids it).
    item_features, user_features : optional
        Feature tables: a CSV/TSV/Parquet/JSON file, a pandas DataFrame or a
        :class:`~attnrec.data.features.FeatureTable`, one row per item (user); see
        :mod:`attnrec.data.feature_files`. They replace a named dataset's own tables.
    item_feature_columns, user_feature_columns : mapping, optional
        ``{"id": <ID column>, <column>: <kind>, ...}`` (kinds: categorical, multi, numeric, text,
        auto); without kinds every column is a field of inferred kind.
    missing_features : str
        ``"error"`` (default): a log item (user) without a row in the given table is an error
        naming the file and a few IDs; ``"empty"``: such IDs get empty features.
    features : bool
        ``False`` leaves out every feature table (a named dataset's own ones included).
    time_format : str, optional
        How the text dates of a CSV/TSV/Parquet table or a DataFrame are written: ``"dayfirst"``,
        ``"monthfirst"`` or a ``strptime`` pattern (``"%d/%m/%Y %H:%M"``); ``03/04/2020``-like
        dates are refused without it (see :mod:`attnrec.data.boundary`).

    Raises
    ------
    DataError
        For unknown names or formats, missing or malformed files; the message says what to do.
    """
    if not features and (item_features is not None or user_features is not None):
        raise DataError("features=False contradicts the item_features/user_features given")
    options = ReadOptions(
        format=format,
        columns=columns,
        min_rating=min_rating,
        k_core=k_core,
        item_features=item_features,
        user_features=user_features,
        item_feature_columns=item_feature_columns,
        user_feature_columns=user_feature_columns,
        missing_features=missing_features,
        time_format=time_format,
    )
    if is_frame(spec):
        return _with_titles(options.attach_features(_read_frame(spec, options)), titles, title_mapping)
    text = str(spec).strip()
    key = canonical_name(text)
    if time_format is not None and not Path(text).is_file():
        raise DataError(f"time_format applies to CSV/TSV/Parquet files and DataFrames, not to {text!r}")
    if key == "demo" and not Path(text).is_file():
        data = options.attach_features(make_demo(min_rating=min_rating, k_core=k_core))
    elif key in DATASETS and not Path(text).is_file():
        data = options.attach_features(
            load_named(DATASETS[key], data_dir, download, min_rating, k_core, features)
        )
    else:
        path = Path(text).expanduser()
        if not path.exists():
            raise DataError(
                f"{text!r} is neither an existing file nor a named dataset ({', '.join(list_datasets())})"
            )
        data = read_file(path, options)
    if not features:
        data = replace(data, item_features=None, user_features=None)
    return _with_titles(data, titles, title_mapping)


def _read_frame(frame: FrameLike, options: ReadOptions) -> Interactions:
    """A DataFrame read with the table options that apply to it (``columns`` by name)."""
    if options.format not in ("auto", "dataframe"):
        raise DataError(f"format={options.format!r} is for files; a DataFrame is read as it is")
    columns = dict(options.columns or {})
    positional = {r: c for r, c in columns.items() if not isinstance(c, str)}
    if positional:
        raise DataError(f"a DataFrame's columns are mapped by name, not by position: {positional}")
    roles = column_aliases()
    unknown = set(columns) - set(roles)
    if unknown:
        raise DataError(f"unknown column roles {sorted(unknown)}; use {', '.join(roles)}")
    named = {r: str(c) for r, c in columns.items()}
    declared = {r: c for r, c in named.items() if _declared(r)}
    return from_frame(
        frame,
        named.get("user"),
        named.get("item"),
        named.get("timestamp"),
        named.get("event"),
        named.get("rating"),
        time_format=options.time_format,
        min_rating=options.min_rating,
        k_core=options.k_core,
        signals=declared,
    )


def _declared(role: str) -> bool:
    """Whether ``role`` is a declared signal beyond the built-ins (``from_frame``'s ``signals``)."""
    return role not in ID_ALIASES and not get_signal(role).builtin


def _with_titles(
    data: Interactions,
    titles: str | Path | Mapping[str, str] | None,
    title_mapping: str | Path | Mapping[str, str] | None,
) -> Interactions:
    """``data`` with the titles of a file or mapping, re-keyed through ``title_mapping`` when given."""
    if titles is not None:
        table = read_titles(titles) if isinstance(titles, (str, Path)) else dict(titles)
        if title_mapping is not None:
            mapping = (
                read_id_mapping(title_mapping) if isinstance(title_mapping, (str, Path)) else title_mapping
            )
            table = map_titles(table, mapping)
        where = titles if isinstance(titles, (str, Path)) else "titles"
        check_titles_name_items(
            data, table, where, "; check title_mapping" if title_mapping is not None else ""
        )
        data = with_titles(data, table)
    return data


def read_file(
    path: str | Path, options: ReadOptions = ReadOptions(), *, name: str | None = None
) -> Interactions:
    """Read one interaction file in the given (or detected) format."""
    fmt = detect_format(path) if options.format == "auto" else options.format
    if fmt not in FORMATS:
        raise DataError(f"unknown format {options.format!r}; use one of: auto, {', '.join(FORMATS)}")
    if options.columns is not None and fmt not in COLUMN_FORMATS:
        raise DataError(
            f"columns=... applies to {', '.join(COLUMN_FORMATS)} files, not to the {fmt!r} format"
        )
    if fmt in TABLE_FORMATS:
        # A .csv/.tsv name fixes the separator; other names (data.txt read as csv) are sniffed.
        sep = "\t" if fmt == "tsv" else ("," if fmt == "csv" and table_format(path) == "csv" else None)
        data = read_table(
            path,
            options.columns,
            sep,
            name=name,
            min_rating=options.min_rating,
            k_core=options.k_core,
            format=fmt,
            time_format=options.time_format,
        )
        return options.attach_features(data)
    if options.time_format is not None:
        raise DataError(
            f"{path}: time_format applies to csv, tsv and parquet tables, not to the {fmt!r} format"
        )
    if fmt in UNRATED_FORMATS and options.min_rating is not None:
        raise DataError(f"{path}: min_rating needs ratings, and the {fmt!r} format has none")
    if fmt == "json-lines":
        data = read_json_table(
            path, options.columns, name=name, min_rating=options.min_rating, k_core=options.k_core
        )
    else:
        data = READERS[fmt](path, name=name, min_rating=options.min_rating, k_core=options.k_core)
    if options.format == "auto" and fmt in TEXT_ID_FORMATS:
        check_integer_ids(path, fmt, data)  # the integer IDs the detection saw hold on every line
    return options.attach_features(data)


__all__ = ["ReadOptions", "load_dataset", "read_file"]
