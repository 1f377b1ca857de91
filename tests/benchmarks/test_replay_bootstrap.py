"""The replay's paired bootstrap (benchmarks/replay_bootstrap.py): per-case gains and the ratio's interval."""

from __future__ import annotations

import numpy as np
import pytest
from bench_scripts import BENCHMARKS, load

boot = load("replay_bootstrap", "replay_bootstrap_script")


def test_gains_are_the_ndcg_of_each_case() -> None:
    # rank 0 gains 1, rank 9 gains 1/log2(11), rank 10 and unknown targets (-1) gain nothing
    assert boot.gains(np.array([0, 9, 10, -1])) == pytest.approx([1.0, 1.0 / np.log2(11.0), 0.0, 0.0])


def test_the_interval_is_paired_over_cases() -> None:
    rng = np.random.default_rng(0)
    scratch = rng.random(400) * (rng.random(400) < 0.3)
    same = boot.interval(scratch, scratch)
    assert same["ratio"] == same["low"] == same["high"] == 1.0 and same["share_within_2pct"] == 1.0
    half = boot.interval(scratch / 2, scratch)  # paired: every resample keeps the ratio at one half
    assert half["low"] == pytest.approx(0.5) and half["high"] == pytest.approx(0.5)
    assert half["share_within_2pct"] == 0.0
    noisy = boot.interval(rng.permutation(scratch), scratch)  # the same total, case by case unrelated
    assert noisy["ratio"] == pytest.approx(1.0) and noisy["low"] < 0.9 < 1.1 < noisy["high"]


def test_the_committed_table_is_generated_from_its_json() -> None:
    import json

    results = BENCHMARKS / "results"
    records = json.loads((results / "replay_bootstrap.json").read_text())
    assert boot.markdown(records) == (results / "replay_bootstrap.md").read_text()
