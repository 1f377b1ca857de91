"""The scripts of benchmarks/ as modules for the tests (they are scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def load(script: str, name: str | None = None) -> ModuleType:
    """Import ``benchmarks/<script>.py`` under ``name`` (default: the script's name).

    ``benchmarks/`` goes on ``sys.path`` first, as when the script runs, for the helpers beside it; the
    module is registered under ``name`` before it runs, as an import does (its dataclasses look it up).
    """
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name or script, BENCHMARKS / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name or script] = module
    spec.loader.exec_module(module)
    return module
