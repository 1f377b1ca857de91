import math

import numpy as np
import pytest

from attnrec.evaluation.metrics import hit_rate, mrr, ndcg, ranking_metrics


def test_hand_computed_values() -> None:
    ranks = np.array([0, 1, 4, 9, 50])
    assert hit_rate(ranks, 1) == pytest.approx(1 / 5)
    assert hit_rate(ranks, 5) == pytest.approx(3 / 5)
    assert hit_rate(ranks, 10) == pytest.approx(4 / 5)
    expected_ndcg10 = (1 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(6) + 1 / math.log2(11)) / 5
    assert ndcg(ranks, 10) == pytest.approx(expected_ndcg10)
    assert ndcg(ranks, 5) == pytest.approx((1 + 1 / math.log2(3) + 1 / math.log2(6)) / 5)
    assert mrr(ranks) == pytest.approx((1 + 1 / 2 + 1 / 5 + 1 / 10 + 1 / 51) / 5)
    assert mrr(ranks, 5) == pytest.approx((1 + 1 / 2 + 1 / 5) / 5)


def test_ranking_metrics_keys_and_ndcg1_omitted() -> None:
    m = ranking_metrics(np.array([0, 3]), (1, 5, 10))
    assert list(m) == ["HR@1", "HR@5", "HR@10", "NDCG@5", "NDCG@10", "MRR"]
    assert m["HR@1"] == 0.5


def test_empty_is_nan() -> None:
    assert math.isnan(hit_rate(np.array([]), 10))
    assert math.isnan(ndcg(np.array([]), 10))
