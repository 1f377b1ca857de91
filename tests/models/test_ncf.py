"""NCF (NeuMF): towers, chunked scoring, sampled log loss; beats POP, folds unknown users in, persists
exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from baseline_kit import (
    demo,
)

from attnrec import Recommender
from attnrec.config import ConfigError
from attnrec.models import ncf
from attnrec.models.ncf import NCF, NCFConfig


def test_chunked_full_scores_equal_pairwise_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    data, split = demo()
    torch.manual_seed(0)
    model = NCF(NCFConfig(gmf_dim=4, mlp_layers=(8, 6, 4)), data.n_users, data.n_items).eval()
    users = np.array([0, 3, 7])
    batch = model.score_inputs(users, split.test.histories.take(users))
    monkeypatch.setattr(ncf, "CHUNK_ELEMENTS", 1000)  # many small item chunks
    with torch.no_grad():
        full = model.score(batch)  # (3, I+1)
        u = torch.as_tensor(users)
        items = torch.arange(1, data.n_items + 1).expand(3, -1)
        pair = model._logits(model.user_gmf(u), model.user_mlp(u), items)  # (3, I)
    assert full.shape == (3, data.n_items + 1) and torch.isneginf(full[:, 0]).all()
    torch.testing.assert_close(full[:, 1:], pair)


def test_batches_have_one_positive_then_unseen_negatives() -> None:
    data, split = demo()
    model = NCF(NCFConfig(n_negatives=3), data.n_users, data.n_items)
    batch = next(model.train_batches(split.train, 100, np.random.default_rng(0)))
    assert batch["items"].shape[1] == 4
    for u, row in zip(batch["user"].tolist(), batch["items"].tolist(), strict=True):
        history = set(split.train[u].tolist())
        assert row[0] in history and not history & set(row[1:])
    assert torch.isfinite(model.loss(batch))


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="mlp_layers"):
        NCFConfig(mlp_layers=(7, 4))
    with pytest.raises(ConfigError, match="mlp_layers needs >= 2 positive widths"):
        Recommender("ncf", config={"mlp_layers": "8"})
