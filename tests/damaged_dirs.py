"""Model directories damaged in every way that once hung or exhausted a loader (shared by the tests of
``attnrec.load``, the CLI and the server): a copy of a good, signed directory, then one damage.

Each kind gives the damage and the message its refusal must carry. Directories are signed with
:data:`KEY`; a damage that rewrites the manifest signs it again when the damage is one an operator
could make with the key (a config asking for a huge model, NaN weights), not when it is tampering.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from attnrec.checkpoint import MANIFEST, manifest_key, write_manifest

KEY = "manifest-test-key-0123456789"
SPARSE_BYTES = 4 * 10**9  # a 4 GB file that takes no disk space


def _names(d: Path) -> list[str]:
    return list(json.loads((d / MANIFEST).read_text())["files"])


def _resign(d: Path) -> None:
    write_manifest(d, _names(d), manifest_key(KEY))


def fifo_weights(d: Path) -> None:
    (d / "weights.safetensors").unlink()
    os.mkfifo(d / "weights.safetensors")


def weights_link_to_dev_zero(d: Path) -> None:
    (d / "weights.safetensors").unlink()
    (d / "weights.safetensors").symlink_to("/dev/zero")


def weights_link_outside(d: Path) -> None:
    outside = d.parent / f"{d.name}-outside.safetensors"
    (d / "weights.safetensors").rename(outside)  # the very bytes the manifest lists, but elsewhere
    (d / "weights.safetensors").symlink_to(outside)


def weights_a_directory(d: Path) -> None:
    (d / "weights.safetensors").unlink()
    (d / "weights.safetensors").mkdir()


def weights_a_link_loop(d: Path) -> None:
    (d / "weights.safetensors").unlink()
    (d / "weights.safetensors").symlink_to(d / "weights.safetensors")


def sparse_huge_weights(d: Path) -> None:
    os.truncate(d / "weights.safetensors", SPARSE_BYTES)


def deep_config(d: Path) -> None:  # with a manifest that vouches for it
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_config"]["n_layers"] = 10**4
    (d / "config.json").write_text(json.dumps(cfg))
    _resign(d)


def nan_weights(d: Path) -> None:  # the right shapes, checksums updated everywhere
    f = d / "weights.safetensors"
    state = load_file(f)
    first = sorted(k for k, v in state.items() if v.is_floating_point())[0]
    state[first] = torch.full_like(state[first], float("nan"))
    save_file(state, f)
    cfg = json.loads((d / "config.json").read_text())
    import hashlib

    cfg["weights_sha256"] = hashlib.sha256(f.read_bytes()).hexdigest()
    (d / "config.json").write_text(json.dumps(cfg))
    _resign(d)


def _shift_items(d: Path) -> None:
    maps = json.loads((d / "id_maps.json").read_text())
    maps["items"] = maps["items"][1:] + maps["items"][:1]  # same IDs, each one index off: other answers
    (d / "id_maps.json").write_text(json.dumps(maps))


def edited_json_without_manifest(d: Path) -> None:
    _shift_items(d)
    (d / MANIFEST).unlink()


def tampered_signed_manifest(d: Path) -> None:  # the manifest rewritten to fit, without the key
    _shift_items(d)
    mac = json.loads((d / MANIFEST).read_text())["hmac_sha256"]
    write_manifest(d, _names(d))
    man = json.loads((d / MANIFEST).read_text())
    (d / MANIFEST).write_text(json.dumps(man | {"hmac_sha256": mac}))


# kind -> (damage, what the one-line refusal says)
DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "FIFO weights": (fifo_weights, r"weights\.safetensors: a FIFO \(named pipe\), not a regular file"),
    "weights linked to /dev/zero": (
        weights_link_to_dev_zero,
        r"a symbolic link to /dev/zero, outside the model",
    ),
    "weights linked outside": (
        weights_link_outside,
        r"weights\.safetensors: a symbolic link to .*outside the model",
    ),
    "weights a directory": (weights_a_directory, r"weights\.safetensors: a directory, not a regular file"),
    "weights a link loop": (weights_a_link_loop, r"weights\.safetensors: cannot be opened"),
    "sparse 4 GB weights": (
        sparse_huge_weights,
        rf"weights\.safetensors: {SPARSE_BYTES} bytes where manifest\.json says",
    ),
    "n_layers 10^4": (
        deep_config,
        r"config\.json: the model it describes is too large to build \(depth \(layers\) 10,000",
    ),
    "NaN weights": (nan_weights, r"weights\.safetensors: .* holds NaN or infinite values"),
    "edited JSON without manifest": (
        edited_json_without_manifest,
        r"no manifest\.json, so nothing tells an edited file",
    ),
    "tampered signed manifest": (tampered_signed_manifest, r"manifest\.json: signature does not verify"),
}


def damaged(good: Path, where: Path, kind: str) -> Path:
    """A copy of ``good`` under ``where`` with the damage ``kind``."""
    d = where / "damaged"
    shutil.copytree(good, d)
    DAMAGE[kind][0](d)
    return d
