"""The house rules of issue 17 that a reviewer would otherwise have to re-check by hand.

- no module over 400 lines (one job per module, readable top to bottom): the library's, the
  benchmark scripts' and the tests';
- no capability probing with ``hasattr``: what a model can do is asked through
  :func:`attnrec.models.contracts.capabilities` and the protocols of that module.

The layer contract is checked by ``lint-imports`` (``make layers``), complexity by ruff and types by
``mypy --strict`` (``make lint``/``make typecheck``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "attnrec"
MAX_LINES = 400


def test_no_module_over_400_lines() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
             for folder in (SRC, ROOT / "benchmarks", ROOT / "tests") for p in folder.rglob("*.py")}
    assert any(m.startswith("src/") for m in sizes) and any(m.startswith("benchmarks/") for m in sizes)
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}


def test_no_capability_probing_with_hasattr() -> None:
    probes = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py")
              for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bhasattr\(", line)]
    assert probes == []
