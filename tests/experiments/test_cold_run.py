"""The cold-item protocol in a run: cold/warm metrics, what ID-only and feature models do with cold items."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnrec.config import ConfigError
from attnrec.data.cold import ColdStart, cold_start
from attnrec.data.feature_files import with_features
from attnrec.data.features import FeatureTable
from attnrec.data.schema import Sequences
from attnrec.evaluation.metrics import ranking_metrics
from attnrec.evaluation.protocol import group_metrics, unscored_last
from attnrec.experiments.configured import RunConfig
from attnrec.experiments.runner import RunRequest, run_one
from attnrec.recommend import Recommender
from synthetic_logs import ring_log

FAST = {"max_epochs": 2, "batch_size": 64, "patience": 5, "threads": 1}
SMALL_SASREC = {"hidden": 16, "n_heads": 2, "n_layers": 1, "max_len": 20, "loss": "ce"}


@functools.cache
def cold() -> ColdStart:
    data = ring_log(n_users=120, n_items=30)
    ids = data.items.to_list()
    table = FeatureTable.from_frame(
        pd.DataFrame({"item_id": ids, "tags": [[f"t{int(i[1:]) % 6}"] for i in ids]}),
        "item_id",
        {"tags": "multi"},
    )
    return cold_start(with_features(data, item=table), 0.2, seed=0)


def test_group_metrics_on_a_hand_made_rank_vector() -> None:
    ranks = np.array([0, 3, 20, 1, 50])
    is_cold = np.array([True, False, True, False, False])
    g = group_metrics(ranks, {"cold": is_cold, "warm": ~is_cold}, (10,))
    assert g["cold"]["n_cases"] == 2 and g["warm"]["n_cases"] == 3
    assert g["cold"]["metrics"]["HR@10"] == 0.5  # ranks 0 and 20
    assert g["warm"]["metrics"]["HR@10"] == pytest.approx(2 / 3)  # ranks 3, 1, 50
    assert g["cold"]["metrics"]["NDCG@10"] == pytest.approx(0.5)  # (1/log2(2) + 0) / 2
    assert g["warm"]["metrics"]["NDCG@10"] == pytest.approx((1 / np.log2(5) + 1 / np.log2(3)) / 3)
    assert g["cold"]["metrics"]["MRR"] == ranking_metrics(ranks[is_cold], (10,))["MRR"]


def test_unscored_items_rank_behind_every_scored_one() -> None:
    def scorer(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        return torch.tensor([[-torch.inf, 0.1, 0.2, 0.3]])  # a model that knows items 1..3 of 5

    s = unscored_last(scorer, 5)(np.array([0]), Sequences.from_lists([[1]], 5))
    assert s.shape == (1, 6) and torch.equal(s[0, 4:], torch.full((2,), -torch.inf))


def _run(model: str, settings: dict[str, object]) -> tuple[Recommender, dict[str, object]]:
    cs = cold()
    out = run_one(RunRequest(model, None, settings, FAST | {"seed": 0}), cs.data, cs.split, cold=cs)
    assert out.cold is not None and out.published == [None]
    return out.recommender, out.results[0].to_dict() | {"cold": out.cold}


def test_an_id_only_model_cannot_rank_cold_items() -> None:
    rec, res = _run("sasrec", SMALL_SASREC)
    cs = cold()
    assert (
        rec.items_ is not None and len(rec.items_) == cs.n_warm
    )  # nothing was added: no features in its table
    groups = res["groups"]
    assert groups["cold"]["n_cases"] == cs.record.n_test_targets > 0
    assert groups["cold"]["metrics"]["HR@10"] == 0.0  # every cold target behind all warm items
    # ties count against the target: a cold target (-inf) is behind every warm item, rank >= n_warm
    assert groups["cold"]["metrics"]["MRR"] <= 1 / (cs.n_warm + 1)
    assert "scored -inf" in str(res["cold"]["scored"])  # type: ignore[index]


def test_a_feature_model_scores_cold_items_from_features_with_zero_id_vectors() -> None:
    rec, res = _run("sasrec", SMALL_SASREC | {"item_features": "sum", "id_dropout": 0.2})
    cs = cold()
    assert rec.items_ is not None and rec.items_.to_list() == cs.data.items.to_list()
    assert "added after training" in str(res["cold"]["scored"])  # type: ignore[index]
    emb = rec.core.item_emb.weight  # type: ignore[union-attr]
    assert torch.equal(emb[cs.n_warm + 1 : cs.data.n_items + 1], torch.zeros(cs.data.n_items - cs.n_warm, 16))
    users, hist = cs.split.test.users[:8], cs.split.test.histories.take(np.arange(8))
    scores = rec.score_histories(users, hist)
    assert torch.isfinite(scores[:, cs.n_warm + 1 :]).all()
    assert res["groups"]["cold"]["metrics"]["HR@10"] > 0  # type: ignore[index]


def _tag(item: str) -> str:
    return f"t{int(item[1:]) % 6}"  # the ring's item tags (see cold())


def test_changing_a_cold_items_features_changes_its_score() -> None:
    cs = cold()
    first = cs.cold_ids[0]
    scores = []
    for tag_of_first in (_tag(first), "t" + str((int(_tag(first)[1:]) + 1) % 6)):
        features = pd.DataFrame(
            {"item_id": cs.cold_ids, "tags": [[tag_of_first if i == first else _tag(i)] for i in cs.cold_ids]}
        )
        rec = Recommender("sasrec", SMALL_SASREC | {"item_features": "sum"}, FAST | {"seed": 0})
        rec.fit(cs.warm, cs.split, progress=False)
        rec.add_items(features)
        scores.append(
            rec.score_histories(cs.split.test.users[:4], cs.split.test.histories.take(np.arange(4)))
        )
    col = cs.n_warm + 1  # the first cold item
    assert not torch.allclose(scores[0][:, col], scores[1][:, col])
    assert torch.allclose(scores[0][:, col + 1 :], scores[1][:, col + 1 :])  # the other cold items: unchanged


def test_the_content_baseline_ranks_cold_targets() -> None:
    _, res = _run("content", {"halflife": 2.0})
    assert res["groups"]["cold"]["metrics"]["HR@10"] > 0  # type: ignore[index]


def test_run_config_reads_and_checks_the_protocol_settings(tmp_path: Path) -> None:
    path = tmp_path / "cold.toml"
    path.write_text('[run]\ndata = "amazon-toys"\nmodel = "content"\ncold_items = 0.1\ncold_seed = 3\n')
    cfg = RunConfig.from_toml(path)
    assert (cfg.cold_items, cfg.cold_seed) == (0.1, 3)
    with pytest.raises(ConfigError, match="cold_items needs the leave-one-out split"):
        dataclasses.replace(cfg, protocols=("sampled-uniform",))
    with pytest.raises(ConfigError, match="cold_items must be a share"):
        dataclasses.replace(cfg, cold_items=1.5)
