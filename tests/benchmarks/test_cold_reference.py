"""The cold-item warm reference (benchmarks/cold_reference.py): the warm cases with the cold items taken out
of their histories, by hand, and the table's columns for records with and without that measurement."""

from __future__ import annotations

import numpy as np
from bench_scripts import load

from attnrec.data.schema import Sequences
from attnrec.data.split import EvalSet

ref = load("cold_reference")


def test_warm_cases_lose_their_cold_history_items_and_cold_or_emptied_cases_go() -> None:
    hist = Sequences.from_lists([[1, 5, 2], [5], [3, 4], [6, 5, 7]], n_items=7)
    cases = EvalSet(
        np.array([10, 11, 12, 13]), hist, np.array([4, 2, 5, 1]), {"rating": np.array([1.0, 2.0, 3.0, 4.0])}
    )
    out = ref.warm_without_cold(cases, np.array([5]))
    # user 11's history held only the cold item 5; user 12's target is cold
    assert out.users.tolist() == [10, 13]
    assert [
        out.histories.items[a:b].tolist()
        for a, b in zip(out.histories.offsets[:-1], out.histories.offsets[1:], strict=True)
    ] == [[1, 2], [6, 7]]
    assert out.targets.tolist() == [4, 1]
    assert out.target_columns["rating"].tolist() == [1.0, 4.0]


def _row(stripped: bool) -> dict[str, object]:
    m = {"NDCG@10": 0.05, "HR@10": 0.1}
    groups: dict[str, object] = {"warm": {"n_cases": 8, "metrics": m}, "cold": {"n_cases": 2, "metrics": m}}
    if stripped:
        groups["warm_stripped"] = {"n_cases": 7, "metrics": {"NDCG@10": 0.0412, "HR@10": 0.0871}}
    return {"model_dir": "runs/m", "n_cases": 10, "metrics": m, "groups": groups}


def test_the_table_shows_the_stripped_warm_figures_or_says_they_were_not_measured() -> None:
    new, old = ref.markdown([_row(True)]).splitlines()[-1], ref.markdown([_row(False)]).splitlines()[-1]
    assert new.endswith("| 7 | 0.0412 | 0.0871 |")
    assert "not measured" in old
    header = ref.markdown([_row(True)]).splitlines()[4]
    assert header.count("|") == new.count("|") == old.count("|"), "every row has the header's columns"


def test_the_gap_is_the_cold_runs_warm_ndcg_relative_to_each_reference() -> None:
    result = {
        "name": "cold",
        "evaluations": {"full": {"groups": {"warm": {"n_cases": 8, "metrics": {"NDCG@10": 0.048}}}}},
    }
    cold_run = ref.cold_run_summary(result)
    with_stripped, without = _row(True), _row(False)
    without["model_dir"] = "runs/old"
    g = ref.gaps(cold_run, [with_stripped, without])
    # 0.048 / 0.05 - 1 = -4%; against the stripped reference 0.048 / 0.0412 - 1 = +16.5%
    assert abs(g[0]["gap_full"] - -0.04) < 1e-12
    assert abs(g[0]["gap_stripped"] - (0.048 / 0.0412 - 1)) < 1e-12
    assert g[1]["gap_stripped"] is None
    table = ref.gaps_markdown(g).splitlines()
    assert table[-2].endswith("| 0.0500 | -4.0% | 0.0412 | +16.5% |")
    assert "not measured" in table[-1] and table[-1].count("|") == table[-2].count("|")


def test_a_new_measurement_replaces_the_row_of_the_same_model_name_and_keeps_the_others() -> None:
    old = [{"model_dir": "runs/a", "v": 1}, {"model_dir": "elsewhere/b", "v": 1}]
    new = [{"model_dir": "runs/b", "v": 2}, {"model_dir": "runs/c", "v": 2}]
    assert ref.merged(old, new) == [{"model_dir": "runs/a", "v": 1}, *new]


def test_full_history_gaps_set_each_cold_model_against_each_reference() -> None:
    m = {"NDCG@10": 0.045, "HR@10": 0.09}
    cold_model = {
        "model_dir": "runs/cold",
        "groups": {
            "warm": {"n_cases": 8, "metrics": m},
            "cold": {"n_cases": 2, "metrics": {"NDCG@10": 0.02}},
        },
    }
    g = ref.full_gaps([cold_model], [_row(True), _row(False)])
    assert len(g) == 2 and abs(g[0]["gap"] - (0.045 / 0.05 - 1)) < 1e-12  # -10%
    lines = ref.full_gaps_markdown(g).splitlines()
    assert lines[-1] == "| cold | m | 8 | 0.0450 | 0.0500 | -10.0% | 0.0200 |"
    assert lines[-3].count("|") == lines[-1].count("|")  # the header's columns
    assert ref.full_gaps_markdown([]) == ""
