"""The committed batch-scoring table re-renders byte-identical from its JSON (see test_rerender.py)."""

from __future__ import annotations

import json

from bench_scripts import BENCHMARKS, load


def test_batch_scoring_table() -> None:
    results = BENCHMARKS / "results"
    res = json.loads((results / "batch_scoring.json").read_text())
    assert load("batch_scoring").markdown(res) == (results / "batch_scoring.md").read_text()
