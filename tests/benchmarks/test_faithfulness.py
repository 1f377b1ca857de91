"""The faithfulness benchmark (benchmarks/faithfulness.py): its curves, AUCs and orders on hand-computed
cases, and a tiny end-to-end run (occlusion's top-1 deletion is the largest single-event drop, methods a
model cannot support are n/a with the reason, cells resume from the state directory)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bench_scripts import BENCHMARKS, load

from attnrec.data.demo import make_demo
from attnrec.recommend import Recommender

faith = load("faithfulness")
report = load("faithfulness_report")


def test_auc_of_known_curves() -> None:
    assert faith.auc([0, 1, 2], [1.0, 0.5, 0.0]) == pytest.approx(0.5)  # (0.75 + 0.25) / 2
    # deletion: f(0) = 1 prepended; 0.5 flat from m = 1: (0.75 + 9 * 0.5) / 10
    assert faith.deletion_auc([1, 2, 3, 5, 10], [0.5] * 5) == pytest.approx(0.525)
    # uneven steps weigh by their width: 1 at m=1..5, then 0 at m=10 -> (1 + 4 + 2.5) / 10
    assert faith.deletion_auc([1, 5, 10], [1.0, 1.0, 0.0]) == pytest.approx(0.75)
    assert faith.auc([1, 2, 3, 5, 10], [1.0] * 5) == pytest.approx(1.0), "insertion: mean height"


def test_curve_steps_are_shares_of_the_window_or_counts() -> None:
    assert faith.counts([0.05, 0.1, 0.5], 200) == [10, 20, 100]
    assert faith.counts([0.05, 0.1, 0.5], 6) == [1, 1, 3], "ceil, at least one event"
    assert faith.counts([1, 3, 10], 200) == [1, 3, 10], "integers are counts"


def test_deletion_and_insertion_follow_the_ranking() -> None:
    history = np.array([10, 11, 12, 13, 14, 15])
    order = np.array([4, 1, 5, 0, 2, 3])  # positions, most important first
    dele = faith.deletion_histories(history, order, [1, 2, 3, 10])
    assert [d.tolist() for d in dele] == [[10, 11, 12, 13, 15], [10, 12, 13, 15], [10, 12, 13], [13]], (
        "m = 10 is capped at W - 1 = 5: one event stays"
    )
    ins = faith.insertion_histories(history, order, [1, 2, 3, 10])
    assert [i.tolist() for i in ins] == [[14], [11, 14], [11, 14, 15], history.tolist()], (
        "chronological order kept"
    )


def test_deletion_in_a_window_keeps_the_older_events() -> None:
    history = np.array([10, 11, 12, 13, 14, 15])
    order = np.array([5, 3, 2, 4])  # a window of the 4 newest events
    assert faith.deletion_histories(history, order, [2, 5])[1].tolist() == [10, 11, 14], "capped at W - 1 = 3"
    assert faith.insertion_histories(history, order, [5])[0].tolist() == [12, 13, 14, 15], "only the window"


def test_baseline_orders() -> None:
    events = np.arange(3, 13)
    a = faith.random_order(events, np.random.default_rng([0, 7, 0]))
    assert a.tolist() == faith.random_order(events, np.random.default_rng([0, 7, 0])).tolist(), "seeded"
    assert sorted(a.tolist()) == events.tolist(), "a permutation of the window"
    assert a.tolist() != faith.random_order(events, np.random.default_rng([0, 8, 0])).tolist()
    assert faith.recency_order(np.array([5, 3, 4])).tolist() == [5, 4, 3], "newest first"


def test_normalisation_rank_and_intervals() -> None:
    assert faith.normalised(np.array([3.0, 1.0, 2.0]), 3.0, 1.0).tolist() == [1.0, 0.0, 0.5]
    scores = np.array([9.0, 5.0, 7.0, 7.0, 8.0])  # item 0 is padding, excluded from the candidates
    cand = np.array([False, True, True, True, False])  # item 4 is in the history
    assert faith.rank_of(scores, 2, cand) == 1, "a tie is not above, padding and history do not count"
    assert faith.rank_of(scores, 1, cand) == 3
    s = faith.bootstrap(np.array([1.0, 2.0, 3.0, 4.0]), np.random.default_rng(0), 500)
    assert (
        s["mean"] == 2.5
        and s["lo"] < 2.5 < s["hi"]
        and s["se"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    )
    assert s == faith.bootstrap(np.array([1.0, 2.0, 3.0, 4.0]), np.random.default_rng(0), 500)
    assert report.clearly_below({"lo": 0.1, "hi": 0.2}, {"lo": 0.3, "hi": 0.4})
    assert not report.clearly_below({"lo": 0.1, "hi": 0.35}, {"lo": 0.3, "hi": 0.4}), "overlap is not clear"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("faith")
    data = make_demo(n_users=60, n_items=40, seed=1)
    for name, cfg in [
        ("sasrec", {"hidden": 16, "n_layers": 1, "n_heads": 1, "max_len": 12}),
        ("gru4rec", {}),
    ]:
        rec = Recommender(
            name, cfg, {"max_epochs": 1, "batch_size": 64, "threads": 1, "seed": 0, "device": "cpu"}
        )
        rec.fit(data, progress=False).save(d / name)
    (d / "config.toml").write_text(
        "[protocol]\nusers = 4\nsteps = 4\nbootstrap = 50\n"
        + "".join(
            f'[[models]]\ndata = "demo"\nmodel = "{m}"\npath = "{d / m}"\n' for m in ("sasrec", "gru4rec")
        )
    )
    return d


def test_end_to_end(saved: Path) -> None:
    p, models = faith.read_config(saved / "config.toml", quick=False)
    rec = faith.load(models[0]["path"], "cpu")
    for user in faith.sample_users(rec.histories_, 4, 5, 0):
        r = faith.evaluate_user(rec, user, p, {})
        occ = r["methods"]["occlusion"]["raw_drop"][0][0]  # exactly occlusion's top event removed
        for method, m in r["methods"].items():
            assert occ >= m["raw_drop"][0][0] - 1e-5, (
                f"{method} found a larger single-event drop than occlusion"
            )
        assert r["methods"]["greedy"]["raw_drop"][0][0] == pytest.approx(occ, abs=1e-6), (
            "greedy's round 1 is occlusion"
        )
    res = faith.run(saved / "config.toml")
    cells = {c["model"]: c for c in res["cells"]}
    sas, gru = cells["sasrec"]["methods"], cells["gru4rec"]["methods"]
    assert all(sas[m]["status"] == "ok" for m in [*faith.METHODS, "random", "recency"])
    assert sas["occlusion"]["users"] == 4 and len(sas["occlusion"]["deletion_curve"]) == 5
    assert gru["attention"]["status"] == "n/a" and "attention" in gru["attention"]["reason"]
    assert gru["integrated_gradients"]["status"] == "n/a" and gru["occlusion"]["status"] == "ok"
    again = json.loads(json.dumps(res))  # the table comes from the JSON alone
    text = report.markdown(again)
    assert "n/a: " in text and "greedy (default) is" in text and "| gru4rec | occlusion |" in text


def test_cells_stop_on_the_budget_and_resume(
    saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p, models = faith.read_config(saved / "config.toml", quick=False)
    cut = faith.run_cell(models[0], p, tmp_path, 0.0, "cpu")  # deadline in the past: stops before any user
    assert cut["users"] == 0 and not cut["complete"]
    full = faith.run_cell(models[0], p, tmp_path, float("inf"), "cpu")
    assert full["users"] == 4 and full["complete"]

    def fail(*a: object) -> None:
        raise AssertionError("a finished user was evaluated again")

    monkeypatch.setattr(faith, "evaluate_user", fail)
    assert faith.run_cell(models[0], p, tmp_path, float("inf"), "cpu") == full


def test_committed_table_rerenders_from_its_json() -> None:
    results = BENCHMARKS / "results"
    if not (results / "faithfulness.json").exists():
        pytest.skip("the faithfulness results are not committed yet")
    res = json.loads((results / "faithfulness.json").read_text())
    assert report.markdown(res) == (results / "faithfulness.md").read_text()
