"""benchmarks/flops.py: the epoch's FLOP count follows the widths the model really computes."""

from __future__ import annotations

import numpy as np
from bench_scripts import load

from attnrec.data.schema import Sequences

flops = load("flops")


def test_encoder_flops_count_each_batch_width() -> None:
    rng = np.random.default_rng(0)
    train = Sequences.from_lists([list(rng.integers(1, 41, n)) for n in rng.integers(1, 20, 200)], 40)
    cfg = {"hidden": 8, "n_layers": 2, "n_heads": 2, "max_len": 20}
    padded = flops.count_epoch("bert4rec", cfg, train, 16)
    t, d = 20, 8
    per_row = 2 * (8 * t * d * d + 4 * t * t * d + 4 * t * d * 4 * d)
    assert padded["rows"] == 200 and padded["encoder_flops"] == 3 * 200 * per_row
    chunked = flops.count_epoch("bert4rec", cfg | {"length_chunks": 4}, train, 16)
    assert chunked["rows"] == 200 and chunked["encoder_flops"] < 0.75 * padded["encoder_flops"]
    assert chunked["output_flops"] == padded["output_flops"]


def test_step_study_sets_each_round_against_its_own_peak() -> None:
    rng = np.random.default_rng(1)
    train = Sequences.from_lists([list(rng.integers(1, 31, n)) for n in rng.integers(2, 15, 300)], 30)
    cfg = {"hidden": 8, "n_layers": 1, "n_heads": 1, "max_len": 16, "loss": "ce"}
    st = flops.step_study(train, "sasrec", cfg, steps=2, rounds=2)
    epoch = flops.count_epoch("sasrec", cfg, train, 128, seed=0, epoch=0)
    assert 0 < st["flops_per_step"] <= epoch["flops"] / 2, "two full batches of 128 rows: at most half of 300 rows' work"
    for r in st["rounds"]:
        assert r["achieved_gflops"] == st["flops_per_step"] / r["cpu_seconds_per_step"] / 1e9
        assert r["fraction_of_peak"] == r["achieved_gflops"] / r["peak_gflops"]
    assert st["median_fraction"] in [r["fraction_of_peak"] for r in st["rounds"]]
    assert "Median fraction (sasrec)" in flops.steps_markdown({"machine": {"cpu": "x", "cores": 2, "torch": "t"},
                                                                "other_load": "none", "studies": [st]})
