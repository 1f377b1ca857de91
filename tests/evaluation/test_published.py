"""Published figures are only put beside ours for the same data file, split and protocol."""

from __future__ import annotations

import pytest

from attnrec.evaluation.protocol import FULL, PAPER_BERT4REC, PAPER_SASREC, Protocol
from attnrec.evaluation.published import (
    BEAUTY_SHA256,
    BERT4REC_TABLE2,
    LABELS,
    ML_1M_SHA256,
    SPORTS_SHA256,
    TOYS_SHA256,
    best_full_ranking,
    full_ranking_figures,
    published_metrics,
    published_table,
)
from attnrec.models.registry import list_models


def test_table2_values_as_published() -> None:
    ml = BERT4REC_TABLE2.results["ml-1m"]
    assert (
        ml["POP"]["HR@10"] == 0.1358 and ml["BERT4Rec"]["MRR"] == 0.4254 and ml["Caser"]["NDCG@5"] == 0.3832
    )
    beauty = BERT4REC_TABLE2.results["beauty"]
    assert beauty["GRU4Rec+"]["HR@1"] == 0.0551 and beauty["BPR-MF"]["NDCG@10"] == 0.1064
    for rows in BERT4REC_TABLE2.results.values():
        assert len(rows) == 9 and all(len(m) == 6 for m in rows.values())
        for m in rows.values():  # HR is monotone in k, NDCG below HR
            assert m["HR@1"] <= m["HR@5"] <= m["HR@10"] and m["NDCG@10"] <= m["HR@10"]


@pytest.mark.parametrize("sha", [ML_1M_SHA256, BEAUTY_SHA256])
def test_only_the_papers_protocol_and_file_match(sha: str) -> None:
    assert published_table(sha, PAPER_BERT4REC) is BERT4REC_TABLE2
    assert published_metrics("fpmc", sha, PAPER_BERT4REC) is not None
    for other in (
        FULL,
        Protocol("sampled", n_negatives=50, sampler="popularity"),
        Protocol("sampled", n_negatives=100, sampler="uniform"),
    ):
        assert published_metrics("fpmc", sha, other) is None
    assert published_metrics("fpmc", sha, PAPER_BERT4REC, split="temporal") is None
    # A validation sample changes what is trained on, not the test cases: still the paper's protocol.
    assert published_metrics("fpmc", sha, PAPER_BERT4REC, split="leave-one-out (valid_users=2048, seed=0)")
    assert published_metrics("fpmc", sha, PAPER_BERT4REC, split="temporal (valid_cutoff=1.0)") is None
    assert published_metrics("fpmc", "0" * 64, PAPER_BERT4REC) is None
    assert published_metrics("transrec", sha, PAPER_BERT4REC) is None  # not in the table


def test_sasrec_paper_row_is_uniform_sampling_on_ml1m_only() -> None:
    assert published_metrics("sasrec", ML_1M_SHA256, PAPER_SASREC) == {"HR@10": 0.8245, "NDCG@10": 0.5905}
    assert published_metrics("sasrec", BEAUTY_SHA256, PAPER_SASREC) is None
    assert published_metrics("bprmf", ML_1M_SHA256, PAPER_SASREC) is None


def test_every_sequential_model_has_a_label() -> None:
    assert set(list_models("sequential")) <= set(LABELS)


def test_full_ranking_figures_belong_to_their_file_and_model() -> None:
    ml = full_ranking_figures(ML_1M_SHA256)
    assert len(ml) == 8 and {f.dataset for f in ml} == {"ml-1m"}
    assert [f.ndcg10 for f in full_ranking_figures(ML_1M_SHA256, "gsasrec")] == [0.1726]
    toys = full_ranking_figures(TOYS_SHA256)
    assert [(f.model, f.ndcg10) for f in toys] == [("sasrec", 0.0374), ("sasrec", 0.058), ("esasrec", 0.0538)]
    assert [f.hr10 for f in full_ranking_figures(SPORTS_SHA256, "esasrec")] == [0.056]
    assert [f.hr10 for f in full_ranking_figures(BEAUTY_SHA256, "bert4rec")] == [0.0338, 0.0434]
    assert full_ranking_figures("0" * 64) == []  # another file: nothing is comparable


def test_best_full_ranking_is_the_highest_ndcg_of_that_model() -> None:
    best = best_full_ranking("sasrec", ML_1M_SHA256)
    assert best is not None and (best.hr10, best.ndcg10) == (0.3159, 0.1857)  # SASRec+ sampled CE
    beauty = best_full_ranking("bert4rec", BEAUTY_SHA256)
    assert beauty is not None and (beauty.hr10, beauty.ndcg10) == (0.0434, 0.0242)
    assert best_full_ranking("gru4rec", BEAUTY_SHA256) is None
    assert best_full_ranking("bert4rec", "0" * 64) is None
