"""What every trained baseline must do on the demo data: beat POP, survive save/load, filter seen
items, answer ``recommend`` as its scores say, treat an ad-hoc history sensibly, and reproduce
with its seed. Model-specific known-answer tests live in each model's own test file."""

from __future__ import annotations

from pathlib import Path

import pytest
from baseline_kit import (
    adhoc_matches_user,
    assert_beats_pop,
    assert_deterministic,
    assert_fold_in_helps,
    assert_recommend_matches_scores,
    assert_save_load_identity,
    assert_seen_filtered,
    demo,
    fit,
)

from attnrec import Recommender

# Models with user factors fold an unknown user's history in; the others read only the history.
WITH_USER_FACTORS = ["bprmf", "ncf", "fpmc", "transrec", "caser"]
HISTORY_ONLY = ["fmc", "gru4rec", "gru4rec-plus"]


@pytest.fixture(scope="module", params=WITH_USER_FACTORS + HISTORY_ONLY)
def trained(request: pytest.FixtureRequest) -> Recommender:
    data, split = demo()
    return fit(request.param, data, split)


def test_beats_pop(trained: Recommender) -> None:
    assert_beats_pop(trained)


def test_save_load_seen_filtering_and_scores(trained: Recommender, tmp_path: Path) -> None:
    assert_save_load_identity(trained, tmp_path)
    assert_seen_filtered(trained)
    assert_recommend_matches_scores(trained)


def test_adhoc_history(trained: Recommender) -> None:
    if trained.name in WITH_USER_FACTORS:
        adhoc_matches_user(trained)  # a folded-in vector is close to, not equal to, the trained one
        assert_fold_in_helps(trained)
        return
    # No user IDs: an ad-hoc copy of a user's history gets exactly that user's answer.
    data, _ = demo()
    for u in (5, 77):
        history = data.items.to_external(data.sequences()[u])
        user = data.users.to_external([u])[0]
        assert trained.recommend(history=history, k=10).items == trained.recommend(user=user, k=10).items


@pytest.mark.parametrize("name", WITH_USER_FACTORS + HISTORY_ONLY)
def test_same_seed_same_scores(name: str) -> None:
    assert_deterministic(name)
