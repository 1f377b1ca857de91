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
