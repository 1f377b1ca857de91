"""Item titles: MovieLens, Steam and two-column title files, ID re-mapping, attaching to a log."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from attnrec.data.files import base_name, iter_lines, open_text
from attnrec.data.readers.jsonlines import parse_record
from attnrec.data.schema import DataError, Interactions


class _Titles(dict[str, str]):
    """``{id: title}`` read from a file, one title per ID: an ID given a second, other title is an
    error naming both lines (the last one silently won)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = path
        self.lines: dict[str, int] = {}

    def put(self, item: str, title: str, line: int) -> None:
        if self.get(item, title) != title:
            raise DataError(
                f"{self.path}:{line}: item {item!r} already has the title {self[item]!r} (line "
                f"{self.lines[item]}), not {title[:80]!r}; a title file has one title per item"
            )
        self.lines.setdefault(item, line)
        self[item] = title


def _read_delimited_titles(path: str | Path, sep: str, expected: str) -> dict[str, str]:
    """``id<sep>title<sep>...`` lines (latin-1, as GroupLens writes them) -> ``{id: title}``."""
    out = _Titles(path)
    for n, line in iter_lines(path, "latin-1"):
        parts = line.split(sep)
        if len(parts) < 2 or not parts[0].strip():
            raise DataError(f"{path}:{n}: expected '{expected}', got {line[:80]!r}")
        out.put(parts[0].strip(), parts[1].strip(), n)
    return dict(out)


def read_movielens_titles(path: str | Path) -> dict[str, str]:
    """MovieLens ``movies.dat`` (``id::title::genres``, latin-1) -> ``{movie_id: title}``."""
    return _read_delimited_titles(path, "::", "id::title::genres")


def read_ml100k_titles(path: str | Path) -> dict[str, str]:
    """MovieLens-100k ``u.item`` (``id|title|release date|...``, latin-1) -> ``{item_id: title}``."""
    return _read_delimited_titles(path, "|", "id|title|...")


def read_movies_csv_titles(path: str | Path) -> dict[str, str]:
    """MovieLens-20M ``movies.csv`` (header ``movieId,title,genres``, quoted titles) -> ``{id: title}``."""
    with open_text(path) as fh:
        reader = csv.reader(fh)
        head = next(reader, None)
        if head is None:
            raise DataError(f"{path}: the file is empty")
        lower = [h.strip().lower() for h in head]
        if "title" not in lower:
            raise DataError(f"{path}: missing column 'title'; available columns: {head}")
        id_col = next((lower.index(c) for c in ("movieid", "item", "item_id", "id") if c in lower), 0)
        t_col = lower.index("title")
        out = _Titles(path)
        for row in reader:
            if not row:
                continue
            if len(row) <= max(id_col, t_col):
                raise DataError(f"{path}:{reader.line_num}: expected {len(head)} fields, got {len(row)}")
            out.put(row[id_col].strip(), row[t_col].strip(), reader.line_num)
    return dict(out)


def read_steam_titles(path: str | Path) -> dict[str, str]:
    """Steam ``steam_games.json.gz`` (dict lines with ``id`` and ``app_name``/``title``) -> titles."""
    out: dict[str, str] = {}
    for n, line in iter_lines(path):
        rec = parse_record(line, path, n)
        title = rec.get("app_name") or rec.get("title")
        if "id" in rec and title:
            out[str(rec["id"])] = str(title)
    return out


def read_id_mapping(path: str | Path) -> dict[str, str]:
    """Two IDs a line, ``new_id original_id`` (e.g. SASRec's ``sas_to_original_items.txt``)."""
    out: dict[str, str] = {}
    for n, line in iter_lines(path):
        parts = line.split()
        if len(parts) != 2:
            raise DataError(f"{path}:{n}: expected 'new_id original_id', got {line[:80]!r}")
        out[parts[0]] = parts[1]
    return out


def read_titles(path: str | Path, mapping: str | Path | Mapping[str, str] | None = None) -> dict[str, str]:
    """Item titles from ``movies.dat``, ``u.item``, ``movies.csv``, ``steam_games.json`` or a
    two-column ``item<TAB>title`` file (format from the name, then the content).

    With ``mapping`` (a ``new_id original_id`` file or dict), titles are re-keyed to the new IDs:
    ``{new: titles[original]}``, e.g. for SASRec's remapped ``ml-1m.txt``.
    """
    name = base_name(path)
    if name.endswith(".dat"):
        titles = read_movielens_titles(path)
    elif name == "u.item":
        titles = read_ml100k_titles(path)
    elif name.endswith(".csv"):
        titles = read_movies_csv_titles(path)
    elif name.endswith((".json", ".jsonl")):
        titles = read_steam_titles(path)
    else:
        first = next(iter_lines(path, "latin-1"), (0, ""))[1]
        if "::" in first:
            titles = read_movielens_titles(path)
        elif "|" in first and "\t" not in first:
            titles = read_ml100k_titles(path)
        else:
            pairs = _Titles(path)
            for n, line in iter_lines(path):
                parts = line.split("\t", 1)
                if len(parts) != 2:
                    raise DataError(f"{path}:{n}: expected 'item<TAB>title', got {line[:80]!r}")
                pairs.put(parts[0].strip(), parts[1].strip(), n)
            titles = dict(pairs)
    if mapping is not None:
        table = read_id_mapping(mapping) if isinstance(mapping, (str, Path)) else dict(mapping)
        titles = map_titles(titles, table)
    return titles


def map_titles(titles: Mapping[str, str], mapping: Mapping[str, str]) -> dict[str, str]:
    """Re-key titles through a ``{new_id: original_id}`` mapping (unmapped IDs are dropped)."""
    return {new: titles[orig] for new, orig in mapping.items() if orig in titles}


def check_titles_name_items(
    data: Interactions, titles: Mapping[str, str], where: object, hint: str = ""
) -> None:
    """A one-line :class:`DataError` when ``titles`` were given and none of them names an item of ``data``
    (a wrong file or column was no titles, without a word); ``hint`` ends the message."""
    if titles and any(data.items.get(k) is not None for k in titles):
        return
    shown = ", ".join(repr(str(k)) for k in list(titles)[:3])
    raise DataError(
        f"{where}: no title names an item of the data (title IDs: {shown or 'none'}; item IDs: "
        f"{', '.join(repr(str(k)) for k in data.items.external[:3])}){hint}"
    )


def with_titles(data: Interactions, titles: Mapping[str, str] | None) -> Interactions:
    """A copy of ``data`` whose ``item_titles`` are the given titles of its known items (merged
    over any it already has)."""
    if not titles:
        return data
    merged = dict(data.item_titles or {})
    known = ((data.items.get(k), v) for k, v in titles.items())  # 1.0, "1.0" and "1" name item "1"
    merged.update({str(data.items.external[j - data.items.offset]): v for j, v in known if j is not None})
    return replace(data, item_titles=merged or None)
