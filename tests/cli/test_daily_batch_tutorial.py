"""docs/tutorials/daily-batch.md runs as written: its ```python blocks, in order, in an empty directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "daily-batch.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_the_daily_batch_tutorial_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == 4
    namespace: dict[str, object] = {"__name__": "tutorial"}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102 - the page's own code
    day = namespace["day"]
    assert (tmp_path / "daily" / str(day) / "recs.parquet").is_file()
    assert (tmp_path / "daily" / str(day) / "model" / "manifest.json").is_file()
    tracked = namespace["tracked"]
    assert tracked.metrics["batch/users"] == 2000 and "test/full/NDCG_at_10" in tracked.metrics  # type: ignore[attr-defined]
    assert tracked.metrics["test/full/NDCG_at_10"] > 1.5 * tracked.metrics["popularity/test/full/NDCG_at_10"]  # type: ignore[attr-defined]
