"""The training-cost table of ml-1m.txt: per model and machine the run chosen on validation, never on test."""

from typing import Any

from attnrec.evaluation.metrics import METRICS
from attnrec.evaluation.published import ML_1M_SHA256
from attnrec.experiments.tables import results_markdown, training_cost


def _run(
    name: str,
    model: str,
    valid: float,
    test: float,
    spe: float,
    gpu: str | None = None,
    sha: str = ML_1M_SHA256,
    preset: str = "ml-1m",
) -> dict[str, Any]:
    return {
        "name": name,
        "model": model,
        "preset": preset,
        "model_config": {"loss": "ce"},
        "data": {"name": "ml-1m.txt.gz", "sha256": sha},
        "split": "leave-one-out",
        "valid_protocol": "full ranking over all items, history excluded",
        "train_config": {"monitor": "NDCG@10", "device": "cuda" if gpu else "cpu"},
        "train": {"best_value": valid, "epochs": 20, "best_epoch": 10},
        "evaluations": {"full": {"metrics": {k: test for k in METRICS}, "protocol_text": "full ranking"}},
        "seconds_per_epoch": spe,
        "fit_seconds": 20 * spe,
        "peak_rss_mb": 100.0,
        "machine": {"cpu": "c", "cores": 2, "torch_threads": 1, "cuda": gpu, "torch": "t"},
        "git_sha": "0123456789ab",
        "finished": "now",
    }


def test_one_row_per_model_and_machine_chosen_on_validation() -> None:
    runs = [
        _run("cpu-a", "sasrec", valid=0.18, test=0.19, spe=60.0),
        _run(
            "cpu-b", "sasrec", valid=0.19, test=0.17, spe=30.0
        ),  # better on validation, worse on test: chosen
        _run("gpu-a", "sasrec", valid=0.17, test=0.16, spe=3.0, gpu="NVIDIA H200"),
        _run("large", "hstu", valid=0.20, test=0.20, spe=2.0, gpu="NVIDIA H200", preset="ml-1m-large"),
        _run("small", "hstu", valid=0.12, test=0.12, spe=3.0, gpu="NVIDIA H200"),
        _run("other-file", "sasrec", valid=0.50, test=0.50, spe=1.0, sha="ab" * 32),
    ]
    rows = [line for line in training_cost(runs) if line.startswith("| ") and not line.startswith("| model")]
    assert [r.split(" | ")[:3] for r in rows] == [
        ["| hstu", "NVIDIA H200", "small"],
        ["| hstu-large", "NVIDIA H200", "large"],
        ["| sasrec", "CPU", "cpu-b"],
        ["| sasrec", "NVIDIA H200", "gpu-a"],
    ]
    # cpu-b: 30 s an epoch, best epoch 10 -> 5.0 min to its best, 10.0 min in all
    assert "| 30.0 | 20 (10) | 5.0 min | 10.0 min | 100 MB |" in rows[2]
    assert "## Training cost on ml-1m.txt" in results_markdown(runs, "cmd", "src")


def test_no_ml_1m_run_no_section() -> None:
    assert training_cost([_run("x", "sasrec", 0.1, 0.1, 1.0, sha="cd" * 32)]) == []
