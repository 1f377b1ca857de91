"""NCF / NeuMF: neural collaborative filtering (He et al., WWW 2017).

NeuMF fuses two towers over separate user and item embeddings:

* GMF, generalised matrix factorisation: the element-wise product ``p_u * q_i``;
* MLP: a ReLU tower over the concatenation ``[p'_u ; q'_i]`` whose widths halve layer by layer.

The two outputs are concatenated and a linear layer gives the logit ``y(u, i)``. Training is the
paper's pointwise log loss: every training interaction is a positive, ``n_negatives`` items the
user never interacted with (drawn uniformly, redrawn every epoch) are negatives, and binary
cross-entropy is averaged over both. Like BPR-MF the model ignores the order of the history.

Scoring a user against the whole catalogue costs one MLP pass per (user, item) pair; the first MLP
layer is split into a user part and an item part (``W [p; q] = W_p p + W_q q``) and the catalogue is
processed in chunks, so memory stays bounded on large catalogues.

Unknown users (user index ``-1``) are folded in: both user vectors are fitted to the history with
the item side frozen (:func:`attnrec.models._baselines.fold_in`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models._baselines import UserVectorSettings, user_inputs, user_vectors
from attnrec.models.batches.windows import interaction_batches
from attnrec.models.contracts import Batch, CandidateScorer, SequentialModel
from attnrec.models.registry import register
from attnrec.models.scoring import mask_padding
from attnrec.models.validation import require_positive

CHUNK_ELEMENTS = 1 << 22  # (user, item, hidden) activations computed at once when scoring


@dataclass(frozen=True)
class NCFConfig(UserVectorSettings):
    """NeuMF hyperparameters (the paper's defaults: 8 predictive factors, 4 negatives)."""

    gmf_dim: int = 8  # GMF embedding size (the paper's "predictive factors")
    # MLP widths; the first is [p'; q'], so each embedding is half of it.
    mlp_layers: tuple[int, ...] = (64, 32, 16, 8)
    n_negatives: int = 4  # sampled negatives per positive interaction
    dropout: float = 0.0  # dropout after every MLP layer
    init_std: float = 0.01  # embeddings start as N(0, init_std^2), as in the paper's code

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive(gmf_dim=self.gmf_dim, n_negatives=self.n_negatives)
        if len(self.mlp_layers) < 2 or min(self.mlp_layers) < 1 or self.mlp_layers[0] % 2:
            raise ValueError("mlp_layers needs >= 2 positive widths, the first one even")
        if not 0 <= self.dropout < 1 or self.init_std <= 0:
            raise ValueError("dropout must be in [0, 1) and init_std > 0")


@register(
    "ncf",
    config=NCFConfig,
    presets={
        "ml-1m": {  # ~15 s of one CPU core per epoch, ~2 s per full-ranking validation
            "model": {"gmf_dim": 32, "mlp_layers": (64, 32, 16), "n_negatives": 4},
            "train": {"lr": 2e-3, "batch_size": 1024, "max_epochs": 40, "patience": 3, "time_budget": 600},
        },
        "beauty": {  # 40k users x 54k items: a small tower and sparse validation keep scoring affordable
            "model": {"gmf_dim": 32, "mlp_layers": (32, 16, 8), "n_negatives": 4},
            "train": {
                "lr": 2e-3,
                "batch_size": 1024,
                "max_epochs": 40,
                "patience": 2,
                "eval_every": 2,
                "time_budget": 600,
            },
        },
        "demo": {
            "model": {"gmf_dim": 16, "mlp_layers": (32, 16, 8), "n_negatives": 4},
            "train": {"lr": 5e-3, "batch_size": 512, "max_epochs": 40, "patience": 5, "time_budget": 120},
        },
    },
)
class NCF(nn.Module, SequentialModel, CandidateScorer):
    """NCF (NeuMF): a GMF tower and an MLP tower over user and item embeddings, log loss."""

    def __init__(self, config: NCFConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_users, self.n_items = n_users, n_items
        half = c.mlp_layers[0] // 2
        self.user_gmf = nn.Embedding(max(n_users, 1), c.gmf_dim, sparse=c.sparse)
        self.item_gmf = nn.Embedding(n_items + 1, c.gmf_dim, padding_idx=0, sparse=c.sparse)
        self.user_mlp = nn.Embedding(max(n_users, 1), half, sparse=c.sparse)
        self.item_mlp = nn.Embedding(n_items + 1, half, padding_idx=0, sparse=c.sparse)
        self.first = nn.Linear(c.mlp_layers[0], c.mlp_layers[1])  # over [p'; q']
        self.tower = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(c.mlp_layers[1:-1], c.mlp_layers[2:], strict=True)
        )
        self.drop = nn.Dropout(c.dropout)
        self.out = nn.Linear(c.gmf_dim + c.mlp_layers[-1], 1)
        for emb in (self.user_gmf, self.item_gmf, self.user_mlp, self.item_mlp):
            nn.init.normal_(emb.weight, std=c.init_std)
        for lin in (self.first, *self.tower):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def _logits(self, pg: torch.Tensor, pm: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, K)`` of user vectors ``pg`` (B, Dg), ``pm`` (B, Dm) for ``items`` (B, K) or (K,)
        shared."""
        half = self.user_mlp.embedding_dim
        qg, qm = self.item_gmf(items), self.item_mlp(items)  # (B, K, Dg), (B, K, Dm) or (K, Dg), (K, Dm)
        if items.dim() == 1:
            qg, qm = qg[None], qm[None]  # (1, K, Dg), (1, K, Dm): broadcast over the batch
        gmf = pg[:, None, :] * qg  # (B, K, Dg)
        h = F.linear(pm, self.first.weight[:, :half], self.first.bias)[:, None, :]  # (B, 1, H1)
        h = h + F.linear(qm, self.first.weight[:, half:])  # (B, K, H1)
        h = self.drop(F.relu(h))
        for lin in self.tower:
            h = self.drop(F.relu(lin(h)))  # (B, K, H_l)
        logits: torch.Tensor = self.out(torch.cat([gmf, h], dim=-1)).squeeze(-1)  # (B, K)
        return logits

    # -- training: pointwise log loss with sampled negatives ------------------------------------
    def train_rows(self, train: Sequences) -> int:
        return len(train.items)

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Every training interaction once per epoch with ``n_negatives`` fresh unseen items."""
        for users, pos, neg in interaction_batches(
            train, self.n_items, self.config.n_negatives, batch_size, rng
        ):
            items = np.concatenate([pos[:, None], neg], axis=1)  # (B, 1+K), positive first
            yield {"user": torch.from_numpy(users), "items": torch.from_numpy(items)}

    def loss(self, batch: Batch) -> torch.Tensor:
        """Binary cross-entropy over the positive (column 0) and the negatives (the other columns)."""
        u = batch["user"]  # (B,)
        logits = self._logits(self.user_gmf(u), self.user_mlp(u), batch["items"])  # (B, 1+K)
        labels = torch.zeros_like(logits)
        labels[:, 0] = 1.0
        return F.binary_cross_entropy_with_logits(logits, labels)

    # -- inference ---------------------------------------------------------------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """User indices (``-1`` = unknown) and the recent history, used only to fold unknown users in."""
        return user_inputs(users, histories)

    def _all_items(self, pg: torch.Tensor, pm: torch.Tensor) -> torch.Tensor:
        """Logits of user vectors ``(B, Dg)``, ``(B, Dm)`` against every item, chunked: ``(B, I+1)``."""
        b = pg.shape[0]
        chunk = max(1, CHUNK_ELEMENTS // max(1, b * self.config.mlp_layers[1]))
        all_items = torch.arange(self.n_items + 1, device=pg.device)
        parts = [
            self._logits(pg, pm, all_items[lo : lo + chunk])  # (B, C)
            for lo in range(0, self.n_items + 1, chunk)
        ]
        return torch.cat(parts, dim=1)  # (B, I+1)

    def _users(self, batch: Batch) -> list[torch.Tensor]:
        """GMF and MLP user vectors ``(B, Dg)``, ``(B, Dm)``, folded in for unknown users."""
        return user_vectors(
            [self.user_gmf, self.user_mlp],
            batch["user"],
            batch["history"],
            lambda v: self._all_items(v[0], v[1]),
            self.config.fold_in_steps,
        )

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` (logits); column 0 (padding) is ``-inf``."""
        return mask_padding(self._all_items(*self._users(batch)))  # (B, I+1)

    def score_items(self, batch: Batch, items: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, C)`` of the candidate ``items`` ``(B, C)`` only: the MLP runs on B x C pairs, not B x
        I."""
        pg, pm = self._users(batch)
        return self._logits(pg, pm, items)
