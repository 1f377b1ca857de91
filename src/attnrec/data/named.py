"""Loading a named dataset from disk: where it is looked for, the papers' preprocessed file when
present, else the raw file (downloaded when missing), its count filters, its item titles and its
item/user feature tables (when their files are there).

Named datasets are looked up, in order, in ``data_dir`` (when given), else in ``$ATTNREC_DATA``
(when set) and ``~/.cache/attnrec``; inside a root, both ``<root>/<name>/`` and ``<root>/``
are searched.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import replace
from pathlib import Path

from attnrec.data.catalog import ENV_DATA, NamedDataset
from attnrec.data.download import download, extract
from attnrec.data.features import FeatureTable
from attnrec.data.filters import min_count_filter, rebuild
from attnrec.data.formats import READERS
from attnrec.data.named_features import FEATURE_LOADERS
from attnrec.data.readers.lines import read_pairs
from attnrec.data.schema import Interactions
from attnrec.data.titles import read_id_mapping, read_titles, with_titles


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
    """``filename`` (or ``filename.gz``) in ``<root>/<name>/`` or ``<root>/``, first root first."""
    for root in roots:
        for folder in (root / name, root):
            for candidate in (folder / filename, folder / (filename + ".gz")):
                if candidate.is_file():
                    return candidate
    return None


def _find_beside(roots: list[Path], name: str, filename: str, beside: Path) -> Path | None:
    """A companion file (titles, ID mapping): in the roots, else next to the file it goes with."""
    return _find(roots, name, filename) or _find([beside.parent], "", filename)


def load_named(
    ds: NamedDataset,
    data_dir: str | Path | None,
    allow_download: bool,
    min_rating: float | None,
    k_core: int,
    features: bool = True,
) -> Interactions:
    """``ds`` as the papers' file when one is found (and no ``min_rating`` asks for ratings), else
    from its raw file, downloaded and extracted when missing; with its feature tables unless
    ``features=False``."""
    roots = data_roots(data_dir)
    paper = next((p for f in ds.paper_files if (p := _find(roots, ds.name, f)) is not None), None)
    if paper is not None and min_rating is None:
        data = _load_paper_file(ds, paper, roots, k_core)
        return _with_named_features(ds, data, roots, paper, True) if features else data
    data, raw = _load_raw(ds, roots, allow_download, min_rating, k_core)
    return (
        _with_named_features(ds, data, roots, raw, False) if features else replace(data, item_features=None)
    )


def _load_raw(
    ds: NamedDataset, roots: list[Path], allow_download: bool, min_rating: float | None, k_core: int
) -> tuple[Interactions, Path]:
    """The raw file's log (downloaded and extracted when missing), filtered and titled, and its path."""
    raw = _find(roots, ds.name, ds.members[0])
    if raw is None:
        archive = _find(roots, ds.name, ds.filename)
        if archive is None:
            archive = download(ds, roots[0] / ds.name, allow_download)
        raw = extract(ds, archive)
    data = READERS[ds.reader](raw, name=ds.name, min_rating=min_rating)
    data = min_count_filter(data, ds.min_user_count, ds.min_item_count)
    if k_core > 1:
        data = rebuild(data, k_core=k_core)
    if ds.titles is not None:
        title_file = _find_beside(roots, ds.name, ds.titles, raw)
        if title_file is not None:
            data = with_titles(data, read_titles(title_file))
    return data, raw


def _with_named_features(
    ds: NamedDataset, data: Interactions, roots: list[Path], beside: Path, paper: bool
) -> Interactions:
    """``data`` with the dataset's item/user feature tables whose files are found (re-keyed to a
    papers' file's IDs through its mapping files). Named datasets' tables give log IDs without a
    row empty features (``missing="empty"``): their coverage is shown by ``attnrec data``."""
    item = _named_table(ds, ds.item_features, roots, beside)
    user = _named_table(ds, ds.user_features, roots, beside)
    if paper:
        item_map = ds.paper_titles[0] if ds.paper_titles is not None else None
        item = _rekeyed(ds, item, item_map, roots, beside)
        user = _rekeyed(ds, user, ds.paper_user_mapping, roots, beside)
    return replace(data, item_features=item or data.item_features, user_features=user or data.user_features)


def _named_table(
    ds: NamedDataset, spec: tuple[str, ...], roots: list[Path], beside: Path
) -> FeatureTable | None:
    if not spec:
        return None
    loader, first, *companions = spec
    main = _find_beside(roots, ds.name, first, beside)
    if main is None:
        return None
    table = FEATURE_LOADERS[loader](main, [_find_beside(roots, ds.name, c, beside) for c in companions])
    return table.with_missing("empty")


def _rekeyed(
    ds: NamedDataset, table: FeatureTable | None, mapping: str | None, roots: list[Path], beside: Path
) -> FeatureTable | None:
    """``table`` keyed by the papers' IDs through the ``mapping`` file; ``None`` without one."""
    if table is None or mapping is None:
        return None
    mapping_file = _find_beside(roots, ds.name, mapping, beside)
    return None if mapping_file is None else table.rekey(read_id_mapping(mapping_file))


def _load_paper_file(ds: NamedDataset, path: Path, roots: list[Path], k_core: int) -> Interactions:
    """The papers' ``user item`` file; a content hash other than the papers' is warned about."""
    data = read_pairs(path, name=ds.name, k_core=k_core)
    if ds.paper_sha256 and data.source.sha256 != ds.paper_sha256:
        warnings.warn(
            f"{path}: content sha256 {data.source.sha256[:12]} differs from the papers' {ds.name} file "
            f"({ds.paper_sha256[:12]}); results will not be comparable with published numbers",
            stacklevel=3,  # attributed to load_dataset (via load_named), the public entry point
        )
    if ds.paper_titles is not None:
        mapping_file = _find_beside(roots, ds.name, ds.paper_titles[0], path)
        title_file = _find_beside(roots, ds.name, ds.paper_titles[1], path)
        if mapping_file is not None and title_file is not None:
            data = with_titles(data, read_titles(title_file, mapping_file))
    return data
