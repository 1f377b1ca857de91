"""Every committed results table re-renders byte-identical from its JSON files.

A change to a renderer (or to the recorded JSON) that would alter a committed table fails here, so
tables are always generated from result files and never edited by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_scripts import BENCHMARKS, load

from attnrec.experiments.comparison import Comparison
from attnrec.experiments.tables import study_markdown

RESULTS = BENCHMARKS / "results"


def _json(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text())


def test_run_table() -> None:
    assert load("run").table(RESULTS / "runs") == (RESULTS / "README.md").read_text()


@pytest.mark.parametrize(
    "name", ["flops", "large_catalog", "preprocess_20m", "peter", "peter_reference", "window_metrics"]
)
def test_script_tables(name: str) -> None:
    assert load(name).markdown(_json(RESULTS / f"{name}.json")) == (RESULTS / f"{name}.md").read_text()


@pytest.mark.parametrize("name", ["load_test", "load_test_1m", "load_test_priority"])
def test_load_test_tables(name: str) -> None:
    assert load("load_test").markdown(_json(RESULTS / f"{name}.json")) == (RESULTS / f"{name}.md").read_text()


def test_peers_table() -> None:
    text = load("peers").markdown(_json(RESULTS / "peers.json"), (RESULTS / "peers-notes.md").read_text())
    assert text == (RESULTS / "peers.md").read_text()


@pytest.mark.parametrize("data", ["ml-1m", "beauty"])
def test_comparison_tables(data: str) -> None:
    d = RESULTS / "compare" / data
    assert (
        Comparison.from_dict(_json(d / "comparison.json")).to_markdown() == (d / "comparison.md").read_text()
    )


@pytest.mark.parametrize("path", sorted((RESULTS / "studies").glob("*.json")), ids=lambda p: p.stem)
def test_study_tables(path: Path) -> None:
    assert study_markdown(_json(path)) == path.with_suffix(".md").read_text()


def test_request_time_table() -> None:
    assert load("request_time").markdown(RESULTS / "runs") == (RESULTS / "request_time.md").read_text()


def test_defaults_table() -> None:
    results = json.loads((RESULTS / "defaults.json").read_text())
    text = load("defaults").render(results, results[0]["budget"])
    assert text == (RESULTS / "defaults.md").read_text()
