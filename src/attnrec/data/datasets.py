"""Load a dataset by name (``ml-1m``, ``demo`` ...) or from a file, in any supported format.

Named datasets are looked up, in order, in ``data_dir`` (when given), else in ``$ATTNREC_DATA``
(when set) and ``~/.cache/attnrec``; inside a root, both ``<root>/<name>/`` and ``<root>/``
are searched. When no file is there, the official archive is downloaded into
``<root>/<name>/`` (its sha256 is verified when known) unless ``download=False`` or
``ATTNREC_OFFLINE=1``; without network, the :class:`DataError` says which file to download
from where and where to put it.

For every named dataset, the preprocessed ``user item`` file of the SASRec/BERT4Rec papers
(``<name>.txt`` or ``<name>.txt.gz``) is accepted in the same folders and preferred over the
raw download: it is the file their published numbers were computed on.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnrec.data.build import from_columns
from attnrec.data.demo import make_demo
from attnrec.data.io import (
    _parse_record,
    base_name,
    iter_lines,
    read_amazon_json,
    read_id_mapping,
    read_ml20m,
    read_ml100k,
    read_movielens_dat,
    read_otto_jsonl,
    read_pairs,
    read_steam_json,
    read_table,
    read_titles,
    read_user_lines,
    table_format,
    with_titles,
)
from attnrec.data.schema import DataError, Interactions

#: Explicit formats accepted by :func:`load_dataset` (``"auto"`` detects one of them).
FORMATS = (
    "pairs", "user-lines", "csv", "tsv", "parquet", "movielens-dat", "ml100k", "ml20m", "amazon-json",
    "steam-json", "otto-jsonl", "amazon-ratings-csv",
)  # fmt: skip

ENV_DATA = "ATTNREC_DATA"
ENV_OFFLINE = "ATTNREC_OFFLINE"


@dataclass(frozen=True)
class NamedDataset:
    """A public dataset attnrec knows how to fetch and prepare.

    ``url``/``filename``/``sha256`` describe the official download (``sha256`` is ``None`` where
    we do not know the hash for certain; the download is then not verified). ``members`` are
    the files used from it (archive members are matched by base name); ``members[0]`` holds the
    interactions and is read with ``reader``; ``titles`` names the item-title file, if any.
    ``paper_files`` are the papers' preprocessed files accepted instead, with the sha256 of
    their (uncompressed) content when known.
    """

    name: str
    url: str
    sha256: str | None
    filename: str
    reader: str
    preprocessing: str
    members: tuple[str, ...]
    titles: str | None = None
    homepage: str = ""
    paper_files: tuple[str, ...] = ()
    paper_sha256: str | None = None
    paper_titles: tuple[str, str] | None = None  # (id mapping file, title file) for the paper file
    min_user_count: int = 0  # one-pass filters of the raw data (counted over the whole file)
    min_item_count: int = 0
    extra_downloads: tuple[tuple[str, str], ...] = field(default=())  # (url, filename), optional


DATASETS: dict[str, NamedDataset] = {
    d.name: d
    for d in (
        NamedDataset(
            name="ml-1m",
            url="https://files.grouplens.org/datasets/movielens/ml-1m.zip",
            sha256=None,  # not known for certain; GroupLens does not publish a sha256
            filename="ml-1m.zip",
            reader="movielens-dat",
            members=("ratings.dat", "movies.dat"),
            titles="movies.dat",
            homepage="https://grouplens.org/datasets/movielens/1m/",
            preprocessing=(
                "Every rating is an implicit interaction; items with fewer than 5 ratings are removed "
                "(3,416 items, all 6,040 users remain); per-user chronological order, ties in file order. "
                "This is the recipe of the SASRec/BERT4Rec file ml-1m.txt, which is preferred when present "
                "(the raw file gives the same users and items, but the order of equal timestamps may differ)."
            ),
            paper_files=("ml-1m.txt", "ml-1m.txt.gz"),
            paper_sha256="b725f3acb3986fe3130bffd1e77a74d182a1f51799567a236dbd60270f95b0a2",
            paper_titles=("sas_to_original_items.txt", "movies.dat"),
            min_item_count=5,
        ),
        NamedDataset(
            name="ml-20m",
            url="https://files.grouplens.org/datasets/movielens/ml-20m.zip",
            sha256=None,  # not known for certain; GroupLens publishes only an md5
            filename="ml-20m.zip",
            reader="ml20m",
            members=("ratings.csv", "movies.csv"),
            titles="movies.csv",
            homepage="https://grouplens.org/datasets/movielens/20m/",
            preprocessing=(
                "Every rating is an implicit interaction (as in BERT4Rec: 138,493 users, 26,744 items); "
                "per-user chronological order, ties in file order."
            ),
            paper_files=("ml-20m.txt", "ml-20m.txt.gz"),
        ),
        NamedDataset(
            name="ml-100k",
            url="https://files.grouplens.org/datasets/movielens/ml-100k.zip",
            sha256=None,  # not known for certain
            filename="ml-100k.zip",
            reader="ml100k",
            members=("u.data", "u.item"),
            titles="u.item",
            homepage="https://grouplens.org/datasets/movielens/100k/",
            preprocessing="Every rating is an implicit interaction; per-user chronological order, ties in file order.",
            paper_files=("ml-100k.txt", "ml-100k.txt.gz"),
        ),
        NamedDataset(
            name="beauty",
            # Amazon product data (2014, McAuley et al.), "ratings only" file of the Beauty category.
            url="http://snap.stanford.edu/data/amazon/productGraph/categoryFiles/ratings_Beauty.csv",
            sha256=None,  # not known for certain
            filename="ratings_Beauty.csv",
            reader="amazon-ratings-csv",
            members=("ratings_Beauty.csv",),
            homepage="http://jmcauley.ucsd.edu/data/amazon/",
            preprocessing=(
                "Every review/rating is an implicit interaction; users and items with fewer than 5 "
                "interactions (counted once over the whole file, as in the SASRec script) are removed; "
                "chronological per user. The BERT4Rec paper's beauty.txt (40,226 users, 54,542 items, "
                "353,962 interactions) was made with a different filter and is preferred when present."
            ),
            paper_files=("beauty.txt", "beauty.txt.gz", "Beauty.txt", "Beauty.txt.gz"),
            paper_sha256="f480b7a7403852342ffd8f9809bb30697dd669be31813d0e204b698fec86ef49",
            min_user_count=5,
            min_item_count=5,
        ),
        NamedDataset(
            name="steam",
            url="http://cseweb.ucsd.edu/~wckang/steam_reviews.json.gz",  # from the SASRec README
            sha256=None,  # not known for certain
            filename="steam_reviews.json.gz",
            reader="steam-json",
            members=("steam_reviews.json.gz",),
            titles="steam_games.json.gz",
            homepage="https://github.com/kang205/SASRec",
            preprocessing=(
                "Every review is an implicit interaction (user = username, item = product_id, time = "
                "review date, day resolution, ties in file order); users and items with fewer than 5 "
                "reviews (counted once over the whole file) are removed. Reading the 1.3 GB file takes "
                "minutes. A papers' steam.txt is preferred when present."
            ),
            paper_files=("steam.txt", "steam.txt.gz", "Steam.txt", "Steam.txt.gz"),
            min_user_count=5,
            min_item_count=5,
            extra_downloads=(("http://cseweb.ucsd.edu/~wckang/steam_games.json.gz", "steam_games.json.gz"),),
        ),
    )
}

_ALIASES = {
    "ml1m": "ml-1m", "movielens-1m": "ml-1m", "ml20m": "ml-20m", "movielens-20m": "ml-20m",
    "ml100k": "ml-100k", "movielens-100k": "ml-100k", "amazon-beauty": "beauty",
}  # fmt: skip


def list_datasets() -> list[str]:
    """Names accepted by :func:`load_dataset` besides file paths."""
    return ["demo", *DATASETS]


def load_dataset(
    spec: str | Path,
    *,
    format: str = "auto",
    columns: Mapping[str, str | int] | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
    data_dir: str | Path | None = None,
    titles: str | Path | Mapping[str, str] | None = None,
    title_mapping: str | Path | Mapping[str, str] | None = None,
    download: bool = True,
) -> Interactions:
    """Load an interaction log.

    Parameters
    ----------
    spec : str or Path
        ``"demo"`` (the built-in generated dataset), a named dataset (``ml-1m``, ``ml-20m``,
        ``ml-100k``, ``beauty``, ``steam``) or a path to a file.
    format : str
        For files: ``"auto"`` (from the name, then the content) or one of :data:`FORMATS`.
    columns : mapping, optional
        Column names (or positions) for the roles of a CSV/TSV/Parquet table; see
        :func:`attnrec.data.io.read_table`.
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

    Raises
    ------
    DataError
        For unknown names or formats, missing or malformed files; the message says what to do.
    """
    text = str(spec).strip()
    key = _ALIASES.get(text.lower(), text.lower())
    if key == "demo" and not Path(text).is_file():
        data = make_demo(min_rating=min_rating, k_core=k_core)
    elif key in DATASETS and not Path(text).is_file():
        data = _load_named(DATASETS[key], data_dir, download, min_rating, k_core)
    else:
        path = Path(text).expanduser()
        if not path.exists():
            raise DataError(
                f"{text!r} is neither an existing file nor a named dataset ({', '.join(list_datasets())})"
            )
        data = read_file(path, format=format, columns=columns, min_rating=min_rating, k_core=k_core)
    if titles is not None:
        table = read_titles(titles) if isinstance(titles, (str, Path)) else dict(titles)
        if title_mapping is not None:
            mapping = read_id_mapping(title_mapping) if isinstance(title_mapping, (str, Path)) else title_mapping
            table = {new: table[old] for new, old in mapping.items() if old in table}
        data = with_titles(data, table)
    return data


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------

_Reader = Callable[..., Interactions]
_READERS: dict[str, _Reader] = {
    "pairs": lambda p, **kw: read_pairs(p, **kw),
    "user-lines": read_user_lines,
    "movielens-dat": read_movielens_dat,
    "ml100k": read_ml100k,
    "ml20m": read_ml20m,
    "amazon-json": read_amazon_json,
    "steam-json": read_steam_json,
    "otto-jsonl": lambda p, min_rating=None, **kw: read_otto_jsonl(p, **kw),
    "amazon-ratings-csv": lambda p, **kw: read_table(
        p, {"user": 0, "item": 1, "rating": 2, "timestamp": 3}, sep=",", header=False,
        format="amazon-ratings-csv", **kw,
    ),
}  # fmt: skip


def read_file(
    path: str | Path,
    *,
    format: str = "auto",
    columns: Mapping[str, str | int] | None = None,
    min_rating: float | None = None,
    k_core: int = 0,
    name: str | None = None,
) -> Interactions:
    """Read one interaction file in the given (or detected) format."""
    fmt = detect_format(path) if format == "auto" else format
    if fmt not in FORMATS and fmt not in _READERS:
        raise DataError(f"unknown format {format!r}; use one of: auto, {', '.join(FORMATS)}")
    if columns is not None and fmt not in ("csv", "tsv", "parquet"):
        raise DataError(f"columns=... applies to csv, tsv and parquet tables, not to the {fmt!r} format")
    if fmt in ("csv", "tsv", "parquet"):
        # A .csv/.tsv name fixes the separator; other names (data.txt read as csv) are sniffed.
        sep = "\t" if fmt == "tsv" else ("," if fmt == "csv" and table_format(path) == "csv" else None)
        return read_table(path, columns, sep, name=name, min_rating=min_rating, k_core=k_core, format=fmt)
    if fmt in ("pairs", "user-lines", "otto-jsonl") and min_rating is not None:
        raise DataError(f"{path}: min_rating needs ratings, and the {fmt!r} format has none")
    kwargs: dict[str, object] = {"k_core": k_core}
    if fmt not in ("pairs", "user-lines", "otto-jsonl"):
        kwargs["min_rating"] = min_rating
    if name is not None:
        kwargs["name"] = name
    return _READERS[fmt](path, **kwargs)


def detect_format(path: str | Path) -> str:
    """Guess the format of an interaction file from its name, then from its first lines."""
    p = Path(path)
    name = base_name(p)
    tf = table_format(p)
    if tf == "parquet":
        return "parquet"
    if name.endswith((".json", ".jsonl", ".ndjson")):
        return _json_format(p)
    lines = []
    for _, line in iter_lines(p, "latin-1"):
        lines.append(line)
        if len(lines) >= 200:
            break
    if not lines:
        raise DataError(f"{p}: the file is empty (no interactions)")
    first = lines[0]
    if name == "u.data":
        return "ml100k"
    if "::" in first:
        return "movielens-dat"
    if first.startswith("{"):
        return _json_format(p)
    if tf == "csv":
        head = [h.strip().lower() for h in first.split(",")]
        if head[:4] == ["userid", "movieid", "rating", "timestamp"]:
            return "ml20m"
        if len(head) == 4 and _numeric(head[2]) and _numeric(head[3]):
            return "amazon-ratings-csv"  # headerless user,item,rating,timestamp (Amazon "ratings only")
        return "csv"
    if tf == "tsv":
        return "tsv"
    tokens = [ln.split() for ln in lines]
    if all(_numeric(t) for t in tokens[0]) or not any(c in first for c in ",;\t|"):
        if all(len(t) == 2 for t in tokens):
            return "pairs"
        if "\t" in first and all(len(ln.split("\t")) == 4 and all(_numeric(t) for t in ln.split("\t")) for ln in lines):
            return "ml100k"
        if all(len(t) >= 2 for t in tokens) and not any(c in first for c in ",;|"):
            return "user-lines"
    if "\t" in first:
        return "tsv"
    if "," in first or ";" in first or "|" in first:
        return "csv"
    raise DataError(f"{p}: cannot tell the format from the content; pass format= one of {', '.join(FORMATS)}")


def _numeric(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _json_format(p: Path) -> str:
    for n, line in iter_lines(p):
        keys = set(_parse_record(line, p, n))
        if {"reviewerID", "asin"} <= keys:
            return "amazon-json"
        if {"username", "product_id"} <= keys:
            return "steam-json"
        if {"session", "events"} <= keys:
            return "otto-jsonl"
        raise DataError(
            f"{p}:{n}: unknown JSON layout (keys {sorted(keys)[:10]}); expected Amazon reviews "
            "(reviewerID, asin), Steam reviews (username, product_id) or OTTO sessions (session, events)"
        )
    raise DataError(f"{p}: the file is empty (no interactions)")


# --------------------------------------------------------------------------------------------
# Named datasets
# --------------------------------------------------------------------------------------------


def data_roots(data_dir: str | Path | None = None) -> list[Path]:
    """Folders searched for named datasets, in order (the first is where downloads go)."""
    if data_dir is not None:
        return [Path(data_dir).expanduser()]
    roots = []
    env = os.environ.get(ENV_DATA)
    if env:
        roots.append(Path(env).expanduser())
    roots.append(Path.home() / ".cache" / "attnrec")
    return roots


def _find(roots: list[Path], name: str, filename: str) -> Path | None:
    for root in roots:
        for folder in (root / name, root):
            for candidate in (folder / filename, folder / (filename + ".gz")):
                if candidate.is_file():
                    return candidate
    return None


def _load_named(
    ds: NamedDataset, data_dir: str | Path | None, download: bool, min_rating: float | None, k_core: int
) -> Interactions:
    roots = data_roots(data_dir)
    paper = next((p for f in ds.paper_files if (p := _find(roots, ds.name, f)) is not None), None)
    if paper is not None and min_rating is None:
        return _load_paper_file(ds, paper, roots, k_core)
    raw = _find(roots, ds.name, ds.members[0])
    if raw is None:
        archive = _find(roots, ds.name, ds.filename)
        if archive is None:
            archive = _download(ds, roots[0] / ds.name, download)
        raw = _extract(ds, archive)
    data = _READERS[ds.reader](raw, name=ds.name, min_rating=min_rating)
    data = _min_count_filter(data, ds.min_user_count, ds.min_item_count)
    if k_core > 1:
        data = _rebuild(data, k_core=k_core)
    if ds.titles is not None:
        title_file = _find(roots, ds.name, ds.titles) or _find([raw.parent], "", ds.titles)
        if title_file is not None:
            data = with_titles(data, read_titles(title_file))
    return data


def _load_paper_file(ds: NamedDataset, path: Path, roots: list[Path], k_core: int) -> Interactions:
    data = read_pairs(path, name=ds.name, k_core=k_core)
    if ds.paper_sha256 and data.source.sha256 != ds.paper_sha256:
        warnings.warn(
            f"{path}: content sha256 {data.source.sha256[:12]} differs from the papers' {ds.name} file "
            f"({ds.paper_sha256[:12]}); results will not be comparable with published numbers",
            stacklevel=3,
        )
    if ds.paper_titles is not None:
        mapping_file = _find(roots, ds.name, ds.paper_titles[0]) or _find([path.parent], "", ds.paper_titles[0])
        title_file = _find(roots, ds.name, ds.paper_titles[1]) or _find([path.parent], "", ds.paper_titles[1])
        if mapping_file is not None and title_file is not None:
            data = with_titles(data, read_titles(title_file, mapping_file))
    return data


def _rebuild(data: Interactions, keep: np.ndarray | None = None, k_core: int = 0) -> Interactions:
    """The same log (optionally only the rows in ``keep``) rebuilt with fresh contiguous IDs."""
    sel = np.ones(len(data), dtype=bool) if keep is None else keep
    titles = data.item_titles
    return from_columns(
        np.asarray(data.users.external, dtype=object)[data.user[sel]],
        np.asarray(data.items.external, dtype=object)[data.item[sel] - data.items.offset],
        None if data.timestamp is None else data.timestamp[sel],
        None if data.rating is None else data.rating[sel],
        None if data.event is None else data.event[sel],
        source=data.source, item_titles=titles, k_core=k_core,
    )  # fmt: skip


def _min_count_filter(data: Interactions, min_user: int, min_item: int) -> Interactions:
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
    return _rebuild(data, keep)


def _offline_message(ds: NamedDataset, target_dir: Path, reason: str) -> str:
    papers = f" The papers' file {ds.paper_files[0]} is also accepted there." if ds.paper_files else ""
    member = f" (or its {ds.members[0]} at {target_dir / ds.members[0]})" if ds.members[0] != ds.filename else ""
    return (
        f"dataset {ds.name!r} is not available locally and could not be downloaded ({reason}).\n"
        f"Download {ds.url} (file {ds.filename}; see {ds.homepage or ds.url}) and put it at "
        f"{target_dir / ds.filename}{member}.{papers}\n"
        f"Other folders: pass data_dir=... (CLI: --data-dir) or set {ENV_DATA}; "
        f"searched <root>/{ds.name}/ and <root>/ for each root."
    )


def _download(ds: NamedDataset, target_dir: Path, allowed: bool) -> Path:
    if not allowed or os.environ.get(ENV_OFFLINE, "").strip() not in ("", "0"):
        raise DataError(_offline_message(ds, target_dir, "downloads are disabled"))
    target = target_dir / ds.filename
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
        _fetch(ds.url, target, ds.sha256)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise DataError(_offline_message(ds, target_dir, f"{type(e).__name__}: {e}")) from e
    for url, filename in ds.extra_downloads:  # optional extras (titles); failures are not fatal
        try:
            _fetch(url, target_dir / filename, None)
        except (urllib.error.URLError, OSError, TimeoutError):
            pass
    return target


def _fetch(url: str, target: Path, sha256: str | None) -> None:
    """Download ``url`` to ``target`` atomically, verifying ``sha256`` when given."""
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                h.update(chunk)
                out.write(chunk)
        if sha256 is not None and h.hexdigest() != sha256:
            raise DataError(f"{url}: sha256 {h.hexdigest()} does not match the expected {sha256}; not used")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _extract(ds: NamedDataset, archive: Path) -> Path:
    """The interactions file from a downloaded archive (members written next to it by base name)."""
    if not zipfile.is_zipfile(archive):
        return archive  # a plain (possibly gzipped) file
    dest = archive.parent
    try:
        with zipfile.ZipFile(archive) as zf:
            names = {Path(n).name: n for n in zf.namelist() if not n.endswith("/")}
            for member in ds.members:
                if member in names and not (dest / member).exists():
                    tmp = dest / (member + ".part")
                    with zf.open(names[member]) as src, open(tmp, "wb") as out:
                        shutil.copyfileobj(src, out)
                    os.replace(tmp, dest / member)
    except (zipfile.BadZipFile, OSError) as e:
        raise DataError(f"{archive}: cannot be extracted ({e}); delete it and download it again") from e
    raw = dest / ds.members[0]
    if not raw.is_file():
        raise DataError(f"{archive}: has no {ds.members[0]}; is it the right archive ({ds.url})?")
    return raw


__all__ = [
    "DATASETS", "FORMATS", "NamedDataset", "data_roots", "detect_format", "list_datasets", "load_dataset",
    "read_file",
]  # fmt: skip
