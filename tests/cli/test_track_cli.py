"""``attnrec train --track``: the run read back from a real MLflow store (SQLite) and TensorBoard event files.

MLflow takes seconds to import and to create a store, so one tracked training run is shared by the
MLflow tests (module fixture); TensorBoard is cheap and gets its own runs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import TINY_NETWORK, TINY_TRAINING, run

from attnrec.data.readers.lines import read_pairs
from attnrec.experiments.tracking import TensorBoardTracker, mlflow_name
from synthetic_logs import write_cycle_pairs

TINY = [*TINY_NETWORK, *TINY_TRAINING, "--no-progress", "--quiet"]  # epochs: each test says


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """100 users walking a 30-item cycle."""
    return write_cycle_pairs(
        tmp_path_factory.mktemp("data") / "pairs.txt", 100, 30, 5, 15, named=True, seed=1
    )


@pytest.fixture(scope="module")
def mlflow_run(pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One ``attnrec train --track mlflow`` into a fresh SQLite store; the run read back with
    ``MlflowClient``."""
    mlflow = pytest.importorskip("mlflow")
    tmp = tmp_path_factory.mktemp("mlflow")
    uri, out = f"sqlite:///{tmp}/m.db", tmp / "model"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)  # anything MLflow writes beside the store stays in tmp
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        code, output = run(
            "train",
            "--data",
            str(pairs),
            "--out",
            str(out),
            *TINY,
            "--max-epochs",
            "3",
            "--protocol",
            "sampled-uniform",
            "--negatives",
            "10",
            "--track",
            "mlflow",
            "--track-uri",
            uri,
            "--experiment",
            "exp1",
            "--run-name",
            "first",
        )
    assert code == 0, output
    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp1")
    (found,) = client.search_runs([exp.experiment_id])
    return {
        "client": client,
        "run": found,
        "output": output,
        "out": out,
        "meta": json.loads((out / "config.json").read_text()),
    }


def test_mlflow_run_has_the_settings_and_the_data(mlflow_run: dict[str, Any], pairs: Path) -> None:
    run_, meta = mlflow_run["run"], mlflow_run["meta"]
    assert run_.info.run_name == "first" and run_.info.status == "FINISHED"
    params = run_.data.params
    settings = {f"model.{k}": str(v) for k, v in meta["model_config"].items()}
    settings |= {f"train.{k}": str(v) for k, v in meta["train_config"].items()}
    assert {k: v for k, v in params.items() if k.startswith(("model.", "train."))} == settings
    assert params["model.hidden"] == "8" and params["train.max_epochs"] == "3"
    data = read_pairs(pairs)
    assert run_.data.tags["data.sha256"] == data.source.sha256 == meta["data"]["sha256"]
    assert (params["data.users"], params["data.items"], params["data.interactions"]) == (
        str(data.n_users),
        str(data.n_items),
        str(len(data)),
    )
    assert params["run.model"] == "sasrec" and params["run.split"] == "leave-one-out"
    assert f"tracked: MLflow run {run_.info.run_id} (experiment 'exp1')" in mlflow_run["output"]


def test_mlflow_run_has_every_epoch_the_test_metrics_and_the_model(mlflow_run: dict[str, Any]) -> None:
    client, run_, meta = mlflow_run["client"], mlflow_run["run"], mlflow_run["meta"]
    rid, history = run_.info.run_id, meta["train_result"]["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3]

    def series(key: str) -> list[tuple[int, float]]:
        return sorted((m.step, m.value) for m in client.get_metric_history(rid, key))

    assert series("train/loss") == [(h["epoch"], h["loss"]) for h in history]
    assert series("valid/NDCG_at_10") == [(h["epoch"], h["valid"]["NDCG@10"]) for h in history]
    assert series("train/epoch_seconds") == [(h["epoch"], h["train_seconds"]) for h in history]

    # Final test metrics: those saved with the model and those printed (4 decimals), per protocol.
    printed = _printed_rows(mlflow_run["output"], "sasrec")
    tested = [ev for ev in meta["evaluations"] if ev["target"] == "test"]
    assert len(tested) == len(printed) == 2
    metrics, tags = run_.data.metrics, run_.data.tags
    for name, ev, row in zip(("full", "sampled-uniform"), tested, printed, strict=True):
        logged = {k: metrics[f"test/{name}/{mlflow_name(k)}"] for k in ev["metrics"]}
        assert logged == ev["metrics"]
        assert {k: f"{v:.4f}" for k, v in logged.items()} == row
        assert tags[f"test/{name}/protocol"] == ev["protocol_text"] and "sha256" in ev["protocol_text"]
    assert "10 uniform-sampled negatives" in tags["test/sampled-uniform/protocol"]
    assert "popularity/test/full/NDCG_at_10" in metrics

    tr = meta["train_result"]
    assert metrics["summary/best_epoch"] == tr["best_epoch"] and tags["summary/stopped"] == tr["stopped"]
    artifacts = {Path(a.path).name for a in client.list_artifacts(rid, "model")}
    assert {"config.json", "weights.safetensors", "id_maps.json"} <= artifacts
    assert "train_state" not in artifacts  # the resumable optimizer state is not part of the model


def _printed_rows(output: str, label: str) -> list[dict[str, str]]:
    """The ``label`` row of each printed metrics table, as ``{metric: "0.1234"}``."""
    rows, header = [], []
    for line in output.splitlines():
        cells = [c.strip() for c in re.split("[┃│]", line)[1:-1]]
        if cells and cells[0] == "model":
            header = cells
        elif cells and cells[0] == label:
            rows.append(dict(zip(header[1:], cells[1:], strict=True)))
    return rows


def test_an_unusable_store_fails_before_training(pairs: Path, tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    (tmp_path / "file").write_text("")
    out = tmp_path / "m"
    code, output = run(
        "train",
        "--data",
        str(pairs),
        "--out",
        str(out),
        *TINY,
        "--track",
        "mlflow",
        "--track-uri",
        f"sqlite:///{tmp_path}/file/m.db",
    )
    assert code == 2, output
    assert f"error: --track mlflow: cannot open the tracking store sqlite:///{tmp_path}/file/m.db" in output
    assert not out.exists()  # nothing trained


def test_missing_mlflow_is_one_line_with_the_install_hint(
    pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)
    code, output = run(
        "train", "--data", str(pairs), "--out", str(tmp_path / "m"), *TINY, "--track", "mlflow"
    )
    assert code == 2, output
    assert "error: --track mlflow needs the mlflow package: pip install 'attnrec[mlflow]'" in output
    assert list(tmp_path.iterdir()) == []


def test_tracking_flags_need_a_tracker(pairs: Path, tmp_path: Path) -> None:
    code, output = run("train", "--data", str(pairs), "--out", str(tmp_path / "m"), "--track-uri", "x")
    assert code == 2 and "--track-uri applies to a tracked run" in output
    code, output = run("train", "--data", str(pairs), "--track", "wandb")
    assert code == 2 and "'wandb' is not one of 'mlflow', 'tensorboard'" in output


def _events(log_dir: Path) -> Any:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    events = accumulator.EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def test_tensorboard_scalars_of_a_resumed_run(pairs: Path, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    out, tb = tmp_path / "m", tmp_path / "tb"
    assert run("train", "--data", str(pairs), "--out", str(out), *TINY, "--max-epochs", "1")[0] == 0
    code, output = run(
        "train",
        "--data",
        str(pairs),
        "--out",
        str(out),
        *TINY,
        "--max-epochs",
        "3",
        "--resume",
        "--track",
        "tensorboard",
        "--track-uri",
        str(tb),
        "--no-baseline",
    )
    assert code == 0, output
    meta = json.loads((out / "config.json").read_text())
    history = meta["train_result"]["history"]
    events = _events(tb)

    def series(tag: str) -> tuple[list[int], list[float]]:
        points = sorted((e.step, e.value) for e in events.Scalars(tag))
        return [s for s, _ in points], [v for _, v in points]

    # Epoch 1 was trained before the resume: the run still shows it, once (TensorBoard keeps float32).
    steps, losses = series("train/loss")
    assert steps == [h["epoch"] for h in history] == [1, 2, 3]
    assert losses == pytest.approx([h["loss"] for h in history], rel=1e-6)
    assert series("valid/NDCG@10")[1] == pytest.approx([h["valid"]["NDCG@10"] for h in history], rel=1e-6)
    (ev,) = [e for e in meta["evaluations"] if e["target"] == "test"]
    assert series("test/full/NDCG@10") == ([0], pytest.approx([ev["metrics"]["NDCG@10"]], rel=1e-6))
    texts = {
        tag: events.Tensors(tag)[0].tensor_proto.string_val[0].decode() for tag in events.Tags()["tensors"]
    }
    assert texts["model_dir/text_summary"] == str(out.resolve())
    assert texts["test/full/protocol/text_summary"] == ev["protocol_text"]
    assert "| model.hidden | 8 |" in texts["settings/text_summary"]
    assert texts["status/text_summary"] == "FINISHED"
    plugin = pytest.importorskip("tensorboard.plugins.hparams.plugin_data_pb2")
    start = plugin.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    )
    hparams = {k: v.number_value or v.string_value for k, v in start.session_start_info.hparams.items()}
    assert hparams["model.hidden"] == 8 and hparams["data.sha256"] == meta["data"]["sha256"]
    assert hparams["train.lr"] == pytest.approx(meta["train_config"]["lr"])


def test_a_tracker_failing_mid_run_loses_no_training(
    pairs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tensorboard")

    def unreachable(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(TensorBoardTracker, "_log_scalars", unreachable)
    out = tmp_path / "m"
    code, output = run(
        "train",
        "--data",
        str(pairs),
        "--out",
        str(out),
        *TINY,
        "--max-epochs",
        "2",
        "--track",
        "tensorboard",
        "--track-uri",
        str(tmp_path / "tb"),
    )
    assert code == 0, output
    assert output.count("tensorboard tracking failed") == 1, output
    assert "tracking failed while logging epoch 1 (disk full); training goes on" in output
    assert (
        json.loads((out / "config.json").read_text())["train_result"]["epochs"] == 2
    )  # trained, tested, saved
