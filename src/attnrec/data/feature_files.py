"""Reading item/user feature tables from files (CSV, TSV, Parquet, JSON) or taking DataFrames.

Formats, by the file name (``.gz`` is fine for text):

* ``.parquet``/``.pq``: a table, one row per ID;
* ``.json``: one object, either ``{id: value}`` (S3-Rec's ``item2attributes.json``:
  ``{"4": [1, 2, 3]}``; the values become the field ``value_field``, ``attributes`` unless told
  otherwise, as for the named Amazon datasets) or ``{id: {field: value}}``;
  or a list of records;
* ``.jsonl``/``.ndjson``: one record (object) per line;
* anything else: delimited text with a header line (``,`` for ``.csv``, tab for ``.tsv``, else
  the first of tab, comma, semicolon, pipe on the header line). Every cell is read as text.

The ID column is ``id_column`` when given, else the first column named like an ID of the role
(``item_id``, ``movieId``, ``asin`` ... for items; ``user_id``, ``userId`` ... for users) or
``id``. Kinds follow :mod:`attnrec.data.feature_frames`. Every error names the file and line.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TypeAlias

import pandas as pd

from attnrec.data.boundary import LineOf, row_label
from attnrec.data.feature_frames import frame_from_mapping, from_frame
from attnrec.data.features import FeatureTable
from attnrec.data.files import base_name, is_gzip, iter_lines, open_text, require_file
from attnrec.data.readers.columns import ID_ALIASES
from attnrec.data.readers.jsonlines import parse_record
from attnrec.data.readers.table import line_of_row, parser_error, sniff_separator
from attnrec.data.schema import DataError, IdMap, Interactions

ROLES = ("item", "user")
#: Where a feature table comes from: a file, a DataFrame, or a table already built.
FeatureSource: TypeAlias = str | Path | pd.DataFrame | FeatureTable


def read_features(
    path: str | Path,
    *,
    role: str = "item",
    id_column: str | None = None,
    fields: Mapping[str, str] | None = None,
    value_field: str = "attributes",
    text_min_count: int = 1,
    text_max_vocab: int | None = None,
) -> FeatureTable:
    """Read a feature table for items (``role="item"``) or users from ``path``.

    ``fields`` declares ``{column: kind}`` (kinds: categorical, multi, numeric, text, auto);
    without it every column but the ID is a field of inferred kind. ``value_field`` names the
    field of ``{id: value}`` JSON files. Text fields keep tokens found in at least
    ``text_min_count`` rows (the ``text_max_vocab`` most frequent when given).
    """
    p = require_file(path)
    df, line_of = _read_frame(p, value_field)
    id_col = _id_column(list(df.columns), id_column, role, p)
    return from_frame(
        df,
        id_col,
        fields,
        source=str(p),
        line_of=line_of,
        text_min_count=text_min_count,
        text_max_vocab=text_max_vocab,
    )


def feature_table(
    spec: FeatureSource, role: str = "item", columns: Mapping[str, str] | None = None
) -> FeatureTable:
    """A feature table from a path, a DataFrame or a table; ``columns`` maps ``id`` to the ID
    column and other columns to their kinds (``{"id": "movieId", "genres": "multi"}``)."""
    if role not in ROLES:
        raise DataError(f"feature role {role!r}: use item or user")
    if isinstance(spec, FeatureTable):
        if columns:
            raise DataError("feature columns apply to files and DataFrames, not to a FeatureTable")
        return spec
    id_column, fields = split_id(columns)
    if isinstance(spec, pd.DataFrame):
        id_col = _id_column([str(c) for c in spec.columns], id_column, role, "DataFrame")
        return from_frame(spec, id_col, fields)
    return read_features(spec, role=role, id_column=id_column, fields=fields)


def with_features(
    data: Interactions,
    item: FeatureSource | None = None,
    user: FeatureSource | None = None,
    *,
    item_columns: Mapping[str, str] | None = None,
    user_columns: Mapping[str, str] | None = None,
    missing: str = "error",
) -> Interactions:
    """``data`` with item and/or user feature tables (replacing any it has) read from files,
    DataFrames or tables (see :func:`feature_table`). With ``missing="error"`` every item (user)
    of the log must have a row, else a :class:`DataError` names the file and a few IDs;
    ``"empty"`` gives them empty features."""
    if item is None and user is None:
        if item_columns or user_columns:
            raise DataError(
                "feature columns were given without a feature file (item_features=/user_features=)"
            )
        return data
    item_table = _attached(item, "item", item_columns, data.items, missing) or data.item_features
    user_table = _attached(user, "user", user_columns, data.users, missing) or data.user_features
    return replace(data, item_features=item_table, user_features=user_table)


def _attached(
    spec: FeatureSource | None, role: str, columns: Mapping[str, str] | None, ids: IdMap, missing: str
) -> FeatureTable | None:
    """The table of ``spec`` with the ``missing`` policy, checked to cover ``ids`` when it is ``"error"``."""
    if spec is None:
        if columns:
            raise DataError(f"{role} feature columns were given without a {role} feature file")
        return None
    table = feature_table(spec, role, columns).with_missing(missing)
    if missing == "error":
        table.check_rows(ids, role + "s")
    return table


def parse_feature_columns(
    text: str | None, item: bool = True, user: bool = True
) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """``"id=movieId,genres=multi,user.age=numeric"`` -> the item and the user feature columns.

    Each entry is ``id=<ID column>`` or ``<column>=<kind>``; a ``item.``/``user.`` prefix sends
    it to one table only, an unprefixed entry goes to every table given (``item``, ``user``).
    """
    out: dict[str, dict[str, str]] = {"item": {}, "user": {}}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        role, dot, column = key.strip().partition(".")
        roles = [role] if dot and role in ROLES else [r for r, on in (("item", item), ("user", user)) if on]
        column = column if dot and role in ROLES else key.strip()
        if not sep or not column.strip() or not value.strip():
            raise DataError(f"--feature-columns: {part!r} is not of the form id=<column> or <column>=<kind>")
        for r in roles:
            out[r][column.strip()] = value.strip()
    return out["item"] or None, out["user"] or None


def split_id(columns: Mapping[str, str] | None) -> tuple[str | None, dict[str, str] | None]:
    """``{"id": "movieId", "genres": "multi"}`` -> ``("movieId", {"genres": "multi"})``."""
    if not columns:
        return None, None
    fields = {k: v for k, v in columns.items() if k != "id"}
    return columns.get("id"), fields or None


def _id_column(columns: list[str], wanted: str | None, role: str, source: object) -> str:
    """The ID column: ``wanted`` (case-insensitive), else a known ID name of the role, else ``id``."""
    lower = {c.strip().lower(): c for c in columns}
    if wanted is not None:
        if wanted in columns:
            return wanted
        if wanted.strip().lower() in lower:
            return lower[wanted.strip().lower()]
        raise DataError(
            f"{source}: no ID column {wanted!r}; available columns: "
            f"{', '.join(repr(c) for c in columns[:30])}"
        )
    for alias in (*ID_ALIASES.get(role, ()), "id"):
        if alias in lower:
            return lower[alias]
    raise DataError(
        f"{source}: no {role} ID column (looked for {', '.join(ID_ALIASES[role][:5])}, id); "
        f"available columns: {', '.join(repr(c) for c in columns[:30])}; "
        "name it with id=<column>"
    )


def _read_frame(p: Path, value_field: str) -> tuple[pd.DataFrame, LineOf]:
    """The file as a DataFrame, and where each of its rows is in the file."""
    name = base_name(p)
    if name.endswith((".parquet", ".pq")):
        try:
            return pd.read_parquet(p), row_label
        except Exception as e:  # pyarrow raises several exception types for corrupt files
            raise DataError(f"{p}: cannot be read as Parquet ({e})") from e
    if name.endswith(".json"):
        return _read_json(p, value_field)
    if name.endswith((".jsonl", ".ndjson")):
        records, lines = [], []
        for n, line in iter_lines(p):
            records.append(parse_record(line, p, n))
            lines.append(n)
        if not records:
            raise DataError(f"{p}: the file is empty (no feature rows)")
        return pd.DataFrame.from_records(records), lambda row: f"line {lines[row]}"
    return _read_text(p, name)


def _read_json(p: Path, value_field: str) -> tuple[pd.DataFrame, LineOf]:
    try:
        with open_text(p) as fh:
            data = json.load(fh)
    except json.JSONDecodeError as e:
        raise DataError(f"{p}:{e.lineno}: not valid JSON ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{p}: not valid utf-8 text ({e.reason})") from None
    if isinstance(data, dict):
        keys = [str(k) for k in data]
        return frame_from_mapping(data, "id", value_field), lambda row: f"entry {row + 1} (key {keys[row]!r})"
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        return pd.DataFrame.from_records(data), lambda row: f"record {row + 1}"
    raise DataError(
        f"{p}: expected a JSON object {{id: value}} or a list of records, got {type(data).__name__}"
    )


def _read_text(p: Path, name: str) -> tuple[pd.DataFrame, LineOf]:
    for _ in iter_lines(p):
        break
    else:
        raise DataError(f"{p}: the file is empty (no feature rows)")
    sep = "," if name.endswith(".csv") else "\t" if name.endswith((".tsv", ".tab")) else sniff_separator(p)
    try:
        # Every cell as text, nothing read as missing but empty cells: IDs stay exactly as written.
        df = pd.read_csv(
            p,
            sep=sep,
            dtype=str,
            keep_default_na=False,
            na_values=[""],
            compression="gzip" if is_gzip(p) else None,
            skip_blank_lines=True,
        )
    except pd.errors.ParserError as e:
        raise DataError(parser_error(p, str(e))) from None
    except UnicodeDecodeError as e:
        raise DataError(f"{p}: not valid utf-8 text ({e.reason})") from None
    except (pd.errors.EmptyDataError, ValueError) as e:
        raise DataError(f"{p}: cannot be read as a table ({e})") from None
    if len(df) == 0:
        raise DataError(f"{p}: the file has a header but no rows")
    short = _short_row(p, sep, len(df.columns))
    if (
        short is not None
    ):  # pandas fills a short row with empty cells: a cut line would lose features silently
        raise DataError(f"{p}:{short[0]}: expected {len(df.columns)} fields, saw {short[1]}")
    return df, lambda row: f"line {line_of_row(p, row, 2)}"


def _short_row(p: Path, sep: str, width: int) -> tuple[int, int] | None:
    """``(line, fields)`` of the first data row with fewer than ``width`` fields, if any."""
    with open_text(p) as fh:
        reader = csv.reader(fh, delimiter=sep)
        next(reader, None)  # the header
        for row in reader:
            if row and len(row) < width:  # [] is a blank line, which pandas skips too
                return reader.line_num, len(row)
    return None


__all__ = [
    "FeatureSource",
    "ROLES",
    "feature_table",
    "parse_feature_columns",
    "read_features",
    "split_id",
    "with_features",
]
