"""Loading a named dataset from disk: where it is looked for, the papers' preprocessed file when
present, else the raw file (downloaded when missing), its count filters and its item titles.

Named datasets are looked up, in order, in ``data_dir`` (when given), else in ``$ATTNREC_DATA``
(when set) and ``~/.cache/attnrec``; inside a root, both ``<root>/<name>/`` and ``<root>/``
are searched.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from attnrec.data.catalog import ENV_DATA, NamedDataset
from attnrec.data.download import download, extract
from attnrec.data.filters import min_count_filter, rebuild
from attnrec.data.formats import READERS
from attnrec.data.readers.lines import read_pairs
from attnrec.data.schema import Interactions
from attnrec.data.titles import read_titles, with_titles


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
    ds: NamedDataset, data_dir: str | Path | None, allow_download: bool, min_rating: float | None, k_core: int
) -> Interactions:
    """``ds`` as the papers' file when one is found (and no ``min_rating`` asks for ratings), else
    from its raw file, downloaded and extracted when missing."""
    roots = data_roots(data_dir)
    paper = next((p for f in ds.paper_files if (p := _find(roots, ds.name, f)) is not None), None)
    if paper is not None and min_rating is None:
        return _load_paper_file(ds, paper, roots, k_core)
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
    return data


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
