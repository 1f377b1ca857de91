"""benchmarks/flops.py: the epoch's FLOP count follows the widths the model really computes."""

from __future__ import annotations

import numpy as np
from bench_scripts import load

from attnrec.data.schema import Sequences

flops = load("flops")
report = load("flops_report")


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
    assert 0 < st["flops_per_step"] <= epoch["flops"] / 2, (
        "two full batches of 128 rows: at most half of 300 rows' work"
    )
    for r in st["rounds"]:
        assert r["achieved_gflops"] == st["flops_per_step"] / r["cpu_seconds_per_step"] / 1e9
        assert r["fraction_of_peak"] == r["achieved_gflops"] / r["peak_gflops"]
    assert st["median_fraction"] in [r["fraction_of_peak"] for r in st["rounds"]]
    assert "- sasrec: **" in report.steps_markdown(
        {"machine": {"cpu": "x", "cores": 2, "torch": "t"}, "other_load": "none", "studies": [st]}
    )


def test_the_fast_kernel_variant_is_the_same_model_and_work_as_sasrec() -> None:
    """``sasrec-fast`` differs from the step study's SASRec only in the two kernel switches, so its FLOPs are
    the same."""
    model, cfg, amp = flops.STEP_VARIANTS["sasrec-fast"]
    assert model == "sasrec" and amp == "none"
    assert {k: v for k, v in cfg.items() if k not in ("fast_ce", "fast_dropout")} == flops.STEP_CONFIG
    assert cfg["fast_ce"] is True and cfg["fast_dropout"] is True
    rng = np.random.default_rng(3)
    train = Sequences.from_lists([list(rng.integers(1, 31, n)) for n in rng.integers(2, 15, 300)], 30)
    small = {"hidden": 8, "n_layers": 1, "n_heads": 1, "max_len": 16, "loss": "ce"}
    fast = flops.step_study(
        train, "sasrec", small | {"fast_ce": True, "fast_dropout": True}, steps=2, rounds=1
    )
    plain = flops.step_study(train, "sasrec", small, steps=2, rounds=1)
    assert fast["flops_per_step"] == plain["flops_per_step"] > 0


def test_the_bf16_variant_is_the_fast_variant_under_autocast_set_against_the_float32_peak() -> None:
    """``sasrec-fast-bf16`` is ``sasrec-fast``'s model and work; only the precision differs, and each round
    records the bfloat16 peak beside the float32 one that the fraction is taken of."""
    fast = flops.STEP_VARIANTS["sasrec-fast"]
    model, cfg, amp = flops.STEP_VARIANTS["sasrec-fast-bf16"]
    assert (model, cfg) == fast[:2] and amp == "bf16"
    rng = np.random.default_rng(4)
    train = Sequences.from_lists([list(rng.integers(1, 31, n)) for n in rng.integers(2, 15, 300)], 30)
    small = {"hidden": 8, "n_layers": 1, "n_heads": 1, "max_len": 16, "loss": "ce", "fast_ce": True}
    low = flops.step_study(train, "sasrec", small, steps=2, rounds=1, amp="bf16")
    plain = flops.step_study(train, "sasrec", small, steps=2, rounds=1)
    assert low["amp"] == "bf16" and plain["amp"] == "none"
    assert low["flops_per_step"] == plain["flops_per_step"] > 0
    (r,) = low["rounds"]
    assert r["bf16_peak_gflops"] > 0 and r["fraction_of_peak"] == r["achieved_gflops"] / r["peak_gflops"]
    assert "bf16_peak_gflops" not in plain["rounds"][0]
    table = report.steps_markdown(
        {
            "machine": {"cpu": "x", "cores": 2, "torch": "t"},
            "other_load": "none",
            "studies": [plain | {"name": "p"}, low | {"name": "b"}],
        }
    )
    assert "| p | " in table and "| none |" in table and "| bf16 |" in table


def test_the_2023_25_models_are_counted_by_their_own_layers_and_losses() -> None:
    rng = np.random.default_rng(2)
    train = Sequences.from_lists([list(rng.integers(1, 41, n)) for n in rng.integers(2, 20, 100)], 40)
    t, d = 12, 8
    hstu = {"hidden": d, "n_layers": 1, "n_heads": 2, "dqk": 3, "dv": 5, "max_len": t, "n_negatives": 7}
    got = flops.count_epoch("hstu", hstu, train, 100)
    f1 = 2 * t * d * 2 * (2 * 5 + 2 * 3)  # U, V (2 heads x 5) and Q, K (2 heads x 3)
    attention = 2 * t * t * 2 * 3 + 2 * t * t * 2 * 5  # Q K^T and A V per head
    f2 = 2 * t * 2 * 5 * d
    assert got["encoder_flops"] == 3 * 100 * (f1 + attention + f2)
    assert got["output_flops"] == 3 * 2 * got["positions"] * d * (7 + 1)  # target and 7 negatives a position
    esasrec = {"hidden": d, "n_layers": 1, "max_len": t, "ff_multiplier": 2, "n_negatives": 5}
    got = flops.count_epoch("esasrec", esasrec, train, 100)
    per_row = 8 * t * d * d + 4 * t * t * d + 4 * t * d * d + 3 * 2 * t * d * 2 * d  # + gates, SwiGLU
    assert got["encoder_flops"] == 3 * 100 * per_row
    gsasrec = {"hidden": d, "n_layers": 1, "max_len": t, "n_negatives": 9}
    got = flops.count_epoch("gsasrec", gsasrec, train, 100)
    assert got["output_flops"] == 3 * 2 * got["positions"] * d * 10


def test_runs_are_set_against_the_highest_peak_measured_so_far(tmp_path) -> None:
    import json

    previous = tmp_path / "flops.json"
    previous.write_text(json.dumps({"peaks": {"1": {"peak_gflops": 92.0}, "2": {"peak_gflops": 100.0}}}))
    best = flops.highest_peaks({1: {"peak_gflops": 63.0}, 2: {"peak_gflops": 141.0}}, previous)
    assert best["1"] == {
        "peak_gflops": 92.0,
        "measured": "an earlier flops.json",
    }  # today's low peak is not used
    assert best["2"]["peak_gflops"] == 141.0  # a higher peak today replaces the old one
    capped = flops.highest_peaks({1: {"peak_gflops": 63.0}, 2: {"peak_gflops": 231.0}}, previous)
    assert capped["2"]["peak_gflops"] == 2 * 92.0  # two cores never beat twice the best single core
    previous.write_text(json.dumps({"best_peaks": best}))
    assert flops.highest_peaks({1: {"peak_gflops": 70.0}}, previous)["1"]["peak_gflops"] == 92.0
    assert flops.highest_peaks({1: {"peak_gflops": 70.0}}, tmp_path / "none.json")["1"]["peak_gflops"] == 70.0
