"""FPMC and FMC: factorised (personalised) Markov chains (Rendle et al., WWW 2010).

FPMC scores the next item ``i`` of user ``u`` whose previous item is ``l`` as

    x(u, l, i) = <VUI_u, VIU_i> + <VIL_i, VLI_l>

a matrix-factorisation term (long-term preference) plus a factorised first-order transition term.
With ``n_prev > 1`` the transition term averages over the last ``n_prev`` items (the paper's
"basket" of previous items). FMC is the same model without the user term: a factorised Markov chain
shared by everyone. Both are trained with S-BPR: ``log sigmoid(x(u, l, i) - x(u, l, j))`` for every
training transition ``l -> i`` and negatives ``j`` the user never interacted with, plus L2 on the
factors the triple touches.

Unknown users (user index ``-1``) in FPMC are folded in: the user vector is fitted to the history
with everything else frozen (:func:`attnrec.models._baselines.fold_in`). FMC needs no user.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models._baselines import FOLD_IN_ITEMS, FactorSettings, transition_presets, user_vectors
from attnrec.models.batches.windows import last_items, negative_batches, positions, prefix_windows
from attnrec.models.contracts import Batch, Factorised, SequentialModel
from attnrec.models.objectives.kernels import bpr_loss
from attnrec.models.registry import register
from attnrec.models.scoring import factorised_scores
from attnrec.models.validation import require_positive_fields


@dataclass(frozen=True)
class FPMCConfig(FactorSettings):
    """FPMC / FMC hyperparameters: the factor settings (``dim`` factors of each of the two or four
    embedding tables, ``reg`` on the factors of each training triple, ``n_negatives`` per transition; FMC
    has no user vector to fold in) and the length of the chain."""

    n_prev: int = 1  # previous items whose transitions are averaged (1 = first-order chain)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive_fields(self, "n_prev")


@register("fpmc", config=FPMCConfig, presets=transition_presets(personal=True))
class FPMC(nn.Module, SequentialModel, Factorised):
    """FPMC: matrix factorisation plus a factorised first-order Markov chain over the last item."""

    personal = True  # FMC sets False: no user factors at all

    def __init__(self, config: FPMCConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_users, self.n_items = n_users, n_items
        self.item_next = nn.Embedding(
            n_items + 1, c.dim, padding_idx=0, sparse=c.sparse
        )  # VIL: item as the next one
        self.item_prev = nn.Embedding(
            n_items + 1, c.dim, padding_idx=0, sparse=c.sparse
        )  # VLI: item as the previous one
        tables = [self.item_next, self.item_prev]
        if self.personal:
            self.user_emb = nn.Embedding(max(n_users, 1), c.dim, sparse=c.sparse)  # VUI
            self.item_user = nn.Embedding(n_items + 1, c.dim, padding_idx=0, sparse=c.sparse)  # VIU
            tables += [self.user_emb, self.item_user]
        for t in tables:
            nn.init.normal_(t.weight, std=c.init_std)
            if t.padding_idx is not None:
                with torch.no_grad():
                    t.weight[t.padding_idx].zero_()

    def context(self, prev: torch.Tensor) -> torch.Tensor:
        """Mean VLI factor of the previous items ``prev`` ``(B, n_prev)`` (0 = padding): ``(B, D)``."""
        real = (prev > 0).to(self.item_prev.weight.dtype).unsqueeze(-1)  # (B, P, 1)
        total: torch.Tensor = (self.item_prev(prev) * real).sum(1)  # (B, D)
        return total / real.sum(1).clamp(min=1.0)  # (B, D)

    # -- training: S-BPR over transitions ---------------------------------------------------------
    def train_rows(self, train: Sequences) -> int:
        return int(np.maximum(train.lengths() - 1, 0).sum())

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Every transition ``prev -> next`` once per epoch, shuffled, with fresh unseen negatives."""
        users, prev, nxt = positions(train, self.config.n_prev, 1, min_prev=1)  # (N,), (N, P), (N, 1)
        for idx, neg in negative_batches(
            train, users, self.n_items, self.config.n_negatives, batch_size, rng
        ):
            yield {
                "user": torch.from_numpy(users[idx]),
                "prev": torch.from_numpy(prev[idx]),
                "positive": torch.from_numpy(nxt[idx, 0]),
                "negative": torch.from_numpy(neg),
            }  # neg: (B, K)

    def loss(self, batch: Batch) -> torch.Tensor:
        """Mean S-BPR loss plus the L2 penalty of each triple's factors."""
        pos, neg = batch["positive"], batch["negative"]  # (B,), (B, K)
        ctx = self.context(batch["prev"])  # (B, D)
        q_pos, q_neg = self.item_next(pos), self.item_next(neg)  # (B, D), (B, K, D)
        x_pos = (ctx * q_pos).sum(-1)  # (B,)
        x_neg = (ctx[:, None, :] * q_neg).sum(-1)  # (B, K)
        l2 = ctx.pow(2).sum(-1) + q_pos.pow(2).sum(-1) + q_neg.pow(2).sum(-1).mean(-1)  # (B,)
        if self.personal:
            p = self.user_emb(batch["user"])  # (B, D)
            r_pos, r_neg = self.item_user(pos), self.item_user(neg)  # (B, D), (B, K, D)
            x_pos = x_pos + (p * r_pos).sum(-1)
            x_neg = x_neg + (p[:, None, :] * r_neg).sum(-1)
            l2 = l2 + p.pow(2).sum(-1) + r_pos.pow(2).sum(-1) + r_neg.pow(2).sum(-1).mean(-1)
        loss: torch.Tensor = bpr_loss(x_pos, x_neg) + self.config.reg * l2.mean()
        return loss

    def _chain_positions(self, history: torch.Tensor) -> torch.Tensor:
        """Transition scores ``(R, T, I+1)`` of every position of ``history`` ``(R, T)`` given the items
        before it."""
        r, t = history.shape
        ctx = self.context(prefix_windows(history, self.config.n_prev).reshape(r * t, -1))  # (R*T, D)
        return (ctx @ self.item_next.weight.T).view(r, t, -1)  # (R, T, I+1)

    # -- inference ---------------------------------------------------------------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """User indices (``-1`` = unknown), the last ``n_prev`` items, and the recent history for fold-in."""
        n = max(self.config.n_prev, FOLD_IN_ITEMS if self.personal else 0)
        hist = last_items(histories, n)  # (B, n)
        return {
            "user": torch.as_tensor(np.asarray(users, dtype=np.int64)),
            "history": hist,
            "prev": hist[:, n - self.config.n_prev :],
        }

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """``(B, D)`` context of the last items, followed for FPMC by the user's vector (folded in
        when unknown): ``score(batch) == query_vectors(batch) @ item_vectors().T``."""
        ctx = self.context(batch["prev"])  # (B, D)
        if not self.personal:
            return ctx
        (p,) = user_vectors(
            [self.user_emb],
            batch["user"],
            batch["history"],
            lambda v: v[0] @ self.item_user.weight.T,
            self.config.fold_in_steps,
            base_fn=self._chain_positions,
        )  # (B, D)
        return torch.cat([ctx, p], dim=1)  # (B, 2D)

    def item_vectors(self) -> torch.Tensor:
        """``(n_items + 1, D)`` next-item factors, followed for FPMC by the user-item factors."""
        if not self.personal:
            return self.item_next.weight
        return torch.cat([self.item_next.weight, self.item_user.weight], dim=1)  # (I+1, 2D)

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)``; column 0 (padding) is ``-inf``."""
        return factorised_scores(self.query_vectors(batch), self.item_vectors())  # (B, I+1)


@register("fmc", config=FPMCConfig, presets=transition_presets(personal=False))
class FMC(FPMC):
    """FMC: a factorised first-order Markov chain over the last item, shared by all users."""

    personal = False
