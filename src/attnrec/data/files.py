"""Opening data files: existence checks, transparent gzip, line iteration, content hashes.

Gzip is detected from the file's magic bytes, not its name. Errors name the file and the line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path

from attnrec.data.schema import DataError

_GZIP_MAGIC = b"\x1f\x8b"


def require_file(path: str | Path) -> Path:
    """``path`` as a :class:`Path`; a :class:`DataError` when it is missing or a directory."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a file")
    return p


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes."""
    with open(path, "rb") as fh:
        return fh.read(2) == _GZIP_MAGIC


def open_binary(path: str | Path) -> gzip.GzipFile | io.BufferedReader:
    """The file's (decompressed) bytes."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


def open_text(path: str | Path, encoding: str = "utf-8") -> io.TextIOBase:
    """Open a text file, transparently decompressing gzip."""
    p = require_file(path)
    if is_gzip(p):
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding=encoding, errors="strict")
    return open(p, encoding=encoding)


def content_sha256(path: str | Path) -> str:
    """sha256 of the (decompressed) content, so ``x.txt`` and ``x.txt.gz`` hash alike."""
    h = hashlib.sha256()
    with open_binary(path) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """``(line_number, stripped_line)`` for non-empty lines; decoding errors name the line.

    Lines are decoded one by one, so an undecodable byte is reported on its own line; a UTF-8
    byte-order mark at the start is dropped.
    """
    p = require_file(path)
    gz = is_gzip(p)  # outside the try: only failures while reading are reported as DataError
    n = 0
    try:
        with gzip.open(p, "rb") if gz else open(p, "rb") as fh:
            for n, raw in enumerate(fh, start=1):  # noqa: B007
                try:
                    s = raw.decode(encoding).strip()
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}:{n}: not valid {encoding} text ({e.reason})") from e
                if n == 1 and s.startswith("\ufeff"):
                    s = s[1:].strip()
                if s:
                    yield n, s
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot be read after line {n} ({e})") from e


def base_name(path: str | Path) -> str:
    """File name in lower case without a trailing ``.gz`` (``ratings.csv.gz`` -> ``ratings.csv``)."""
    name = Path(path).name.lower()
    return name[:-3] if name.endswith(".gz") else name


def require_nonempty(path: str | Path, encoding: str = "utf-8") -> None:
    """Raise a :class:`DataError` when the file is missing or holds no non-blank line."""
    for _ in iter_lines(path, encoding):
        return
    raise DataError(f"{path}: the file is empty (no interactions)")
