"""``attnrec evaluate --protocol time-window --window W --metrics ...``: the same numbers as the Python API,
the protocol and its request time stated, and one clear line for every option that does not fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import attnrec
from attnrec.cli.main import app
from attnrec.data.datasets import load_dataset
from attnrec.data.split import make_split
from attnrec.evaluation.list_metrics import item_vectors_of, training_counts
from attnrec.evaluation.protocol import evaluate, protocol_by_name
from attnrec.evaluation.window import split_window_cases

runner = CliRunner()
TINY = ["--set", "hidden=8", "--set", "max_len=12", "--set", "n_layers=1", "--set", "max_epochs=1"]
TINY += ["--set", "batch_size=64", "--set", "threads=1", "--no-progress", "--quiet"]
ALL = "hr,ndcg,mrr,recall,precision,map,coverage,novelty,diversity,arp"


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def evaluate_cli(model: Path, log: Path, *args: str) -> tuple[int, str]:
    """``attnrec evaluate --model MODEL --data LOG ARGS...``."""
    return run("evaluate", "--model", str(model), "--data", str(log), *args)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 users walking a 30-item cycle, one event every 10 s from a user-specific start."""
    rng = np.random.default_rng(0)
    rows = ["user,item,timestamp"]
    for u in range(60):
        start, first = int(rng.integers(0, 30)), int(rng.integers(0, 50))
        rows += [f"u{u},i{(start + t) % 30 + 1},{first + 10 * t}" for t in range(int(rng.integers(8, 20)))]
    path = tmp_path_factory.mktemp("data") / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def temporal_model(log: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "m"
    code, output = run(
        "train", "--data", str(log), "--split", "temporal", "--out", str(out), *TINY, "--no-baseline"
    )
    assert code == 0, output
    return out


def test_time_window_metrics_from_the_cli_equal_the_python_api(
    log: Path, temporal_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ev.json"
    code, output = evaluate_cli(
        temporal_model,
        log,
        "--protocol",
        "time-window",
        "--window",
        "60",
        "--metrics",
        ALL,
        "--ks",
        "5,10",
        "--json",
        str(out),
    )
    assert code == 0, output
    result = json.loads(out.read_text())["results"][0]
    assert (
        "every item of the 1m after the cut time, full ranking over all items, history excluded"
        in result["protocol_text"]
    )
    assert result["request_time"] == "window start"
    rec = attnrec.load(temporal_model)
    data = load_dataset(str(log))
    sp = make_split(data, "temporal")
    cases = split_window_cases(data, sp, 60.0)
    families = ("HR", "NDCG", "MRR", "Recall", "Precision", "MAP", "Coverage", "Novelty", "Diversity", "ARP")
    expected = evaluate(
        rec.score_histories,
        cases,
        protocol_by_name("time-window", ks=(5, 10), window=60.0),
        metrics=families,
        train_counts=training_counts(sp.train),
        item_vectors=item_vectors_of(rec.core, None),
    )
    assert result["metrics"] == pytest.approx(expected.metrics)
    assert {"Recall@10", "MAP@10", "Coverage@10", "Novelty@10", "Diversity@10", "ARP@10"} <= set(
        result["metrics"]
    )
    assert result["n_cases"] == len(cases)


def test_the_default_metrics_of_the_time_window_include_recall_precision_map(
    log: Path, temporal_model: Path, tmp_path: Path
) -> None:
    def metrics(*args: str) -> list[str]:
        out = tmp_path / "ev.json"
        code, output = evaluate_cli(temporal_model, log, "--json", str(out), *args)
        assert code == 0, output
        return list(json.loads(out.read_text())["results"][0]["metrics"])

    with_window = metrics("--protocol", "time-window")
    assert with_window[:6] == ["HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR"]
    assert {"Recall@10", "Precision@10", "MAP@10"} <= set(with_window)
    assert metrics() == ["HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR"]  # single target: as before
    assert metrics("--metrics", "precision") == ["Precision@1", "Precision@5", "Precision@10"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "7d"], "--window applies to --protocol time-window"),
        (["--metrics", "recall,f1"], "unknown metric 'f1'"),
        (["--protocol", "time-window", "--window", "soon"], "give a positive length"),
        (["--protocol", "time-window", "--split", "leave-one-out"], "the leave-one-out split has none"),
        (["--protocol", "sampled-uniform", "--metrics", "coverage"], "need full ranking"),
    ],
)
def test_options_that_do_not_fit_are_one_line_errors(
    log: Path, temporal_model: Path, args: list[str], message: str
) -> None:
    code, output = evaluate_cli(temporal_model, log, *args)
    assert code == 2, output
    assert message in output


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--data", "no-such-file.csv", "--protocol", "time-window"],
        ["compare", "--data", "no-such-file.csv", "--models", "pop", "--protocol", "time-window"],
        ["compare", "--data", "no-such-file.csv", "--models", "pop", "--also", "time-window"],
    ],
)
def test_commands_that_test_single_targets_refuse_the_window_before_reading_data(args: list[str]) -> None:
    code, output = run(*args)
    assert code == 2, output
    assert "then run attnrec evaluate --protocol time-window" in output
    assert "no-such-file" not in output  # refused before any data is read


def test_a_benchmark_config_with_the_window_is_refused_when_read(tmp_path: Path) -> None:
    from attnrec.config import ConfigError
    from attnrec.experiments.configured import RunConfig

    path = tmp_path / "c.toml"
    path.write_text('[run]\nname = "c"\ndata = "demo"\nmodel = "pop"\nprotocols = ["full", "time-window"]\n')
    with pytest.raises(ConfigError, match="a run config: the time-window protocol ranks every item"):
        RunConfig.from_toml(path)


def test_the_reference_pages_python_example_runs() -> None:
    page = (Path(__file__).parents[2] / "docs" / "reference" / "metrics.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, object] = {}
    exec(compile(code, "metrics.md", "exec"), scope)  # the page's own code, as a user would paste it
    frame = scope["result"].to_frame()  # type: ignore[attr-defined]
    assert {"Recall@10", "MAP@10", "Coverage@10", "Diversity@10"} <= set(frame.index)


def test_many_metrics_print_one_per_row_and_every_name_is_readable(log: Path, temporal_model: Path) -> None:
    code, output = evaluate_cli(
        temporal_model,
        log,
        "--protocol",
        "time-window",
        "--metrics",
        ALL,
    )
    assert code == 0, output
    for name in (
        "Recall@10",
        "Precision@10",
        "MAP@10",
        "Coverage@10",
        "Novelty@10",
        "Diversity@10",
        "ARP@10",
    ):
        assert name in output  # a column per metric would cut these to "R…" in an 80-column terminal


def test_a_model_without_features_or_embeddings_cannot_report_diversity(log: Path, tmp_path: Path) -> None:
    out = tmp_path / "pop"
    code, output = run(
        "train", "--data", str(log), "--model", "pop", "--split", "temporal", "--out", str(out), "--quiet"
    )
    assert code == 0, output
    code, output = evaluate_cli(out, log, "--metrics", "coverage,novelty,arp")
    assert code == 0, output
    code, output = evaluate_cli(out, log, "--metrics", "diversity")
    assert code == 2 and "the pop model has neither" in output
