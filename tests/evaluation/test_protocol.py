import numpy as np
import pytest
import torch

from attnrec.data.schema import DataError, DataSource, Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.candidates import sample_negatives
from attnrec.evaluation.protocol import Protocol, evaluate


def _cases(histories: list[list[int]], targets: list[int], n_items: int) -> EvalSet:
    return EvalSet(np.arange(len(targets)), Sequences.from_lists(histories, n_items), np.array(targets))


def _fixed_scorer(table: np.ndarray):
    def score(users: np.ndarray, hist: Sequences, request_time: np.ndarray | None = None) -> torch.Tensor:
        return torch.as_tensor(table[users], dtype=torch.float32).clone()

    return score


def test_full_ranking_hand_computed_with_history_excluded() -> None:
    # 5 items; scores for items 1..5 (column 0 is padding).
    table = np.array([[0, 0.9, 0.8, 0.7, 0.6, 0.5]])
    cases = _cases([[1]], [3], 5)
    res = evaluate(_fixed_scorer(table), cases, Protocol(ks=(1, 2, 3)))
    # Item 1 is history, so only item 2 beats the target: rank 1.
    assert res.metrics["HR@1"] == 0 and res.metrics["HR@2"] == 1
    assert res.metrics["MRR"] == pytest.approx(0.5)
    kept = evaluate(_fixed_scorer(table), cases, Protocol(ks=(1, 2, 3), exclude_seen=False))
    assert kept.metrics["MRR"] == pytest.approx(1 / 3)


def test_ties_count_against_the_model() -> None:
    table = np.ones((1, 6))
    res = evaluate(_fixed_scorer(table), _cases([[1]], [3], 5), Protocol(ks=(1, 5)))
    assert res.metrics["HR@1"] == 0.0
    assert res.metrics["MRR"] == pytest.approx(1 / 4)  # 3 other candidates tie with the target


def test_target_repeating_a_history_item_stays_a_candidate() -> None:
    table = np.array([[0, 0.1, 0.9, 0.2, 0.3, 0.4]])
    res = evaluate(_fixed_scorer(table), _cases([[2, 1]], [2], 5), Protocol(ks=(1,)))
    assert res.metrics["HR@1"] == 1.0


def test_sampled_negatives_are_distinct_unseen_and_seeded() -> None:
    rng = np.random.default_rng(0)
    n_items = 300
    hist = [list(rng.choice(np.arange(1, n_items + 1), 50, replace=False)) for _ in range(40)]
    targets = [int(np.setdiff1d(np.arange(1, n_items + 1), h)[0]) for h in hist]
    cases = _cases(hist, targets, n_items)
    w = np.ones(n_items + 1)
    neg = sample_negatives(cases, 100, w, seed=7)
    for r in range(len(cases)):
        row = neg[r]
        assert len(set(row)) == 100 and 0 not in row
        assert not set(row) & set(hist[r]) and targets[r] not in row
    assert np.array_equal(neg, sample_negatives(cases, 100, w, seed=7))
    assert not np.array_equal(neg, sample_negatives(cases, 100, w, seed=8))


def test_popularity_sampler_prefers_popular_items() -> None:
    n_items = 200
    cases = _cases([[1]] * 300, [2] * 300, n_items)
    pop = np.zeros(n_items + 1)
    pop[1:] = np.arange(n_items, 0, -1) ** 2  # item 3 far more popular than item 200
    neg = sample_negatives(cases, 20, pop, seed=0)
    counts = np.bincount(neg.ravel(), minlength=n_items + 1)
    assert counts[3:13].sum() > 10 * counts[-10:].sum()


def test_small_catalog_pads_and_ranks_against_what_exists() -> None:
    table = np.array([[0, 0.5, 0.1, 0.9, 0.2]])
    cases = _cases([[1]], [2], 4)  # allowed negatives: items 3 and 4 only
    res = evaluate(_fixed_scorer(table), cases, Protocol(candidates="sampled", n_negatives=100, ks=(1, 2, 3)))
    assert res.metrics["MRR"] == pytest.approx(1 / 3)  # items 3 and 4 both beat the target


def test_candidate_scorer_gives_the_full_scorers_ranks() -> None:
    # Coarse scores make ties common; a tiny catalog case pads its negatives with -1.
    rng = np.random.default_rng(3)
    n_items = 60
    table = rng.integers(0, 5, size=(30, n_items + 1)).astype(np.float64)
    hist = [list(rng.choice(np.arange(1, n_items + 1), 8, replace=False)) for _ in range(29)]
    hist.append(list(range(1, n_items - 2)))  # 3 items left: target + 2 negatives
    targets = [int(np.setdiff1d(np.arange(1, n_items + 1), h)[0]) for h in hist]
    cases = _cases(hist, targets, n_items)
    seen: list[torch.Tensor] = []

    def candidates(
        users: np.ndarray, h: Sequences, items: torch.Tensor, request_time: np.ndarray | None = None
    ) -> torch.Tensor:
        seen.append(items)
        return torch.as_tensor(table[users], dtype=torch.float32).gather(1, items)

    for sampler in ("uniform", "popularity"):
        proto = Protocol(candidates="sampled", sampler=sampler, n_negatives=20, ks=(1, 5, 10))
        pop = np.arange(n_items + 1, dtype=np.float64)
        full = evaluate(_fixed_scorer(table), cases, proto, popularity=pop, batch_size=7)
        cand = evaluate(
            _fixed_scorer(table), cases, proto, popularity=pop, batch_size=7, candidate_scorer=candidates
        )
        assert cand.metrics == full.metrics
        assert 0 < full.metrics["MRR"] < 1
    assert all(items.shape[1] == 21 for items in seen)  # the target and 20 negatives, never the catalog
    assert seen[0][:, 0].tolist() == targets[:7]


def test_result_records_protocol_and_data() -> None:
    table = np.random.default_rng(0).random((3, 11))
    src = DataSource("x", "/p", "pairs", "ab" * 32)
    res = evaluate(
        _fixed_scorer(table),
        _cases([[1], [2], [3]], [4, 5, 6], 10),
        Protocol(candidates="sampled", sampler="popularity", n_negatives=3, seed=5),
        popularity=np.arange(11),
        data=src,
        split="leave-one-out",
        target="test",
    )
    d = res.to_dict()
    assert d["protocol"]["sampler"] == "popularity" and d["protocol"]["seed"] == 5
    assert d["data"]["sha256"] == "ab" * 32 and d["n_cases"] == 3
    assert "3 popularity-sampled negatives" in res.describe()


def test_bad_protocols_and_empty_cases() -> None:
    with pytest.raises(ValueError, match="candidates must be 'full' or 'sampled'"):
        Protocol(candidates="some")
    with pytest.raises(ValueError, match="needs item popularity counts"):
        evaluate(
            _fixed_scorer(np.ones((1, 3))),
            _cases([[1]], [2], 2),
            Protocol(candidates="sampled", sampler="popularity"),
        )
    with pytest.raises(DataError, match="no test cases"):
        evaluate(_fixed_scorer(np.ones((1, 3))), _cases([], [], 2), Protocol())


def test_batch_bounds_hold_at_most_the_positions_and_rows_asked_for() -> None:
    from attnrec.evaluation.case_scoring import WINDOW, batch_bounds

    # widths 2,2,3,5,5 with 10 positions: [2,2,3] would be 3 x 3 = 9 <= 10, [.., 5] 4 x 5 > 10
    assert batch_bounds(np.array([2, 2, 3, 5, 5]), 8, 10) == [(0, 3), (3, 5)]
    assert batch_bounds(np.array([2, 2, 3, 5, 5]), 2, 10) == [(0, 2), (2, 4), (4, 5)]  # rows capped
    assert batch_bounds(np.array([50]), 8, 10) == [(0, 1)]  # a history longer than the budget: alone
    # histories count at most WINDOW positions: two of 10 x WINDOW still share a batch
    assert batch_bounds(np.array([10 * WINDOW, 10 * WINDOW]), 8, 2 * WINDOW) == [(0, 2)]
    with pytest.raises(ValueError, match="positive"):
        batch_bounds(np.array([1]), 0, 10)


def test_metrics_do_not_depend_on_how_cases_are_batched() -> None:
    rng = np.random.default_rng(1)
    table = rng.random((40, 31))
    hist = [list(rng.choice(np.arange(1, 31), int(rng.integers(1, 12)), replace=False)) for _ in range(40)]
    targets = [int(np.setdiff1d(np.arange(1, 31), h)[0]) for h in hist]
    cases = _cases(hist, targets, 30)
    one = evaluate(_fixed_scorer(table), cases, Protocol(ks=(1, 5, 10)), batch_size=1)
    for size, positions in ((256, 16384), (7, 20), (3, 1)):
        res = evaluate(
            _fixed_scorer(table), cases, Protocol(ks=(1, 5, 10)), batch_size=size, batch_positions=positions
        )
        assert res.metrics == one.metrics
