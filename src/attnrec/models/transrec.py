"""TransRec: translation-based sequential recommendation (He, Kang & McAuley, RecSys 2017).

Items are points ``gamma_i`` in a "transition space" and each user is a translation vector
``t + t_u`` (a global translation plus a personal offset). The next item after ``l`` should lie
close to ``gamma_l + t + t_u``:

    x(u, l, i) = beta_i - || gamma_l + t + t_u - gamma_i ||^2

with an item bias ``beta_i`` and the squared Euclidean distance (the paper's L2 variant, which
it found best). Item points are kept inside the unit ball (the paper re-normalises them after every
update; here the projection ``gamma / max(1, |gamma|)`` is applied in the forward pass, which has the
same effect on scores and needs no hook in the training loop). Training uses S-BPR over every
training transition ``l -> i`` with unseen negatives, and L2 on ``beta`` and ``t_u``.

Unknown users (user index ``-1``) start from ``t_u = 0``, the paper's population-level
translation, and the offset is then folded in from the history
(:func:`attnrec.models._baselines.fold_in`, ``fold_in_steps = 0`` keeps ``t_u = 0``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models._baselines import FactorSettings, transition_presets, user_inputs, user_vectors
from attnrec.models.batches.windows import negative_batches, positions, prefix_windows
from attnrec.models.contracts import Batch, CandidateScorer, SequentialModel
from attnrec.models.objectives.kernels import bpr_loss
from attnrec.models.registry import register
from attnrec.models.scoring import mask_padding


@dataclass(frozen=True)
class TransRecConfig(FactorSettings):
    """TransRec hyperparameters, the factor settings read for translations: ``dim`` is the dimension of
    the transition space, ``reg`` the L2 weight on the item bias beta and the personal translation t_u,
    ``n_negatives`` per transition; item points start as N(0, init_std^2), translations at 0, and
    ``fold_in_steps`` fit an unknown user's offset (0 = the global translation only)."""


@register(
    "transrec",
    config=TransRecConfig,
    presets=transition_presets(personal=True),
)
class TransRec(nn.Module, SequentialModel, CandidateScorer):
    """TransRec: users are translations from the previous item to the next in a shared item space."""

    def __init__(self, config: TransRecConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_users, self.n_items = n_users, n_items
        self.item_emb = nn.Embedding(n_items + 1, c.dim, padding_idx=0, sparse=c.sparse)  # gamma
        self.bias = nn.Embedding(n_items + 1, 1, padding_idx=0, sparse=c.sparse)  # beta
        self.user_trans = nn.Embedding(max(n_users, 1), c.dim, sparse=c.sparse)  # t_u
        self.global_trans = nn.Parameter(torch.zeros(c.dim))  # t
        nn.init.normal_(self.item_emb.weight, std=c.init_std)
        nn.init.zeros_(self.bias.weight)
        nn.init.zeros_(self.user_trans.weight)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()

    def points(self, items: torch.Tensor | None = None) -> torch.Tensor:
        """Item points projected into the unit ball: ``(*items.shape, D)``, or ``(I+1, D)`` for all."""
        g = self.item_emb.weight if items is None else self.item_emb(items)
        inside: torch.Tensor = g / g.norm(dim=-1, keepdim=True).clamp(min=1.0)  # (..., D), norm <= 1
        return inside

    def _distance_scores(self, query: torch.Tensor, items: torch.Tensor | None = None) -> torch.Tensor:
        """``beta_i - |query - gamma_i|^2``: ``(B, I+1)`` for all items, or ``(B, K)`` for ``items`` (B,
        K)."""
        if items is None:
            g, beta = self.points(), self.bias.weight.squeeze(-1)  # (I+1, D), (I+1,)
            d2 = query.pow(2).sum(-1, keepdim=True) - 2 * query @ g.T + g.pow(2).sum(-1)  # (B, I+1)
            return beta - d2
        g = self.points(items)  # (B, K, D)
        near: torch.Tensor = self.bias(items).squeeze(-1) - (query[:, None, :] - g).pow(2).sum(-1)  # (B, K)
        return near

    # -- training: S-BPR over transitions ---------------------------------------------------------
    def train_rows(self, train: Sequences) -> int:
        return int(np.maximum(train.lengths() - 1, 0).sum())

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Every transition ``prev -> next`` once per epoch, shuffled, with fresh unseen negatives."""
        users, prev, nxt = positions(train, 1, 1, min_prev=1)  # (N,), (N, 1), (N, 1)
        for idx, neg in negative_batches(
            train, users, self.n_items, self.config.n_negatives, batch_size, rng
        ):
            yield {
                "user": torch.from_numpy(users[idx]),
                "prev": torch.from_numpy(prev[idx, 0]),
                "positive": torch.from_numpy(nxt[idx]),
                "negative": torch.from_numpy(neg),
            }  # neg: (B, K)

    def loss(self, batch: Batch) -> torch.Tensor:
        """Mean S-BPR loss plus L2 on the biases and personal translations the batch touches."""
        t_u = self.user_trans(batch["user"])  # (B, D)
        query = self.points(batch["prev"]) + self.global_trans + t_u  # (B, D)
        x_pos = self._distance_scores(query, batch["positive"])  # (B, 1)
        x_neg = self._distance_scores(query, batch["negative"])  # (B, K)
        bias = self.bias(batch["positive"]).pow(2).sum((1, 2)) + self.bias(batch["negative"]).pow(2).mean(
            (1, 2)
        )
        l2 = t_u.pow(2).sum(-1) + bias  # (B,)
        loss: torch.Tensor = bpr_loss(x_pos[:, 0], x_neg) + self.config.reg * l2.mean()
        return loss

    def _positions(self, history: torch.Tensor) -> torch.Tensor:
        """Scores ``(R, T, I+1)`` with ``t_u = 0`` of every position of ``history`` ``(R, T)`` given the item
        before it."""
        r, t = history.shape
        origin = self.points(prefix_windows(history, 1)[..., 0]) + self.global_trans  # (R, T, D)
        return self._distance_scores(origin.reshape(r * t, -1)).view(r, t, -1)  # (R, T, I+1)

    # -- inference ---------------------------------------------------------------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """User indices (``-1`` = unknown) and the recent history (its last item is the query's origin)."""
        return user_inputs(users, histories)

    def _query(self, batch: Batch) -> torch.Tensor:
        """The translated point ``(B, D)``: last item + global + the user's translation (folded in when
        unknown)."""
        origin = self.points(batch["history"][:, -1]) + self.global_trans  # (B, D)
        # Within one softmax over items, x = beta_i - |o + t_u - g_i|^2 differs from the t_u = 0 scores
        # only by 2 <t_u, g_i> (the other terms are the same for every item), so that is the user part.
        (t_u,) = user_vectors(
            [self.user_trans],
            batch["user"],
            batch["history"],
            lambda v: 2 * v[0] @ self.points().T,
            self.config.fold_in_steps,
            base_fn=self._positions,
            prior="zero",
        )  # (B, D)
        return origin + t_u

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)``; column 0 (padding) is ``-inf``."""
        return mask_padding(self._distance_scores(self._query(batch)))  # (B, I+1)

    def score_items(self, batch: Batch, items: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, C)`` of the candidate ``items`` ``(B, C)`` only."""
        return self._distance_scores(self._query(batch), items)
