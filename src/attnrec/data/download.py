"""Fetching a named dataset: the official download (sha256-verified when known), the archive's
members, and the message that says what to download by hand when there is no network.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from attnrec.data.catalog import ENV_DATA, ENV_OFFLINE, NamedDataset
from attnrec.data.schema import DataError


def _offline_message(ds: NamedDataset, target_dir: Path, reason: str) -> str:
    """What to download from where, and where to put it, when attnrec cannot do it itself."""
    papers = f" The papers' file {ds.paper_files[0]} is also accepted there." if ds.paper_files else ""
    member = (
        f" (or its {ds.members[0]} at {target_dir / ds.members[0]})" if ds.members[0] != ds.filename else ""
    )
    return (
        f"dataset {ds.name!r} is not available locally and could not be downloaded ({reason}).\n"
        f"Download {ds.url} (file {ds.filename}; see {ds.homepage or ds.url}) and put it at "
        f"{target_dir / ds.filename}{member}.{papers}\n"
        f"Other folders: pass data_dir=... (CLI: --data-dir) or set {ENV_DATA}; "
        f"searched <root>/{ds.name}/ and <root>/ for each root."
    )


def download(ds: NamedDataset, target_dir: Path, allowed: bool) -> Path:
    """``ds``'s official file downloaded into ``target_dir`` (with its optional extras).

    Not ``allowed``, ``$ATTNREC_OFFLINE`` set, or a failed download is a :class:`DataError`
    that says which file to fetch by hand and where to put it.
    """
    if ds.manual_download:
        raise DataError(
            _offline_message(ds, target_dir, "its provider needs a login, so attnrec cannot fetch it")
        )
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


def extract(ds: NamedDataset, archive: Path) -> Path:
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
