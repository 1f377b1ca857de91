"""Seeded runs: one run per training seed, shown in the results table as mean ± sample standard deviation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from attnrec.evaluation.metrics import METRICS
from attnrec.experiments.configured import RunConfig, seed_runs
from attnrec.experiments.seeds import group_seed_runs, metric_spreads, seed_record, spread
from attnrec.experiments.tables import results_markdown


def test_spread_is_the_mean_and_the_sample_standard_deviation() -> None:
    # By hand: mean 0.3; deviations -0.2, -0.1, 0.3; squares sum to 0.14; / (3 - 1) = 0.07.
    s = spread([0.1, 0.2, 0.6])
    assert s.n == 3 and s.mean == pytest.approx(0.3)
    assert s.std == pytest.approx(math.sqrt(0.07))  # not the population figure sqrt(0.14 / 3)
    assert s.text() == "0.3000 ± 0.2646"
    one = spread([0.25])
    assert one.n == 1 and math.isnan(one.std) and one.text() == "0.2500"  # one seed has no spread


def test_metric_spreads_cover_only_metrics_every_seed_has() -> None:
    spreads = metric_spreads([{"HR@10": 0.2, "NDCG@10": 0.1}, {"HR@10": 0.4}])
    assert set(spreads) == {"HR@10"} and spreads["HR@10"].mean == pytest.approx(0.3)


def test_seed_runs_change_the_training_seed_and_the_name_only(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[run]\nname = "c"\ndata = "demo"\nmodel = "pop"\nseeds = [0, 2]\nvalid_users = 3\n'
        "[train]\nmax_epochs = 2\n"
    )
    cfg = RunConfig.from_toml(path)
    runs = seed_runs(cfg)
    assert [r.name for r in runs] == ["c-seed0", "c-seed2"] and {r.seed_group for r in runs} == {"c"}
    assert [r.train_settings for r in runs] == [{"max_epochs": 2, "seed": 0}, {"max_epochs": 2, "seed": 2}]
    assert {r.valid_users for r in runs} == {3} and {r.split for r in runs} == {cfg.split}  # same split
    assert [r.name for r in seed_runs(cfg, [5])] == [
        "c-seed5"
    ]  # the command line's seeds replace the config's
    plain = RunConfig(name="p", data="demo", model="pop")
    assert seed_runs(plain) == [plain]  # no seeds: the one run, its name (and result file) unchanged


def _record(name: str, hr: float, seed: int | None = None) -> dict[str, Any]:
    metrics = {k: hr for k in METRICS}
    return {
        "name": name,
        "model": "sasrec",
        "data": {"name": "toy.csv", "sha256": "ab" * 32},
        "split": "leave-one-out",
        "evaluations": {"full": {"metrics": metrics, "protocol_text": "full ranking"}},
        "train": {"epochs": 3, "best_epoch": 2},
        "seconds_per_epoch": 1.0,
        "fit_seconds": 60.0,
        "peak_rss_mb": 100.0,
        "machine": {"cpu": "c", "cores": 2, "torch_threads": 1, "cuda": None, "torch": "t"},
        "git_sha": "0123456789ab",
        "finished": "now",
        **({"seed_run": seed_record(name.rsplit("-seed", 1)[0], seed)} if seed is not None else {}),
    }


def test_group_seed_runs_puts_a_configs_seeds_together_in_seed_order() -> None:
    rows = [
        (r, r["evaluations"]["full"])
        for r in (_record("a-seed1", 0.2, 1), _record("b", 0.5), _record("a-seed0", 0.1, 0))
    ]
    assert [[r["name"] for r, _ in g] for g in group_seed_runs(rows)] == [["a-seed0", "a-seed1"], ["b"]]


def test_the_table_shows_seed_runs_as_one_row_and_single_runs_as_before() -> None:
    single = _record("b", 0.5)
    seeded = [_record("a-seed0", 0.1, 0), _record("a-seed1", 0.2, 1), _record("a-seed2", 0.6, 2)]
    alone = results_markdown([single], "cmd", "src", "runs/")
    text = results_markdown([*seeded, single], "cmd", "src", "runs/")
    row = next(line for line in text.splitlines() if line.startswith("| a, "))
    assert row.startswith(
        "| a, 3 seeds ([0](runs/a-seed0.json), [1](runs/a-seed1.json), [2](runs/a-seed2.json)) |"
    )
    assert row.count("0.3000 ± 0.2646") == len(METRICS)
    assert not any(line.startswith("| a-seed") for line in text.splitlines())  # no row per seed
    single_row = next(line for line in alone.splitlines() if line.startswith("| b |"))
    assert single_row in text.splitlines()  # a single run renders as it did
    assert "mean ± sample standard deviation" in text and "mean ±" not in alone


def test_a_run_trained_on_a_gpu_names_it_and_a_cpu_run_does_not() -> None:
    gpu = _record("g", 0.4) | {"train_config": {"device": "cuda"}}
    gpu["machine"] = gpu["machine"] | {"cuda": "NVIDIA H200"}
    cpu_on_gpu_machine = _record("c", 0.3) | {"train_config": {"device": "cpu"}, "machine": gpu["machine"]}
    lines = results_markdown([gpu, cpu_on_gpu_machine, _record("b", 0.5)], "cmd", "src").splitlines()
    assert any(
        line.startswith("| g (GPU: NVIDIA H200) | sasrec |") for line in lines
    )  # its s/epoch are a GPU's
    assert any(
        line.startswith("| c | sasrec |") for line in lines
    )  # the machine had one, the run did not use it
    assert any(line.startswith("| b | sasrec |") for line in lines)


def test_a_seed_trained_on_a_gpu_is_named_and_kept_out_of_the_cpu_seconds() -> None:
    cpu = [_record("a-seed0", 0.1, 0), _record("a-seed2", 0.3, 2)]
    gpu = _record("a-seed1", 0.2, 1) | {"train_config": {"device": "cuda"}, "seconds_per_epoch": 100.0}
    gpu["machine"] = gpu["machine"] | {"cuda": "NVIDIA H200"}
    row = next(
        line
        for line in results_markdown([*cpu, gpu], "cmd", "src", "runs/").splitlines()
        if line.startswith("| a, ")
    )
    assert row.startswith(
        "| a, 3 seeds ([0](runs/a-seed0.json), [1 (GPU: NVIDIA H200)](runs/a-seed1.json), "
        "[2](runs/a-seed2.json)) |"
    )
    assert "| 3/3/3 (best 2/2/2) | 1.0 |" in row  # the CPU seeds' 1.0 s, not a mean with the GPU's 100
