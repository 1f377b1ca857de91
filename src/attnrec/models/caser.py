"""Caser: convolutional sequence embedding (Tang & Wang, WSDM 2018).

The last ``L`` items form an ``L x d`` "image" ``E``. Horizontal filters of heights ``1..L`` slide
over it (each followed by ReLU and max-pooling over time) and capture union-level and skip
patterns; vertical filters ``L x 1`` take weighted sums of the rows (point-level patterns). Their
concatenation goes through a fully connected layer to ``z`` (``d``), which is concatenated with the
user embedding ``P_u`` and projected onto every item:

    y(u, i) = W'_i . [z ; P_u] + b'_i

Training follows the paper: every position of every training sequence with at least one earlier
item is an instance whose next ``targets`` items are positives and ``n_negatives`` items the user
never interacted with are negatives, under binary cross-entropy; dropout on the fully connected
input. (Windows shorter than ``L`` are left-padded with the padding item, as in the authors' code.)

Unknown users (user index ``-1``) are folded in: ``P_u`` is fitted to the history with everything
else frozen (:func:`attnrec.models._baselines.fold_in`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models._baselines import FOLD_IN_ITEMS, UserVectorSettings, user_inputs, user_vectors
from attnrec.models.batches.windows import negative_batches, positions, prefix_windows
from attnrec.models.contracts import Batch, Factorised, ItemBiased, SequentialModel
from attnrec.models.registry import register
from attnrec.models.scoring import factorised_scores
from attnrec.models.validation import require_positive


@dataclass(frozen=True)
class CaserConfig(UserVectorSettings):
    """Caser hyperparameters (defaults: the paper's)."""

    dim: int = 50  # d, the item and user embedding size
    window: int = 5  # L, the most recent items convolved
    targets: int = 3  # T, next items predicted per training instance
    n_vertical: int = 4  # vertical filters
    n_horizontal: int = 16  # horizontal filters of each height 1..L
    dropout: float = 0.5  # on the fully connected layer's input
    n_negatives: int = 3  # sampled negatives per training instance

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(dim=self.dim, window=self.window, targets=self.targets, n_negatives=self.n_negatives)
        if self.n_vertical < 0 or self.n_horizontal < 0 or self.n_vertical + self.n_horizontal == 0:
            raise ValueError("n_vertical and n_horizontal must be >= 0 and not both 0")
        if not 0 <= self.dropout < 1:
            raise ValueError("dropout must be in [0, 1)")


@register(
    "caser",
    config=CaserConfig,
    presets={
        "ml-1m": {  # ~29 s of one CPU core per epoch
            "model": {"dim": 50, "window": 5, "targets": 3, "n_negatives": 3},
            "train": {
                "lr": 3e-3,
                "batch_size": 1024,
                "max_epochs": 50,
                "patience": 3,
                "weight_decay": 1e-6,
                "time_budget": 600,
            },
        },
        "beauty": {
            "model": {"dim": 50, "window": 5, "targets": 3, "n_negatives": 3, "sparse": True},
            "train": {
                "lr": 3e-3,
                "batch_size": 512,
                "max_epochs": 150,
                "patience": 10,
                "weight_decay": 1e-6,
                "time_budget": 1200,
            },  # ~14 s an epoch on one core; best epoch 65, stopped at 75
        },
        "demo": {
            "model": {"dim": 32, "window": 5, "targets": 2, "n_negatives": 3, "dropout": 0.3},
            "train": {"lr": 3e-3, "batch_size": 256, "max_epochs": 40, "patience": 5, "time_budget": 120},
        },
    },
)
class Caser(nn.Module, SequentialModel, Factorised, ItemBiased):
    """Caser: horizontal and vertical convolutions over the last L items plus a user embedding."""

    def __init__(self, config: CaserConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_users, self.n_items = n_users, n_items
        self.item_emb = nn.Embedding(n_items + 1, c.dim, padding_idx=0, sparse=c.sparse)
        self.user_emb = nn.Embedding(max(n_users, 1), c.dim, sparse=c.sparse)
        self.vertical = nn.Conv2d(1, c.n_vertical, (c.window, 1)) if c.n_vertical else None
        self.horizontal = nn.ModuleList(
            nn.Conv2d(1, c.n_horizontal, (h, c.dim)) for h in range(1, c.window + 1) if c.n_horizontal
        )
        self.fc = nn.Linear(c.n_vertical * c.dim + c.n_horizontal * c.window, c.dim)
        self.drop = nn.Dropout(c.dropout)
        self.out_emb = nn.Embedding(n_items + 1, 2 * c.dim, padding_idx=0, sparse=c.sparse)  # W'
        self.out_bias = nn.Embedding(n_items + 1, 1, padding_idx=0, sparse=c.sparse)  # b'
        nn.init.normal_(self.item_emb.weight, std=1.0 / c.dim)
        nn.init.normal_(self.user_emb.weight, std=1.0 / c.dim)
        nn.init.normal_(self.out_emb.weight, std=1.0 / (2 * c.dim))
        nn.init.zeros_(self.out_bias.weight)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()
            self.out_emb.weight[0].zero_()

    def sequence_vector(self, window: torch.Tensor) -> torch.Tensor:
        """``z`` ``(B, d)`` of the last ``L`` items ``window`` ``(B, L)`` (left-padded with 0).

        The convolutions use the ``Conv2d`` weights but run as matrix products over the unfolded
        windows: the same numbers as ``conv2d`` on an ``L x d`` image, about twice as fast on a CPU.
        """
        e = self.item_emb(window)  # (B, L, d)
        b, n, d = e.shape
        parts = []
        if self.vertical is not None:  # n_v weighted sums of the L rows
            wv, bv = self.vertical.weight, self.vertical.bias  # (n_v, 1, L, 1), (n_v,)
            v = torch.einsum("bld,vl->bvd", e, wv[:, 0, :, 0])  # (B, n_v, d)
            parts.append((v + bv[:, None]).flatten(1) if bv is not None else v.flatten(1))  # (B, n_v * d)
        for conv in self.horizontal:
            assert isinstance(conv, nn.Conv2d)
            wh = conv.weight  # (n_h, 1, h, d)
            h = wh.shape[2]
            win = e.unfold(1, h, 1).transpose(2, 3).reshape(b, n - h + 1, h * d)  # (B, L - h + 1, h * d)
            act = F.relu(F.linear(win, wh.reshape(wh.shape[0], h * d), conv.bias))  # (B, L - h + 1, n_h)
            parts.append(act.max(dim=1).values)  # (B, n_h) max-pooled over time
        return F.relu(self.fc(self.drop(torch.cat(parts, dim=1))))  # (B, d)

    # -- training: next T items of every position, BCE with sampled negatives -----------------------
    def train_rows(self, train: Sequences) -> int:
        return int(np.maximum(train.lengths() - 1, 0).sum())

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Every position with an earlier item once per epoch: its window, next T items and negatives."""
        c = self.config
        users, window, nxt = positions(train, c.window, c.targets, min_prev=1)  # (N,), (N, L), (N, T)
        for idx, neg in negative_batches(train, users, self.n_items, c.n_negatives, batch_size, rng):
            yield {
                "user": torch.from_numpy(users[idx]),
                "window": torch.from_numpy(window[idx]),
                "positive": torch.from_numpy(nxt[idx]),
                "negative": torch.from_numpy(neg),
            }  # neg: (B, K)

    def loss(self, batch: Batch) -> torch.Tensor:
        """Binary cross-entropy over the real next items (positives) and the sampled negatives."""
        x = torch.cat([self.sequence_vector(batch["window"]), self.user_emb(batch["user"])], dim=1)  # (B, 2d)
        pos, neg = batch["positive"], batch["negative"]  # (B, T), (B, K)
        y_pos = (self.out_emb(pos) * x[:, None, :]).sum(-1) + self.out_bias(pos).squeeze(-1)  # (B, T)
        y_neg = (self.out_emb(neg) * x[:, None, :]).sum(-1) + self.out_bias(neg).squeeze(-1)  # (B, K)
        real = (pos > 0).to(y_pos.dtype)  # (B, T) targets past the end of a sequence are padding
        pos_loss = (
            F.binary_cross_entropy_with_logits(y_pos, torch.ones_like(y_pos), reduction="none") * real
        ).sum()
        neg_loss = F.binary_cross_entropy_with_logits(y_neg, torch.zeros_like(y_neg), reduction="sum")
        loss: torch.Tensor = (pos_loss + neg_loss) / (real.sum() + y_neg.numel())
        return loss

    def _positions(self, history: torch.Tensor) -> torch.Tensor:
        """User-free scores ``(R, T, I+1)`` of every position of ``history`` ``(R, T)`` given the L items
        before it."""
        r, t = history.shape
        z = self.sequence_vector(prefix_windows(history, self.config.window).reshape(r * t, -1))  # (R*T, d)
        d = self.config.dim
        scores = z @ self.out_emb.weight[:, :d].T + self.out_bias.weight.squeeze(-1)  # (R*T, I+1)
        return scores.view(r, t, -1)

    # -- inference ---------------------------------------------------------------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """User indices (``-1`` = unknown) and the recent history (its last L items are the window)."""
        return user_inputs(users, histories, max(FOLD_IN_ITEMS, self.config.window))

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """``(B, 2d)``: the window's vector and the user's (folded in when unknown), so that
        ``score(batch) == query_vectors(batch) @ item_vectors().T + item_bias()``."""
        z = self.sequence_vector(batch["history"][:, -self.config.window :])  # (B, d)
        d = self.config.dim
        w_user = self.out_emb.weight[:, d:]  # (I+1, d)
        (p,) = user_vectors(
            [self.user_emb],
            batch["user"],
            batch["history"],
            lambda v: v[0] @ w_user.T,
            self.config.fold_in_steps,
            base_fn=self._positions,
        )  # (B, d)
        return torch.cat([z, p], dim=1)  # (B, 2d)

    def item_vectors(self) -> torch.Tensor:
        """Output item vectors ``(n_items + 1, 2d)`` (row 0 is padding)."""
        return self.out_emb.weight

    def item_bias(self) -> torch.Tensor:
        """Output item biases ``(n_items + 1,)``."""
        return self.out_bias.weight.squeeze(-1)

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` for the next item; column 0 (padding) is ``-inf``."""
        return factorised_scores(self.query_vectors(batch), self.item_vectors(), self.item_bias())  # (B, I+1)
