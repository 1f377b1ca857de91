"""benchmarks/studies.py: each point trains the setting it names, and a shortened study says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import load

from synthetic_logs import write_cycle_pairs

studies = load("studies")


def _log(path: Path) -> Path:
    return write_cycle_pairs(path, 80, 40, 8, 20)


def test_hidden_study_trains_each_size_and_marks_the_shortening(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    data = _log(tmp_path / "ring.txt")
    res = studies.run_study(
        "hidden", str(data), values=[8, 16], preset="demo", max_epochs=2, users=60, out=tmp_path, threads=1
    )
    rows = res["rows"]
    assert [r["value"] for r in rows] == [8, 16]
    assert rows[0]["n_parameters"] < rows[1]["n_parameters"]  # the setting reached the model
    assert all(r["epochs"] <= 2 for r in rows) and res["train_config"]["threads"] == 1
    stem = tmp_path / "hidden-ring-60users"
    md = stem.with_suffix(".md").read_text()
    assert (
        "SHORTENED" in md and "values [8, 16]" in md and "at most 2 epochs" in md and "60 of 80 users" in md
    )
    assert json.loads(stem.with_suffix(".json").read_text())["shortened"] == res["shortened"]
    assert stem.with_suffix(".png").stat().st_size > 0


def test_unshortened_study_says_nothing(tmp_path: Path) -> None:
    data = _log(tmp_path / "ring.txt")
    res = studies.run_study(
        "positions", str(data), preset="demo", out=tmp_path, threads=1, extra={"hidden": 8}
    )
    assert res["shortened"] == ""
    assert [r["value"] for r in res["rows"]] == [True, False]
    assert "SHORTENED" not in (tmp_path / "positions-ring.md").read_text()


def test_point_cut_by_the_time_budget_is_marked(tmp_path: Path) -> None:
    data = _log(tmp_path / "ring.txt")
    res = studies.run_study(
        "mask",
        str(data),
        values=[0.2],
        preset="demo",
        time_budget=1e-6,
        out=tmp_path,
        threads=1,
        extra={"hidden": 8},
    )
    assert res["rows"][0]["stopped"].startswith("time budget")
    assert "mask_prob = 0.2 stopped on the 0 s training time budget" in res["shortened"]
    assert "not converged" in (tmp_path / "mask-ring.md").read_text()


def test_render_rewrites_table_from_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    data = _log(tmp_path / "ring.txt")
    studies.run_study(
        "positions", str(data), preset="demo", max_epochs=1, out=tmp_path, threads=1, extra={"hidden": 8}
    )
    md = tmp_path / "positions-ring.md"
    before = md.read_text()
    md.write_text("stale")
    studies.main(["render", str(tmp_path / "positions-ring.json")])
    assert md.read_text() == before


def test_render_needs_files_and_studies_take_none(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="2"):  # argparse's usage error
        studies.main(["render"])
    assert "render needs the study JSON files" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        studies.main(["mask", "stray.json"])
    assert "only render takes files" in capsys.readouterr().err


def test_extra_model_and_training_settings_reach_their_configs(tmp_path: Path) -> None:
    data = _log(tmp_path / "ring.txt")
    res = studies.run_study(
        "positions",
        str(data),
        values=[True],
        preset="demo",
        max_epochs=1,
        out=tmp_path,
        threads=1,
        extra={"hidden": 8, "dropout": 0.05},
        train_extra={"batch_size": 7},
    )
    assert res["train_config"]["batch_size"] == 7 and "batch_size" not in res["model_config"]
    assert res["model_config"]["hidden"] == 8 and res["model_config"]["dropout"] == 0.05
    assert res["device"] == "cpu" and "trained on cpu" in (tmp_path / "positions-ring.md").read_text()
    with pytest.raises(ValueError, match="no_such_key"):
        studies.run_study(
            "positions",
            str(data),
            values=[True],
            preset="demo",
            max_epochs=1,
            out=tmp_path,
            threads=1,
            extra={"no_such_key": 1},
        )


def test_set_follows_the_cli_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    calls: list[dict[str, object]] = []
    monkeypatch.setattr(
        studies,
        "run_study",
        lambda *a, **kw: calls.append(kw) or seen.update(kw["extra"] | kw["train_extra"]),
    )
    studies.main(
        ["positions", "--set", "train.batch_size=32", "--set", "dropout=0.3", "--set", "model.hidden=16"]
    )
    assert seen == {"batch_size": 32, "dropout": 0.3, "hidden": 16}
    assert calls[0]["train_extra"] == {"batch_size": 32} and calls[0]["extra"] == {
        "dropout": 0.3,
        "hidden": 16,
    }
    with pytest.raises(Exception, match="unknown key"):
        studies.main(["positions", "--set", "bogus=1"])
