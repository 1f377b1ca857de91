"""Checkpoint files: safetensors weights + JSON, written atomically with sha256 checksums.

Loading never unpickles: tensors come from safetensors, everything else from JSON. A directory's
``manifest.json`` (:func:`write_manifest`, written last) holds the sha256 and size of every file
in it, and optionally an HMAC-SHA256 of itself under a key the operator holds;
:func:`read_verified` reads the files back only when all of them match it.

Every file is read through :func:`read_regular`, which cannot hang or read without end: the path
must be a regular file (not a FIFO, a device, a directory, nor a symbolic link leaving the model
directory), no larger than :attr:`LoadLimits.max_file_bytes` and, where the manifest gives its
size, exactly that size; all of this is checked on the opened file before one byte is read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

log = logging.getLogger("attnrec.checkpoint")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, corrupted or of an unknown format."""


@dataclass(frozen=True)
class LoadLimits:
    """What a model directory may ask of the process that opens it; beyond any of these it is refused
    before the memory is taken.

    ``max_file_bytes``: the largest file read (each file; its size is checked before reading it).
    ``max_params``: the model's parameter count, estimated from its ``config.json``.
    ``max_activation``: the activations of scoring one sequence (elements), estimated likewise.
    ``max_layers``: the model's depth (building a module per layer takes time even without memory).
    """

    max_file_bytes: int = 2 << 30
    max_params: int = 1 << 30
    max_activation: int = 1 << 28
    max_layers: int = 64

    def __post_init__(self) -> None:
        if min(self.max_file_bytes, self.max_params, self.max_activation, self.max_layers) < 1:
            raise ValueError("every load limit must be positive")


MIN_MANIFEST_KEY_LENGTH = 16


def manifest_key(key: str | bytes | None) -> bytes | None:
    """``key`` as the bytes of an HMAC key (at least 16 characters), ``None`` for none; ValueError else.

    The message never repeats the key.
    """
    if key is None or key == "" or key == b"":
        return None
    raw = key.encode() if isinstance(key, str) else bytes(key)
    if len(raw) < MIN_MANIFEST_KEY_LENGTH:
        raise ValueError(
            f"a manifest key must have at least {MIN_MANIFEST_KEY_LENGTH} characters (this one has "
            f"{len(raw)}); make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return raw


@dataclass(frozen=True)
class LoadPolicy:
    """How a model directory is opened.

    ``allow_unsigned``: accept a directory that nothing vouches for (no ``manifest.json``; or, when
    a ``manifest_key`` is given, a manifest without a signature), with a warning; refused otherwise.
    ``manifest_key``: verify the manifest's HMAC-SHA256 with this key (see :func:`manifest_key`).
    """

    allow_unsigned: bool = False
    manifest_key: bytes | None = field(default=None, repr=False)
    limits: LoadLimits = field(default_factory=LoadLimits)


DEFAULT_LIMITS = LoadLimits()


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(
    path: Path, root: Path | None = None, max_bytes: int | None = None, expected: int | None = None
) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes`` bytes (default
    :attr:`LoadLimits.max_file_bytes`) and of exactly ``expected`` bytes when given.

    A symbolic link is followed only when it resolves into ``root`` (default: ``path``'s directory).
    Everything is checked before the file is read, the last checks on the opened descriptor itself
    (opened non-blocking, without following links), so a FIFO, a device, ``/dev/zero`` behind a link
    or a huge sparse file is refused at once. Each failure is a one-line :class:`CheckpointError`.
    """
    fd = _open_regular(path, (path.parent if root is None else root).resolve())
    try:
        return _read_checked(
            fd, path, DEFAULT_LIMITS.max_file_bytes if max_bytes is None else max_bytes, expected
        )
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _open_regular(path: Path, base: Path) -> int:
    """A read-only descriptor of ``path`` once it is known to be a regular file (a link into ``base``
    followed), opened without blocking and without following a link swapped in since."""
    try:
        st = os.lstat(path)
        target = path
        if stat.S_ISLNK(st.st_mode):
            target = path.resolve(strict=True)
            if not target.is_relative_to(base):
                raise CheckpointError(
                    f"{path}: a symbolic link to {target}, outside the model directory; refused"
                )
            st = os.stat(target)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{path}: {_kind(st.st_mode)}, not a regular file; refused")
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        return os.open(target, flags)
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (OSError, RuntimeError) as e:  # RuntimeError: a symbolic link loop
        raise CheckpointError(f"{path}: cannot be opened ({getattr(e, 'strerror', None) or e})") from None


def _read_checked(fd: int, path: Path, limit: int, expected: int | None) -> bytes:
    st = os.fstat(fd)  # the file opened, whatever was swapped in since it was checked
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{path}: {_kind(st.st_mode)}, not a regular file; refused")
    if expected is not None and st.st_size != expected:
        raise CheckpointError(
            f"{path}: {st.st_size} bytes where {MANIFEST} says {expected}; the file is truncated "
            "or corrupted (or was edited)"
        )
    if st.st_size > limit:
        raise CheckpointError(
            f"{path}: {st.st_size} bytes, over the {limit}-byte limit for a model file; refused "
            "(raise LoadLimits.max_file_bytes if the model is really this large)"
        )
    chunks, left = [], st.st_size + 1  # one byte more: a file that grows while read is caught
    while left > 0 and (chunk := os.read(fd, min(left, 1 << 24))):
        chunks.append(chunk)
        left -= len(chunk)
    data = b"".join(chunks)
    if len(data) != st.st_size:
        raise CheckpointError(f"{path}: changed size while it was read; refused")
    return data


def check_dir_target(path: str | Path, what: str) -> Path:
    """``path`` as a directory to write ``what`` into: a directory or nothing yet (made on writing); a
    one-line :class:`CheckpointError` naming it when something else is there (saving to a file's path
    ended in ``FileExistsError``, a ``state_dir`` only after its first epoch)."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise CheckpointError(f"{d}: {what} is a directory, and a file is there")
    return d


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


def read_json(path: Path, root: Path | None = None, max_bytes: int | None = None) -> Any:
    """The JSON document in ``path``, read with :func:`read_regular`; one clear error otherwise."""
    if not os.path.lexists(path):
        raise CheckpointError(f"{path}: missing; not an attnrec checkpoint directory?")
    return parse_json(read_regular(path, root, max_bytes), path)


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


def load_tensors(
    path: Path, sha256: str | None = None, root: Path | None = None, max_bytes: int | None = None
) -> dict[str, torch.Tensor]:
    """Load safetensors, verifying ``sha256`` when given; clear errors on truncation or corruption."""
    if not os.path.lexists(path):
        raise CheckpointError(f"{path}: missing weights file")
    data = read_regular(path, root, max_bytes)
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


SIGNATURE = "hmac_sha256"  # the manifest's key holding its HMAC (absent: an unsigned manifest)


def _signed_bytes(files: object) -> bytes:
    """What the signature covers: the format version and the files table, in one canonical form."""
    body = {"manifest_version": MANIFEST_VERSION, "files": files}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def write_manifest(directory: Path, names: Iterable[str], key: bytes | None = None) -> Path:
    """Write ``directory/manifest.json`` with the sha256 and size of each file ``names``; returns it.
    With ``key`` (see :func:`manifest_key`) the manifest carries an HMAC-SHA256 of its table, so
    that only a holder of the key can make a manifest that verifies.

    Write it last: it then vouches for a complete directory, and a later partial overwrite of
    any file no longer matches it.
    """
    files: dict[str, dict[str, object]] = {}
    for name in sorted(names):
        data = (directory / name).read_bytes()
        files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    path = directory / MANIFEST
    manifest: dict[str, object] = {"manifest_version": MANIFEST_VERSION, "files": files}
    if key is not None:
        manifest[SIGNATURE] = hmac.new(key, _signed_bytes(files), hashlib.sha256).hexdigest()
    write_json(path, manifest)
    return path


def _manifest_entries(path: Path, policy: LoadPolicy) -> dict[str, tuple[str, int]]:
    """``name -> (sha256, bytes)`` from the manifest ``path``, its signature verified when the policy
    has a key; one clear error for any malformation or a signature that does not verify."""
    man = read_json(path, max_bytes=min(policy.limits.max_file_bytes, 64 << 20))
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
    _verify_signature(path, files, man.get(SIGNATURE), policy)
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


def _verify_signature(path: Path, files: object, mac: object, policy: LoadPolicy) -> None:
    """Without a key nothing to verify; with one, a signature that does not verify is always refused,
    and a missing one unless the policy allows unsigned directories (then a warning)."""
    if policy.manifest_key is None:
        return
    if mac is None:
        if not policy.allow_unsigned:
            raise CheckpointError(
                f"{path}: not signed, and a manifest key was given; sign the directory (save it "
                "with the key) or allow unsigned directories"
            )
        log.warning("%s: not signed; loaded without verifying its signature (unsigned allowed)", path)
        return
    want = hmac.new(policy.manifest_key, _signed_bytes(files), hashlib.sha256).hexdigest()
    if not isinstance(mac, str) or not hmac.compare_digest(mac, want):
        raise CheckpointError(
            f"{path}: signature does not verify; the directory was edited after it was signed, "
            "or signed with another key"
        )


def read_verified(directory: Path, policy: LoadPolicy | None = None) -> dict[str, bytes] | None:
    """The bytes of every file the directory's manifest lists, each checked against its size (before
    reading it) and sha256 there; ``None`` when the directory has no manifest.

    The manifest's signature is verified first when ``policy`` has a key. A missing file, a file
    that is not a regular one, a size or checksum that differs, or a malformed manifest is a
    :class:`CheckpointError` naming the file. Files the manifest does not list are not read.
    """
    policy = policy or LoadPolicy()
    path = directory / MANIFEST
    if not os.path.lexists(path):
        return None
    out: dict[str, bytes] = {}
    for name, (sha, size) in _manifest_entries(path, policy).items():
        f = directory / name
        if not os.path.lexists(f):
            raise CheckpointError(f"{f}: missing, but listed in {MANIFEST}")
        data = read_regular(f, directory, policy.limits.max_file_bytes, expected=size)
        if hashlib.sha256(data).hexdigest() != sha:
            raise CheckpointError(
                f"{f}: checksum differs from {MANIFEST}; the file is corrupted or was edited"
            )
        out[name] = data
    return out


def check_finite(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Every floating-point tensor of the file ``path`` is finite; NaN or infinity is refused."""
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{path}: {name} holds NaN or infinite values; refused")
