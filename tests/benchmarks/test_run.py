"""benchmarks/run.py: a run resumed from its training state reports what one uninterrupted run would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load

from attnrec.evaluation.published import ML_1M_SHA256
from attnrec.experiments.tables import side_by_side
from synthetic_logs import write_cycle_pairs

bench_run = load("run", "bench_run")


def _config(path: Path, data: Path, epochs: int) -> Path:
    path.write_text(f"""
[run]
name = "ring"
data = "{data}"
model = "sasrec"
protocols = ["full"]

[model]
hidden = 16
max_len = 20
n_heads = 1

[train]
max_epochs = {epochs}
batch_size = 32
eval_every = 1
patience = 100
threads = 1
""")
    return path


def _log(path: Path) -> Path:
    return write_cycle_pairs(path, 60, 30, 6, 15)


def test_resumed_run_equals_uninterrupted_run(tmp_path: Path) -> None:
    data = _log(tmp_path / "ring.txt")
    whole = json.loads(bench_run.run(_config(tmp_path / "a.toml", data, 4), tmp_path / "whole").read_text())

    state = tmp_path / "state"
    first = json.loads(
        bench_run.run(_config(tmp_path / "b.toml", data, 2), tmp_path / "first", state_dir=state).read_text()
    )
    assert first["train"]["epochs"] == 2 and (state / "ring" / "train_state.json").exists()
    # The budget is raised and the same command is run again: it continues at epoch 3.
    second = json.loads(
        bench_run.run(_config(tmp_path / "b.toml", data, 4), tmp_path / "second", state_dir=state).read_text()
    )
    assert [h["epoch"] for h in second["train"]["history"]] == [1, 2, 3, 4]
    # Epochs 1-2 come from the saved state (their timings too), not from training them again.
    assert second["train"]["history"][:2] == first["train"]["history"]
    assert [h["loss"] for h in second["train"]["history"]] == [h["loss"] for h in whole["train"]["history"]]
    assert second["evaluations"]["full"]["metrics"] == whole["evaluations"]["full"]["metrics"]
    assert second["fit_seconds"] == second["train"]["seconds"]  # both sessions, not only the last


def test_each_seed_is_a_run_of_its_own_and_seed_0_is_the_plain_run(tmp_path: Path) -> None:
    data = _log(tmp_path / "ring.txt")
    plain = json.loads(bench_run.run(_config(tmp_path / "a.toml", data, 2), tmp_path / "plain").read_text())
    assert plain["name"] == "ring" and "seed_run" not in plain  # a config without seeds: file name unchanged
    state = tmp_path / "state"
    bench_run.main(
        [
            "--seeds",
            "0,1",
            "--out",
            str(tmp_path / "seeded"),
            "--state-dir",
            str(state),
            str(_config(tmp_path / "b.toml", data, 2)),
        ]
    )
    seed0, seed1 = (json.loads((tmp_path / "seeded" / f"ring-seed{k}.json").read_text()) for k in (0, 1))
    assert (seed0["seed_run"]["group"], seed0["seed_run"]["seed"], seed1["train_config"]["seed"]) == (
        "ring",
        0,
        1,
    )
    assert (state / "ring-seed0" / "train_state.json").exists() and (state / "ring-seed1").exists()
    # Seed 0 is the default training seed: the same run as the plain one; seed 1 trains differently.
    assert seed0["evaluations"]["full"]["metrics"] == plain["evaluations"]["full"]["metrics"]
    assert [h["loss"] for h in seed1["train"]["history"]] != [h["loss"] for h in seed0["train"]["history"]]
    assert seed0["split"] == seed1["split"] == plain["split"]
    table = (tmp_path / "seeded" / "README.md").read_text()
    assert "| ring, 2 seeds ([0](ring-seed0.json), [1](ring-seed1.json)) |" in table


def _result(
    name: str, model: str, valid: float, test: float, split: str = "leave-one-out"
) -> dict[str, object]:
    full = {k: test for k in ("HR@10", "NDCG@10")}
    return {
        "name": name,
        "model": model,
        "data": {"name": "ml-1m.txt.gz", "sha256": ML_1M_SHA256},
        "split": split,
        "valid_protocol": "full ranking over all items, history excluded",
        "train_config": {"monitor": "NDCG@10"},
        "fit_seconds": 60.0,
        "train": {"best_value": valid, "epochs": 3, "best_epoch": 2},
        "evaluations": {"full": {"metrics": full}},
    }


def test_side_by_side_picks_each_models_run_on_validation_not_test() -> None:
    lines = side_by_side(
        [
            _result("b-valid-best", "bert4rec", 0.15, 0.10),
            _result("b-test-best", "bert4rec", 0.12, 0.20),  # better on test, worse on validation
            _result("s-only", "sasrec", 0.18, 0.17),
            _result("g", "gru4rec", 0.30, 0.30),  # not part of the comparison
        ]
    )
    rows = [line for line in lines if line.startswith("| bert4rec |") or line.startswith("| sasrec |")]
    assert [r.split(" | ")[1] for r in rows] == ["b-valid-best", "s-only"]
    published = next(line for line in lines if line.startswith("| bert4rec, published"))
    assert "0.2921" in published and "0.1618" in published  # the bar the issue sets under full ranking
    assert not any("| g |" in line for line in lines)


def test_side_by_side_never_compares_validation_scores_across_splits() -> None:
    sampled = "leave-one-out (valid_users=2048, seed=0)"
    lines = side_by_side(
        [
            _result("all-users", "bert4rec", 0.15, 0.10),
            _result("sampled-users", "bert4rec", 0.30, 0.12, sampled),  # 2,048 other validation users
        ]
    )
    headings = [line for line in lines if line.startswith("### ")]
    assert len(headings) == 2 and "valid_users=2048" in headings[1] and "valid_users" not in headings[0]
    rows = [line.split(" | ")[1] for line in lines if line.startswith("| bert4rec |")]
    assert rows == ["all-users", "sampled-users"]  # one best run per split, not one overall


def test_a_run_validated_on_sampled_users_records_its_split(tmp_path: Path) -> None:
    data = _log(tmp_path / "ring.txt")
    cfg = _config(tmp_path / "v.toml", data, 1)
    cfg.write_text(cfg.read_text().replace('protocols = ["full"]', 'protocols = ["full"]\nvalid_users = 7'))
    result = json.loads(bench_run.run(cfg, tmp_path / "out").read_text())
    assert result["split"] == "leave-one-out (valid_users=7, seed=0)"
    assert result["evaluations"]["full"]["split"] == result["split"]


def test_results_elsewhere_never_rewrite_the_committed_table(tmp_path: Path) -> None:
    committed = bench_run.RESULTS / "README.md"
    before = committed.read_text() if committed.exists() else None
    bench_run.main(["--table", "--out", str(tmp_path / "runs")])
    assert (tmp_path / "runs" / "README.md").read_text().startswith("# Benchmark results")
    assert (committed.read_text() if committed.exists() else None) == before


def test_device_flag_runs_a_gpu_config_here_under_its_own_name(tmp_path: Path) -> None:
    data = _log(tmp_path / "ring.txt")
    config = _config(tmp_path / "gpu.toml", data, 1)
    config.write_text(config.read_text().replace("threads = 1", 'threads = 1\ndevice = "cuda"'))
    bench_run.main(["--device", "cpu", "--out", str(tmp_path / "runs"), str(config)])
    result = json.loads((tmp_path / "runs" / "ring.json").read_text())
    assert result["train_config"]["device"] == "cpu" and result["train"]["epochs"] == 1
    assert result["notes"] == "run with --device cpu (the config's device: cuda)"


def test_an_unknown_device_is_a_one_line_error(tmp_path: Path) -> None:
    config = _config(tmp_path / "a.toml", _log(tmp_path / "ring.txt"), 1)
    with pytest.raises(
        SystemExit, match="^error: .*device must be auto, cpu, cuda, cuda:N or mps, not 'tpu'"
    ):
        bench_run.main(["--device", "tpu", "--out", str(tmp_path / "runs"), str(config)])


def test_gpu_batch_runs_configs_at_once_each_under_its_own_name(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    data = _log(tmp_path / "ring.txt")
    config = _config(tmp_path / "ring.toml", data, 1)
    script = bench_run.ROOT / "benchmarks" / "gpu_batch.sh"
    env = os.environ | {"DEVICE": "cpu", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(script), str(tmp_path / "out"), "abc1234", str(config), f"{config}:1"],
        cwd=bench_run.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    plain, seeded = (
        json.loads((tmp_path / "out" / "res" / f"{n}.json").read_text()) for n in ("ring", "ring-seed1")
    )
    assert plain["git_sha"] == seeded["git_sha"] == "abc1234" and seeded["train_config"]["seed"] == 1
    assert (tmp_path / "out" / "state" / "ring-seed1" / "train_state.json").exists()
    assert (tmp_path / "out" / "logs" / "ring-seed1.log").exists()
    assert not (tmp_path / "out" / "models").exists()  # nothing saved: nothing of runs/ brought back
    bad = subprocess.run(
        ["bash", str(script), str(tmp_path / "bad"), "abc1234", str(tmp_path / "missing.toml")],
        cwd=bench_run.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode == 1  # one run failed
