"""Where the tests find the real datasets (never committed): ``../shared/data`` beside the repository
root, as on CI; a worktree one level deeper (``/work/wt/<name>``) falls back to ``/work/shared/data``.
Tests that read them are skipped when neither exists."""

from __future__ import annotations

from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[2]
_CANDIDATES = (_REPO.parent / "shared" / "data", Path("/work/shared/data"))
SHARED = next((p for p in _CANDIDATES if p.is_dir()), _CANDIDATES[0])


def needs(*relative: str) -> pytest.MarkDecorator:
    """Skip the test unless every file ``relative`` to the shared data folder exists."""
    absent = [r for r in relative if not (SHARED / r).exists()]
    return pytest.mark.skipif(bool(absent), reason=f"shared data not present: {', '.join(absent)}")
