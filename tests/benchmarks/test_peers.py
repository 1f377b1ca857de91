"""benchmarks/peers.py scores the peer libraries' models itself; its rule must stay attnrec's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from bench_scripts import load

from attnrec.data.schema import Sequences
from attnrec.evaluation.candidates import full_ranks
from attnrec.evaluation.metrics import ranking_metrics

peers = load("peers")
common = load("peer_common")


def test_peer_ranking_rule_is_attnrecs() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        b, n = 9, 25
        scores = torch.as_tensor(rng.integers(0, 5, (b, n + 1)).astype(np.float32))  # many ties
        hists = [list(rng.choice(np.arange(1, n + 1), rng.integers(0, 8), replace=False)) for _ in range(b)]
        targets = torch.as_tensor(rng.integers(1, n + 1, b))
        ref = full_ranks(scores.clone(), Sequences.from_lists(hists, n), targets, True).numpy()
        rows = torch.as_tensor(np.repeat(np.arange(b), [len(h) for h in hists]), dtype=torch.long)
        cols = torch.as_tensor(
            np.concatenate([np.asarray(h, dtype=np.int64) for h in hists]), dtype=torch.long
        )
        got = common.full_ranks(scores.clone(), targets, rows, cols, [0]).numpy()
        np.testing.assert_array_equal(got, ref)
        want = ranking_metrics(ref, (10,))
        have = common.ranking_metrics(got)
        assert abs(have["NDCG@10"] - want["NDCG@10"]) < 1e-12 and abs(have["HR@10"] - want["HR@10"]) < 1e-12


def test_unknown_target_is_a_miss() -> None:
    scores = torch.zeros(2, 6)
    ranks = common.full_ranks(scores, torch.tensor([-1, 3]), torch.tensor([1]), torch.tensor([2]), [0])
    assert ranks[0] == torch.iinfo(torch.int64).max and common.ranking_metrics(ranks.numpy())["HR@10"] == 0.5


def _result(
    epoch_seconds: list[float], partial: dict[str, float] | None, cap: float, reach: float | None
) -> dict:
    evals = [{"epoch": 1, "at_seconds": 50.0, "NDCG@10": 0.1}]
    if reach is not None:
        evals.append({"epoch": 2, "at_seconds": reach, "NDCG@10": 0.181})
    return {
        "epoch_seconds": epoch_seconds,
        "partial_epoch": partial,
        "batches_per_epoch": 100,
        "time_cap": cap,
        "epochs": len(epoch_seconds),
        "best_epoch": 1.5 if partial else 2,
        "evals": evals,
        "fit_seconds": 100.0,
        "test_eval_seconds": 5.0,
        "peak_rss_mb": 1000.0,
        "test": {"NDCG@10": 0.1, "HR@10": 0.2},
    }


def test_time_capped_peer_without_a_whole_epoch_gets_an_estimated_epoch_time() -> None:
    slow = peers.summarise("recbole", _result([], {"seconds": 30.0, "batches": 10}, 30.0, None))
    assert slow["seconds_per_epoch_estimated"] and slow["seconds_per_epoch"] == 300.0  # 3 s a batch x 100
    fast = peers.summarise("attnrec", _result([20.0, 22.0], None, 30.0, 41.0))
    del fast["time_cap"]  # a result written before attnrec's worker reported its cap
    fast["settings"] = {"time_cap": 30.0}
    assert not fast["seconds_per_epoch_estimated"] and fast["seconds_per_epoch"] == 21.0
    assert fast["seconds_to_valid_ndcg_0.18"] == 41.0 and slow["seconds_to_valid_ndcg_0.18"] is None
    md = peers.markdown({"libraries": {"recbole": slow, "attnrec": fast}})
    row = next(line for line in md.splitlines() if line.startswith("| recbole"))
    assert "300.0 (est.)" in row and "0 + 10/100 batches (1.50)" in row and "not within the 30 s cap" in row
    assert "Time cap" in md and "has run 30 s (the peers" in md
    assert "## How the run went" not in md


def test_notes_file_is_rendered_under_the_table(tmp_path: Path) -> None:
    res = {"libraries": {"attnrec": peers.summarise("attnrec", _result([20.0], None, 0.0, None))}}
    notes = tmp_path / "notes.md"
    notes.write_text("Pinned to CPU 0 while another job ran on CPU 1.\n")
    (tmp_path / "peers.json").write_text(json.dumps(res))
    peers.main(["--table", "--out", str(tmp_path / "peers.json"), "--notes", str(notes)])
    md = (tmp_path / "peers.md").read_text()
    assert md.index("| attnrec") < md.index("## How the run went") < md.index("Pinned to CPU 0")
