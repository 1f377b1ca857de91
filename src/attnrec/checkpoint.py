"""Checkpoint files: safetensors weights + JSON, written atomically with sha256 checksums.

Loading never unpickles: tensors come from safetensors, everything else from JSON. A directory's
``manifest.json`` (:func:`write_manifest`, written last) holds the sha256 and size of every file
in it; :func:`read_verified` reads the files back only when all of them match it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, corrupted or of an unknown format."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename, so readers never see half a file.

    The file gets the mode any new file of the process gets (0666 less the umask; 0644 under the
    usual umask 022), not the 0600 of a :func:`tempfile.mkstemp` file, so that a server running
    as another user can read a model directory the umask lets it read.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the kernel applies the umask
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True, default=str).encode())


def read_json(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; not an attnrec checkpoint directory?") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    return parse_json(data, path)


def parse_json(data: bytes, path: Path) -> Any:
    """The JSON document ``data`` (the bytes of ``path``); a clear error when it is not one."""
    try:
        return json.loads(data.decode())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise CheckpointError(f"{path}: corrupted JSON ({reason})") from None


def save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> str:
    """Save tensors as safetensors atomically; returns the file's sha256."""
    data = st_save({k: v.detach().cpu().contiguous() for k, v in tensors.items()})
    atomic_write_bytes(path, data)
    return hashlib.sha256(data).hexdigest()


def load_tensors(path: Path, sha256: str | None = None) -> dict[str, torch.Tensor]:
    """Load safetensors, verifying ``sha256`` when given; clear errors on truncation or corruption."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing weights file") from None
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise CheckpointError(f"{path}: checksum mismatch; the file is truncated or corrupted")
    return load_tensor_bytes(data, path)


def load_tensor_bytes(data: bytes, path: Path) -> dict[str, torch.Tensor]:
    """Tensors from the bytes of the safetensors file ``path``; a clear error when they are not one."""
    try:
        return st_load(data)
    except (SafetensorError, ValueError) as e:
        raise CheckpointError(f"{path}: not a valid safetensors file ({e})") from e


# -- the manifest of a directory --------------------------------------------------------------------
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a file of the directory itself, no path
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def write_manifest(directory: Path, names: Iterable[str]) -> Path:
    """Write ``directory/manifest.json`` with the sha256 and size of each file ``names``; returns it.

    Write it last: it then vouches for a complete directory, and a later partial overwrite of
    any file no longer matches it.
    """
    files: dict[str, dict[str, object]] = {}
    for name in sorted(names):
        data = (directory / name).read_bytes()
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    path = directory / MANIFEST
    write_json(path, {"manifest_version": MANIFEST_VERSION, "files": files})
    return path


def _manifest_entries(path: Path) -> dict[str, tuple[str, int]]:
    """``name -> (sha256, bytes)`` from the manifest ``path``; one clear error for any malformation."""
    man = read_json(path)
    files = man.get("files") if isinstance(man, dict) else None
    if (
        not isinstance(man, dict)
        or man.get("manifest_version") != MANIFEST_VERSION
        or not isinstance(files, dict)
    ):
        raise CheckpointError(
            f"{path}: not an attnrec manifest (expected manifest_version "
            f"{MANIFEST_VERSION} and a 'files' table)"
        )
    entries: dict[str, tuple[str, int]] = {}
    for name, entry in files.items():
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        size = entry.get("bytes") if isinstance(entry, dict) else None
        if (
            not _PLAIN_NAME.match(name)
            or name == MANIFEST
            or not isinstance(sha, str)
            or not _SHA256.match(sha)
            or not isinstance(size, int)
            or isinstance(size, bool)
            or size < 0
        ):
            raise CheckpointError(
                f"{path}: malformed entry {str(name)[:80]!r} (expected a file name with its sha256 and bytes)"
            )
        entries[name] = (sha, size)
    return entries


def read_verified(directory: Path) -> dict[str, bytes] | None:
    """The bytes of every file the directory's manifest lists, each checked against its size and
    sha256 there; ``None`` when the directory has no manifest (saved before manifests existed).

    A missing file, a size or checksum that differs, or a malformed manifest is a
    :class:`CheckpointError` naming the file. Files the manifest does not list are not read.
    """
    path = directory / MANIFEST
    if not path.exists():
        return None
    out: dict[str, bytes] = {}
    for name, (sha, size) in _manifest_entries(path).items():
        f = directory / name
        if not f.exists():
            raise CheckpointError(f"{f}: missing, but listed in {MANIFEST}")
        if not f.is_file():
            raise CheckpointError(f"{f}: not a file, but listed in {MANIFEST}")
        try:
            data = f.read_bytes()
        except OSError as e:
            raise CheckpointError(f"{f}: cannot be read ({e.strerror or e})") from None
        if len(data) != size:
            raise CheckpointError(
                f"{f}: {len(data)} bytes where {MANIFEST} says {size}; the file is truncated "
                "or corrupted (or was edited)"
            )
        if hashlib.sha256(data).hexdigest() != sha:
            raise CheckpointError(
                f"{f}: checksum differs from {MANIFEST}; the file is corrupted or was edited"
            )
        out[name] = data
    return out
