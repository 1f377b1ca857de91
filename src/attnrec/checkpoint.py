"""Checkpoint files: safetensors weights + JSON, written atomically with sha256 checksums.

Loading never unpickles: tensors come from safetensors, everything else from JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, corrupted or of an unknown format."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing; not an attnrec checkpoint directory?") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: corrupted JSON ({e})") from e


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
    try:
        return st_load(data)
    except (SafetensorError, ValueError) as e:
        raise CheckpointError(f"{path}: not a valid safetensors file ({e})") from e
