"""BPR-MF: matrix factorisation trained with Bayesian personalised ranking (Rendle et al., UAI 2009).

The score of item ``i`` for user ``u`` is ``x_ui = <p_u, q_i> + b_i``. Training maximises
``log sigmoid(x_ui - x_uj)`` over triples of a user, an item of their training history and an item
they never interacted with (drawn uniformly, redrawn every epoch from the seeded epoch generator),
with an L2 penalty on the embeddings the triple touches (the paper's regularisation). The model is
not sequential: the order of the history does not matter.

Unknown users (an ad-hoc history, user index ``-1``) are folded in: a user vector is fitted to the
history with the item factors frozen (:func:`attnrec.models._baselines.fold_in`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models._baselines import FactorSettings, user_inputs, user_vectors
from attnrec.models.batches.windows import interaction_batches
from attnrec.models.contracts import Batch, Factorised, ItemBiased, SequentialModel
from attnrec.models.objectives.kernels import bpr_loss
from attnrec.models.registry import register
from attnrec.models.scoring import factorised_scores


@dataclass(frozen=True)
class BPRMFConfig(FactorSettings):
    """BPR-MF hyperparameters: the factor settings (``dim`` latent factors of users and items, ``reg`` on
    the user, positive and negative item factors of a triple, ``n_negatives`` per (user, item) pair) and
    a per-item bias."""

    item_bias: bool = True  # learn a per-item bias b_i (popularity offset)


@register(
    "bprmf",
    config=BPRMFConfig,
    presets={
        "ml-1m": {
            "model": {"dim": 64, "reg": 1e-4, "n_negatives": 4},
            "train": {"lr": 2e-3, "batch_size": 4096, "max_epochs": 60, "patience": 4, "time_budget": 600},
        },
        "beauty": {
            # ~6 s an epoch on one core; early stopping ends it near epoch 140 (60 epochs were too few)
            "model": {"dim": 64, "reg": 1e-3, "n_negatives": 4},
            "train": {"lr": 2e-3, "batch_size": 4096, "max_epochs": 300, "patience": 4, "time_budget": 1200},
        },
        "demo": {
            "model": {"dim": 32, "reg": 1e-4, "n_negatives": 4},
            "train": {"lr": 1e-2, "batch_size": 512, "max_epochs": 40, "patience": 5, "time_budget": 120},
        },
    },
)
class BPRMF(nn.Module, SequentialModel, Factorised, ItemBiased):
    """BPR-MF: user and item factors ranked by a pairwise (BPR) loss, not sequential."""

    def __init__(self, config: BPRMFConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_users, self.n_items = n_users, n_items
        self.user_emb = nn.Embedding(max(n_users, 1), c.dim, sparse=c.sparse)
        self.item_emb = nn.Embedding(n_items + 1, c.dim, padding_idx=0, sparse=c.sparse)
        self.bias = nn.Embedding(n_items + 1, 1, padding_idx=0, sparse=c.sparse)
        nn.init.normal_(self.user_emb.weight, std=c.init_std)
        nn.init.normal_(self.item_emb.weight, std=c.init_std)
        nn.init.zeros_(self.bias.weight)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()
        self.bias.weight.requires_grad_(c.item_bias)

    # -- training: (user, positive, negatives) triples -------------------------------------------
    def train_rows(self, train: Sequences) -> int:
        return len(train.items)

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Every training interaction once per epoch, shuffled, with fresh unseen negatives."""
        for users, items, neg in interaction_batches(
            train, self.n_items, self.config.n_negatives, batch_size, rng
        ):
            yield {
                "user": torch.from_numpy(users),  # (B,)
                "positive": torch.from_numpy(items),  # (B,)
                "negative": torch.from_numpy(neg),  # (B, K)
            }

    def loss(self, batch: Batch) -> torch.Tensor:
        """Mean BPR loss ``-log sigmoid(x_ui - x_uj)`` plus the L2 penalty of the triple."""
        p = self.user_emb(batch["user"])  # (B, D)
        q_pos = self.item_emb(batch["positive"])  # (B, D)
        q_neg = self.item_emb(batch["negative"])  # (B, K, D)
        x_pos = (p * q_pos).sum(-1) + self.bias(batch["positive"]).squeeze(-1)  # (B,)
        x_neg = (p[:, None, :] * q_neg).sum(-1) + self.bias(batch["negative"]).squeeze(-1)  # (B, K)
        bpr = bpr_loss(x_pos, x_neg)
        l2 = (p.pow(2).sum(-1) + q_pos.pow(2).sum(-1) + q_neg.pow(2).sum(-1).mean(-1)).mean()
        loss: torch.Tensor = bpr + self.config.reg * l2
        return loss

    # -- inference ---------------------------------------------------------------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """User indices (``-1`` = unknown) and the recent history, used only to fold unknown users in."""
        return user_inputs(users, histories)

    def _scores(self, p: torch.Tensor) -> torch.Tensor:
        """``x_ui`` for user vectors ``p`` ``(B, D)`` against every item (padding included): ``(B, I+1)``."""
        return p @ self.item_emb.weight.T + self.bias.weight.T  # (B, I+1)

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """User vectors ``(B, D)`` (folded in for unknown users):
        ``score == query @ item_vectors().T + item_bias()``."""
        (p,) = user_vectors(
            [self.user_emb],
            batch["user"],
            batch["history"],
            lambda v: self._scores(v[0]),
            self.config.fold_in_steps,
        )  # (B, D)
        return p

    def item_vectors(self) -> torch.Tensor:
        """Item factors ``(n_items + 1, D)`` (row 0 is padding)."""
        return self.item_emb.weight

    def item_bias(self) -> torch.Tensor:
        """Item biases ``(n_items + 1,)``."""
        return self.bias.weight.squeeze(-1)

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``x_ui`` ``(B, n_items + 1)``; column 0 (padding) is ``-inf``."""
        return factorised_scores(self.query_vectors(batch), self.item_vectors(), self.item_bias())  # (B, I+1)
