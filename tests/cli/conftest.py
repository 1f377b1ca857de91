"""Fixtures the CLI tests share: a tiny cycle log and a model trained on it through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import TINY, run

from synthetic_logs import write_cycle_pairs


@pytest.fixture(scope="session")
def cycle_pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 users walking a 40-item cycle: the next item is the current one + 1."""
    return write_cycle_pairs(tmp_path_factory.mktemp("data") / "pairs.txt", 120, 40, 5, 20, named=True)


@pytest.fixture(scope="session")
def cycle_model(cycle_pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SASRec trained on :func:`cycle_pairs` by ``attnrec train`` (one epoch)."""
    out = tmp_path_factory.mktemp("runs") / "m"
    code, output = run("train", "--data", str(cycle_pairs), "--out", str(out), *TINY)
    assert code == 0, output
    return out
