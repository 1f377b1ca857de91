"""What every trained baseline must do on the demo data: beat POP, survive save/load, filter seen
items, answer ``recommend`` as its scores say, treat an ad-hoc history sensibly, and reproduce
with its seed. Model-specific known-answer tests live in each model's own test file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
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
from attnrec.config import config_from_dict
from attnrec.models.registry import get_spec
from attnrec.training.optim import make_optimizer
from attnrec.training.train_config import TrainConfig

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


@pytest.mark.parametrize("name", ["bprmf", "ncf", "fmc", "fpmc", "transrec", "caser"])
def test_sparse_tables_give_the_dense_loss_and_gradients(name: str) -> None:
    """``sparse=True`` changes only how the ID tables' gradients are stored (and so the optimizer)."""
    data, split = demo()
    spec = get_spec(name)
    models = []
    for sparse in (False, True):
        config = config_from_dict(spec.config_cls, spec.presets["demo"]["model"] | {"sparse": sparse})
        models.append(spec.cls(config, data.n_users, data.n_items))
    dense, lazy = models
    lazy.load_state_dict(dense.state_dict())
    batch = next(dense.train_batches(split.train, 64, np.random.default_rng(0)))
    losses = []
    for model in models:
        torch.manual_seed(0)  # the same dropout masks
        losses.append(model.loss(batch))
        losses[-1].backward()
    torch.testing.assert_close(losses[0], losses[1])
    n_sparse = 0
    for (key, p_dense), p_lazy in zip(dense.named_parameters(), lazy.parameters(), strict=True):
        if p_dense.grad is None:
            assert p_lazy.grad is None, key
            continue
        n_sparse += p_lazy.grad.is_sparse
        torch.testing.assert_close(p_lazy.grad.to_dense(), p_dense.grad, msg=key)
    opt = make_optimizer(lazy, TrainConfig())
    assert n_sparse >= 2 and any(isinstance(o, torch.optim.SparseAdam) for o in getattr(opt, "parts", [opt]))


@pytest.mark.parametrize("name", ["bprmf", "fpmc"])
def test_tables_only_models_learn_with_lazy_adam(name: str) -> None:
    data, split = demo()  # no dense parameters at all: the optimizer is SparseAdam alone
    assert_beats_pop(fit(name, data, split, config={"sparse": True}))
