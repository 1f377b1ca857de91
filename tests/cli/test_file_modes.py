"""Model directories and outputs are written with the process umask (not 0600 whatever the umask)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from attnrec import Recommender
from synthetic_logs import ring_log


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


def test_a_saved_model_directory_is_readable_by_others_under_umask_022(
    umask_022: None, tmp_path: Path
) -> None:
    rec = Recommender(
        "sasrec", {"hidden": 8, "n_layers": 1, "max_len": 10}, {"max_epochs": 1, "device": "cpu"}
    )
    saved = rec.fit(ring_log(n_users=30, n_items=15), progress=False).save(tmp_path / "model")
    modes = _modes(saved)
    files = {name: mode for name, mode in modes.items() if (saved / name).is_file()}
    assert "config.json" in files and "manifest.json" in files
    assert files == dict.fromkeys(files, 0o644)
    assert {m for name, m in modes.items() if name not in files} <= {0o755}
    assert not [name for name in files if name.endswith(".tmp")]


def test_a_private_umask_keeps_the_files_private(tmp_path: Path) -> None:
    from attnrec.checkpoint import write_json

    old = os.umask(0o077)
    try:
        write_json(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == 0o600
