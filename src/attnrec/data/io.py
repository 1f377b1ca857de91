"""Readers for interaction logs. Every reader is a pure function of a path.

Gzip is detected from the file's magic bytes. Errors name the file and the line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path

from attnrec.data.build import from_columns
from attnrec.data.schema import DataError, DataSource, Interactions


def open_text(path: str | Path, encoding: str = "utf-8") -> io.TextIOBase:
    """Open a text file, transparently decompressing gzip."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: file not found")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a file")
    with open(p, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding=encoding, errors="strict")  # type: ignore[return-value]
    return open(p, encoding=encoding)  # type: ignore[return-value]


def content_sha256(path: str | Path) -> str:
    """sha256 of the (decompressed) content, so ``x.txt`` and ``x.txt.gz`` hash alike."""
    p = Path(path)
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    with opener(p, "rb") as fh:  # type: ignore[operator]
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def iter_lines(path: str | Path, encoding: str = "utf-8") -> Iterator[tuple[int, str]]:
    """``(line_number, stripped_line)`` for non-empty lines; decoding errors name the line."""
    with open_text(path, encoding) as fh:
        n = 0
        try:
            for n, line in enumerate(fh, start=1):  # noqa: B007
                s = line.strip()
                if s:
                    yield n, s
        except UnicodeDecodeError as e:
            raise DataError(f"{path}:{n + 1}: not valid {encoding} text ({e.reason})") from e
        except (OSError, EOFError) as e:
            raise DataError(f"{path}: cannot be read ({e})") from e


def read_pairs(path: str | Path, name: str | None = None, **build: object) -> Interactions:
    """``user item`` pairs, one per line (the SASRec/BERT4Rec files); file order is chronology."""
    users: list[str] = []
    items: list[str] = []
    for n, line in iter_lines(path):
        parts = line.split()
        if len(parts) != 2:
            raise DataError(f"{path}:{n}: expected 'user item', got {line[:80]!r}")
        users.append(parts[0])
        items.append(parts[1])
    src = DataSource(name or Path(path).name, str(path), "pairs", content_sha256(path))
    return from_columns(users, items, source=src, **build)  # type: ignore[arg-type]
