"""benchmarks/tune_sasrec.py: its space file and fixed settings make a valid study; its table reads the
reference run."""

from __future__ import annotations

import json
from pathlib import Path

from bench_scripts import load

from attnrec.data.split import leave_one_out
from attnrec.experiments.tuning import plan_search
from attnrec.experiments.tuning_output import TuneOutcome

bench = load("tune_sasrec")


def test_the_benchmark_study_searches_the_space_file_less_the_fixed_settings(tmp_path: Path) -> None:
    plan = plan_search(bench.make_settings(bench.parser().parse_args(["--out", str(tmp_path)])))
    assert sorted(plan.space.model) == ["dropout", "hidden", "max_len", "n_layers"]  # loss, n_heads fixed
    assert sorted(plan.space.train) == ["batch_size", "lr", "lr_schedule", "weight_decay"]
    assert plan.model_config.loss == "ce" and plan.train_config.threads == 1  # type: ignore[attr-defined]
    smoke = plan_search(
        bench.make_settings(bench.parser().parse_args(["--set", "max_len=50", "--out", str(tmp_path)]))
    )
    assert "max_len" not in smoke.space.model and smoke.model_config.max_len == 50  # type: ignore[attr-defined]


def test_the_report_puts_the_hand_tuned_run_beside_the_best_trial(ring, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reference_run = json.loads(bench.REFERENCE.read_text())
    args = bench.parser().parse_args(["--out", str(tmp_path)])
    args.argv, args.git_sha = ["--out", str(tmp_path)], "0" * 40
    split = leave_one_out(ring)
    summary = {
        "data": {"name": "ring"},
        "split": split.describe(),
        "selection": "best validation NDCG@10",
        "space": {},
        "best": {"trial": 3, "valid_value": 0.19, "params": {"model.dropout": 0.12}},
        "test": {"protocol_text": "test on ring, full ranking"},
        "trials": {"complete": 4, "total": 5},
        "trial_list": [
            {
                "number": 3,
                "state": "complete",
                "value": 0.19,
                "epochs": 20,
                "seconds": 800.0,
                "params": {"model.dropout": 0.12},
                "note": "",
            }
        ],
    }
    outcome = TuneOutcome("s", "NDCG@10", 3, 0.19, {"model.dropout": 0.12}, None, [], {}, 1.0)
    outcome.test = type("Test", (), {"metrics": {"NDCG@10": 0.2, "HR@10": 0.33}})()  # type: ignore[assignment]
    result = bench.record(outcome, summary, args, {"model": {}, "train": {}}, 60.0)
    want = reference_run["evaluations"]["full"]["metrics"]
    assert result["reference"]["test"] == {"NDCG@10": want["NDCG@10"], "HR@10": want["HR@10"]}
    assert abs(result["delta_test"]["NDCG@10"] - (0.2 - want["NDCG@10"])) < 1e-12
    md = bench.markdown(result)
    assert f"| {want['NDCG@10']:.4f} | {want['HR@10']:.4f} |" in md and "| 0.1900 | 0.2000 | 0.3300 |" in md
