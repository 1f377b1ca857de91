"""List-level metrics: coverage, novelty, intra-list diversity and ARP, each checked against a hand count."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnrec.data.features import AlignedFeatures
from attnrec.data.schema import Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.list_metrics import (
    SparseRows,
    average_popularity,
    coverage,
    feature_rows,
    intra_list_diversity,
    list_metrics,
    novelty,
    self_information,
)
from attnrec.evaluation.protocol import Protocol, evaluate

LISTS = np.array([[1, 2, 3], [1, 4, 0]])  # the second list has one empty slot (a small catalog)
COUNTS = np.array([0, 5, 2, 1, 0])  # training interactions of items 1..4 (C = 8, I = 4)


def test_coverage_is_the_share_of_the_catalog_recommended_to_anyone() -> None:
    assert coverage(LISTS, n_items=4) == pytest.approx(4 / 4)
    assert coverage(LISTS[:, :1], n_items=4) == pytest.approx(1 / 4)  # item 1 only
    assert coverage(LISTS, n_items=8) == pytest.approx(4 / 8)


def test_novelty_is_the_mean_self_information_with_add_one_smoothing() -> None:
    # p(i) = (c_i + 1) / (8 + 4): 6/12, 3/12, 2/12, 1/12
    assert self_information(COUNTS)[1:] == pytest.approx([1.0, 2.0, math.log2(6), math.log2(12)])
    first = (1 + 2 + math.log2(6)) / 3
    second = (1 + math.log2(12)) / 2  # the empty slot counts for nothing
    assert novelty(LISTS, COUNTS) == pytest.approx((first + second) / 2)


def test_arp_is_the_mean_training_popularity_per_list() -> None:
    assert average_popularity(LISTS, COUNTS) == pytest.approx(((5 + 2 + 1) / 3 + (5 + 0) / 2) / 2)


def test_intra_list_diversity_is_the_mean_pairwise_cosine_distance() -> None:
    v = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [0, 0]], dtype=np.float64)  # item 4 has no vector
    # list 1: pairs (1,2) cos 0, (1,3) cos 1/sqrt2, (2,3) cos 1/sqrt2 -> mean distance 1 - sqrt2/3
    # list 2: the pair (1,4): a zero vector is orthogonal to all -> distance 1
    expected = ((1 - math.sqrt(2) / 3) + 1) / 2
    assert intra_list_diversity(LISTS, v) == pytest.approx(expected)
    # the same vectors as sparse rows give the same value
    sparse = SparseRows(np.array([0, 0, 1, 2, 4, 4]), np.array([0, 1, 0, 1]), np.array([1.0, 1, 1, 1]))
    assert intra_list_diversity(LISTS, sparse) == pytest.approx(expected)
    # scale does not matter (cosine); a list of one item has no pair and is left out
    assert intra_list_diversity(LISTS, 3 * v) == pytest.approx(expected)
    assert math.isnan(intra_list_diversity(LISTS[:, :1], v))


def test_feature_rows_one_hot_categorical_and_multi_values_and_keep_numbers() -> None:
    aligned = AlignedFeatures(
        n_rows=4,
        kinds={"genre": "categorical", "tags": "multi", "year": "numeric"},
        categorical={"genre": np.array([0, 1, 2, 1])},
        multi={"tags": np.array([[0, 0], [1, 2], [2, 0], [0, 0]])},
        numeric={"year": np.array([0.0, 0.5, 0.0, -1.0], dtype=np.float32)},
        present={"year": np.array([False, True, False, True])},
        vocab_sizes={"genre": 2, "tags": 2},
        missing_ids=(),
        extra_ids=(),
        truncated={},
    )
    rows = feature_rows(aligned)
    dense = np.zeros((4, 7))
    for r in range(4):
        s = slice(rows.offsets[r], rows.offsets[r + 1])
        dense[r, rows.columns[s]] = rows.values[s]
    # columns: genre 1..2 at 1..2, tags 1..2 at 4..5, year at 6
    assert dense.tolist() == [
        [0, 0, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 1, 1, 0.5],
        [0, 0, 1, 0, 0, 1, 0],
        [0, 1, 0, 0, 0, 0, -1],
    ]


def test_list_metrics_at_each_cut_off_and_what_they_need() -> None:
    m, se = list_metrics(
        LISTS, (1, 2), ("Coverage", "ARP", "Diversity"), n_items=4, counts=COUNTS, vectors=np.eye(5)
    )
    assert list(m) == ["Coverage@1", "Coverage@2", "Diversity@2", "ARP@1", "ARP@2"]
    assert m["Coverage@2"] == pytest.approx(3 / 4) and m["ARP@1"] == pytest.approx(5.0)
    assert "Coverage@2" not in se and se["ARP@2"] == pytest.approx(
        abs(3.5 - 2.5) / math.sqrt(2) / math.sqrt(2)
    )
    with pytest.raises(ValueError, match="Novelty needs the items' training interaction counts"):
        list_metrics(LISTS, (1,), ("Novelty",), n_items=4)
    with pytest.raises(ValueError, match="Diversity needs item vectors"):
        list_metrics(LISTS, (2,), ("Diversity",), n_items=4)


def test_evaluate_reports_list_metrics_of_what_the_user_is_shown() -> None:
    # two users; item scores 4 > 3 > 2 > 1 for items 1..4; user 0 has seen item 1
    cases = EvalSet(np.array([0, 1]), Sequences.from_lists([[1], [3]], n_items=4), np.array([2, 4]))

    def fixed(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        return torch.tensor([[-1.0, 4.0, 3.0, 2.0, 1.0]]).repeat(len(users), 1)

    res = evaluate(fixed, cases, Protocol(ks=(2,)), metrics=("HR", "Coverage", "ARP"), train_counts=COUNTS)
    # lists shown: user 0 -> 2, 3 (1 seen); user 1 -> 1, 2 (3 seen): items 1, 2, 3 of 4
    assert res.metrics["Coverage@2"] == pytest.approx(3 / 4)
    assert res.metrics["ARP@2"] == pytest.approx(((2 + 1) / 2 + (5 + 2) / 2) / 2)
    assert res.metrics["HR@2"] == pytest.approx(1 / 2)  # user 0's target 2 is first; user 1's 4 is third


def test_lists_that_do_not_fit_the_counts_or_vectors_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="item index 4, but the item counts cover items 0..2"):
        average_popularity(LISTS, COUNTS[:3])
    with pytest.raises(ValueError, match="item index 4, but the item vectors cover items 0..3"):
        intra_list_diversity(LISTS, np.eye(4))
    with pytest.raises(ValueError, match="item indices >= 0"):
        coverage(np.array([[1, -1]]), n_items=4)
