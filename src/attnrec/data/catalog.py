"""The catalogue of public datasets attnrec knows by name: where each comes from, how it is read
and preprocessed, and which of the papers' preprocessed files may stand in for it.

The catalogue itself is data, ``resources/datasets.toml`` next to this module; this module reads
it. :mod:`attnrec.data.named` finds, downloads and loads the datasets.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

#: Environment variable naming a folder searched for named datasets (before ``~/.cache/attnrec``).
ENV_DATA = "ATTNREC_DATA"
#: Environment variable that, set to anything but ``0``, forbids downloads.
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

    ``item_features``/``user_features`` name a loader of :mod:`attnrec.data.named_features`
    and its files (the first required, the others optional companions), read when present.
    A papers' file re-numbers IDs: its features are re-keyed through ``paper_titles[0]`` (items)
    and ``paper_user_mapping`` (users), and left out when there is no such mapping.
    ``manual_download`` marks data whose provider needs a login: it is never fetched.
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
    item_features: tuple[str, ...] = ()  # (loader, file, optional companion files ...)
    user_features: tuple[str, ...] = ()
    paper_user_mapping: str | None = None  # new_id original_id file for the papers' user IDs
    manual_download: bool = False


def _dataset(name: str, spec: dict[str, Any]) -> NamedDataset:
    """One entry of ``resources/datasets.toml`` (TOML arrays become tuples; no ``sha256``: ``None``)."""
    values = {k: v for k, v in spec.items() if k != "aliases"}
    for key in ("members", "paper_files", "paper_titles", "item_features", "user_features"):
        if key in values:
            values[key] = tuple(values[key])
    values["extra_downloads"] = tuple(tuple(d) for d in values.get("extra_downloads", ()))
    values["sha256"] = values.get("sha256")
    return NamedDataset(name=name, **values)


def _read_catalog() -> dict[str, Any]:
    text = resources.files("attnrec.data").joinpath("resources", "datasets.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


_CATALOG = _read_catalog()
DATASETS: dict[str, NamedDataset] = {name: _dataset(name, spec) for name, spec in _CATALOG.items()}
_ALIASES: dict[str, str] = {
    alias: name for name, spec in _CATALOG.items() for alias in spec.get("aliases", [])
}


def list_datasets() -> list[str]:
    """Names accepted by :func:`~attnrec.data.datasets.load_dataset` besides file paths."""
    return ["demo", *DATASETS]


def canonical_name(spec: str) -> str:
    """``spec`` in lower case with aliases resolved (``ML1M`` -> ``ml-1m``)."""
    return _ALIASES.get(spec.lower(), spec.lower())
