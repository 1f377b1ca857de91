"""``attnrec compare`` and :func:`attnrec.experiments.comparison.compare`: one table, published figures only
where comparable."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data.demo import make_demo
from attnrec.data.schema import DataSource, Interactions
from attnrec.evaluation.protocol import FULL, PAPER_BERT4REC
from attnrec.evaluation.published import BERT4REC_TABLE2, ML_1M_SHA256
from attnrec.experiments.comparison import compare, default_models, resolve_preset
from attnrec.models.registry import list_models
from synthetic_logs import ring_log

runner = CliRunner()
QUICK = {"max_epochs": 2, "threads": 1}


@pytest.fixture(scope="module")
def small() -> Interactions:
    return make_demo(n_users=120, n_items=60, seed=2, mean_length=15)


def test_compare_tabulates_each_model_with_time_and_size(small: Interactions) -> None:
    result = compare(small, ["pop", "fmc"], protocol=FULL, train=QUICK)
    assert [r.model for r in result.runs] == ["pop", "fmc"]
    pop, fmc = result.runs
    assert pop.n_params == 0 and fmc.n_params == 2 * 32 * (small.n_items + 1)  # demo preset: dim 32
    assert pop.preset == "demo" == fmc.preset and fmc.epochs == 2
    assert set(fmc.metrics) == {"HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR"}
    assert fmc.metrics["HR@10"] > pop.metrics["HR@10"]
    assert result.published_source is None and pop.published is None
    md = result.to_markdown()
    assert "| FMC (demo) |" in md and "full ranking" in md and "published" not in md.split("|")[1]
    as_json = json.loads(json.dumps(result.to_dict()))
    assert as_json["protocol"]["candidates"] == "full" and as_json["runs"][1]["model"] == "fmc"


def test_published_figures_only_for_the_papers_file_and_protocol(small: Interactions) -> None:
    as_ml1m = dataclasses.replace(small, source=DataSource("ml-1m", sha256=ML_1M_SHA256))
    sampled = compare(as_ml1m, ["pop"], protocol=PAPER_BERT4REC, preset=None, train=QUICK)
    assert sampled.published_source == BERT4REC_TABLE2.source
    assert sampled.runs[0].published == BERT4REC_TABLE2.results["ml-1m"]["POP"]
    assert "*0.1358*" in sampled.to_markdown()
    full = compare(as_ml1m, ["pop"], protocol=FULL, preset=None, train=QUICK)
    assert full.published_source is None and full.runs[0].published is None


def test_also_tests_the_same_fitted_models_under_more_protocols(small: Interactions) -> None:
    as_ml1m = dataclasses.replace(small, source=DataSource("ml-1m", sha256=ML_1M_SHA256))
    both = compare(as_ml1m, ["pop", "fmc"], protocol=PAPER_BERT4REC, preset=None, train=QUICK, also=[FULL])
    (full,) = both.others
    alone = compare(as_ml1m, ["pop", "fmc"], protocol=PAPER_BERT4REC, preset=None, train=QUICK)
    assert [r.metrics for r in both.runs] == [r.metrics for r in alone.runs]  # the extra test changes nothing
    assert (
        full.protocol == FULL
        and full.selection == PAPER_BERT4REC
        and [r.model for r in full.runs] == ["pop", "fmc"]
    )
    assert full.runs[0].published is None and both.runs[0].published is not None  # only the paper's protocol
    # The same fitted models: sampled candidates are a subset of the full ranking, so HR can only drop.
    assert all(f.metrics["HR@10"] <= s.metrics["HR@10"] for f, s in zip(full.runs, both.runs, strict=True))
    assert all(
        f.epochs == s.epochs and f.n_params == s.n_params for f, s in zip(full.runs, both.runs, strict=True)
    )
    md = both.to_markdown()
    assert md.index("# Model comparison") < md.index("## Model comparison") and md.count("| FMC |") == 2
    assert "model selection on the validation cases under 100 popularity-sampled" in md.split("## ")[1]
    assert json.loads(json.dumps(both.to_dict()))["others"][0]["protocol"]["candidates"] == "full"


def test_presets_follow_the_dataset(small: Interactions) -> None:
    assert resolve_preset("fpmc", small) == "demo"
    as_ml1m = dataclasses.replace(small, source=DataSource("whatever", sha256=ML_1M_SHA256))
    assert resolve_preset("fpmc", as_ml1m) == "ml-1m"
    assert resolve_preset("fpmc", small, None) is None and resolve_preset("fpmc", small, "beauty") == "beauty"
    assert resolve_preset("fpmc", small, "no-such") is None
    assert default_models() == list_models("sequential")
    # a log without item features: every model but those that read nothing else (the content baseline)
    assert default_models(ring_log(n_users=5)) == [m for m in list_models("sequential") if m != "content"]


def test_unknown_model_fails_before_training(small: Interactions) -> None:
    with pytest.raises(KeyError, match="unknown model"):
        compare(small, ["pop", "nope"])


def _pairs_file(tmp_path: Path) -> Path:
    """A small demo log written as ``user item`` lines (the papers' format)."""
    data = make_demo(n_users=80, n_items=40, seed=4, mean_length=12)
    path = tmp_path / "pairs.txt"
    seqs = data.sequences()
    path.write_text(
        "".join(f"{u + 1} {data.items.to_external([i])[0]}\n" for u in range(data.n_users) for i in seqs[u])
    )
    return path


def test_cli_writes_markdown_and_json(tmp_path: Path) -> None:
    path = _pairs_file(tmp_path)
    out = tmp_path / "cmp"
    res = runner.invoke(
        app,
        [
            "compare",
            "--data",
            str(path),
            "--models",
            "pop,fmc",
            "--protocol",
            "sampled-popularity",
            "--also",
            "full",
            "--max-epochs",
            "1",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    table = (out / "comparison.md").read_text()
    assert "| POP |" in table and "| FMC |" in table and "100 popularity-sampled negatives" in table
    got = json.loads((out / "comparison.json").read_text())
    assert [r["model"] for r in got["runs"]] == ["pop", "fmc"] and got["protocol"]["sampler"] == "popularity"
    assert [r["model"] for r in got["others"][0]["runs"]] == ["pop", "fmc"] and "full ranking" in table
    bad = runner.invoke(app, ["compare", "--data", str(path), "--models", "nope", "--out", str(out)])
    assert bad.exit_code == 2 and "unknown model" in bad.output


def test_shortfalls_against_the_paper_are_flagged_until_explained(small: Interactions) -> None:
    as_ml1m = dataclasses.replace(small, source=DataSource("ml-1m", sha256=ML_1M_SHA256))
    result = compare(as_ml1m, ["pop"], protocol=PAPER_BERT4REC, preset=None, train=QUICK, also=[FULL])
    (run,) = result.runs
    published = run.published
    assert published is not None
    run.metrics["HR@10"] = 0.85 * published["HR@10"]
    ((flagged, ratio),) = result.shortfalls()
    assert flagged is run and ratio == pytest.approx(0.85)
    assert "= 85% of" in result.to_markdown() and "no explanation given yet" in result.to_markdown()
    run.metrics["HR@10"] = 0.95 * published["HR@10"]
    assert result.shortfalls() == [] and "below the published" not in result.to_markdown()
    assert result.others[0].shortfalls() == []  # no published figures under full ranking


def test_render_rewrites_the_table_from_json_with_notes(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    res = runner.invoke(
        app,
        [
            "compare",
            "--data",
            "demo",
            "--models",
            "pop",
            "--also",
            "sampled-uniform",
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    before = json.loads((out / "comparison.json").read_text())
    notes = tmp_path / "notes.md"
    notes.write_text("POP has nothing to tune.\n")
    res = runner.invoke(app, ["compare", "--render", "--notes", str(notes), "--out", str(out)])
    assert res.exit_code == 0, res.output
    table = (out / "comparison.md").read_text()
    assert "## Notes\n\nPOP has nothing to tune." in table and table.count("| POP (demo) |") == 2
    after = json.loads((out / "comparison.json").read_text())
    assert after == before | {"notes": "POP has nothing to tune.\n"}  # nothing else changes
    missing = runner.invoke(app, ["compare", "--render", "--out", str(tmp_path / "none")])
    assert missing.exit_code != 0 and "run the comparison first" in missing.output
    no_data = runner.invoke(app, ["compare", "--out", str(out)])
    assert no_data.exit_code != 0 and "--data is required" in no_data.output


def test_update_replaces_the_given_models_rows_and_records_their_settings(tmp_path: Path) -> None:
    path = _pairs_file(tmp_path)
    out = tmp_path / "cmp"
    common = [
        "compare",
        "--data",
        str(path),
        "--protocol",
        "sampled-popularity",
        "--also",
        "full",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    first = runner.invoke(app, [*common, "--models", "pop,fmc", "--max-epochs", "1"])
    assert first.exit_code == 0, first.output
    before = json.loads((out / "comparison.json").read_text())
    again = runner.invoke(app, [*common, "--models", "fmc,bprmf", "--max-epochs", "2", "--update"])
    assert again.exit_code == 0, again.output
    after = json.loads((out / "comparison.json").read_text())
    for table, old in ((after, before), (after["others"][0], before["others"][0])):
        rows = {r["model"]: r for r in table["runs"]}
        assert list(rows) == ["pop", "fmc", "bprmf"]  # order kept, new model appended
        assert rows["pop"] == old["runs"][0]  # untouched
        assert rows["fmc"]["epochs"] == 2 and rows["fmc"]["settings"] == {"max_epochs": 2}
    assert after["settings"] == before["settings"]
    md = (out / "comparison.md").read_text()
    assert (
        "Rows run apart from the table, with their own settings: FMC (max_epochs=2); BPR-MF (max_epochs=2)"
        in md
    )
    other = runner.invoke(app, [*common[:4], "sampled-uniform", *common[5:], "--models", "pop", "--update"])
    assert other.exit_code != 0 and "cannot merge" in other.output
    assert json.loads((out / "comparison.json").read_text()) == after  # a refused merge writes nothing
    missing = runner.invoke(app, [*common[:-1], str(tmp_path / "none"), "--models", "pop", "--update"])
    assert missing.exit_code != 0 and "--update: no" in missing.output
