"""SASRec: self-attentive sequential recommendation (Kang & McAuley, ICDM 2018).

A causal transformer over the user's last ``max_len`` items predicts the next item at every
position. The computation follows the authors' code: embeddings scaled by sqrt(d) plus learnable
positions, pre-LayerNorm blocks whose attention queries are normalised while keys/values are not,
a ReLU point-wise FFN of width d, padding positions zeroed after every block, a final LayerNorm,
and the item embedding reused as the output layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models._blocks import (
    MultiHeadAttention,
    PointWiseFeedForward,
    draw_negatives,
    softmax_cross_entropy,
)
from attnrec.registry import register


@dataclass(frozen=True)
class SASRecConfig:
    """SASRec hyperparameters (defaults: the paper's ML-1M settings)."""

    hidden: int = 50  # d, the embedding and model width
    n_layers: int = 2  # self-attention blocks
    n_heads: int = 1
    max_len: int = 200  # n, the most recent items used
    dropout: float = 0.2
    # Dropout on attention probabilities (the authors' code uses `dropout`; 0 lets PyTorch use its
    # fused attention kernel, about 2x faster on CPU). None means "same as dropout".
    attn_dropout: float | None = None
    loss: str = "bce"  # "bce" (paper: 1 negative per position), "ce" (full softmax), "sampled_ce"
    n_negatives: int = 256  # shared negatives per batch for sampled_ce

    def __post_init__(self) -> None:
        if self.loss not in ("bce", "ce", "sampled_ce"):
            raise ValueError(f"loss must be bce, ce or sampled_ce, not {self.loss!r}")
        if min(self.hidden, self.n_layers, self.n_heads, self.max_len, self.n_negatives) < 1:
            raise ValueError("hidden, n_layers, n_heads, max_len and n_negatives must be positive")


class SASRecBlock(nn.Module):
    def __init__(self, c: SASRecConfig) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(c.hidden, eps=1e-8)
        self.attn = MultiHeadAttention(c.hidden, c.n_heads, c.dropout if c.attn_dropout is None else c.attn_dropout)
        self.drop = nn.Dropout(c.dropout)
        self.ln_ffn = nn.LayerNorm(c.hidden, eps=1e-8)
        self.ffn = PointWiseFeedForward(c.hidden, c.hidden, c.dropout, "relu")

    def forward(self, x: torch.Tensor, allowed: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        q = self.ln_attn(x)  # (B, T, D)
        x = q + self.drop(self.attn(q, x, allowed))  # the residual adds the normalised queries
        y = self.ln_ffn(x)
        return (y + self.ffn(y)) * keep  # (B, T, D), padding rows zeroed


def causal_mask(seq: torch.Tensor) -> torch.Tensor:
    """``(B, 1, T, T)``: query t sees real keys s <= t; padding queries see only themselves."""
    t = seq.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=seq.device).tril()  # (T, T)
    real_key = (seq > 0)[:, None, None, :]  # (B, 1, 1, T)
    eye = torch.eye(t, dtype=torch.bool, device=seq.device)
    return (causal & real_key) | eye  # (B, 1, T, T)


@register(
    "sasrec",
    config=SASRecConfig,
    kind="torch",
    presets={
        "paper": {"model": {}, "train": {"lr": 1e-3, "batch_size": 128, "max_epochs": 200}},
        "ml-1m-ce": {
            "model": {"hidden": 64, "loss": "ce", "dropout": 0.2},
            "train": {"lr": 1e-3, "batch_size": 128, "max_epochs": 200},
        },
        # `make demo`: the built-in demo data in about 2-3 minutes on 2 CPU cores.
        "demo": {
            "model": {"hidden": 64, "max_len": 50, "loss": "ce", "dropout": 0.2},
            "train": {"lr": 2e-3, "batch_size": 128, "max_epochs": 30, "patience": 3, "time_budget": 150.0},
        },
    },
)
class SASRec(nn.Module):
    """SASRec: causal self-attention over the item sequence, next-item objective."""

    def __init__(self, config: SASRecConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.item_emb = nn.Embedding(n_items + 1, c.hidden, padding_idx=0)
        self.pos_emb = nn.Embedding(c.max_len, c.hidden)
        self.emb_drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(SASRecBlock(c) for _ in range(c.n_layers))
        self.ln_out = nn.LayerNorm(c.hidden, eps=1e-8)
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.xavier_normal_(p)
            elif "ln" not in name:
                nn.init.zeros_(p)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()

    def encode(self, seq: torch.Tensor) -> torch.Tensor:
        """Hidden states ``(B, T, D)`` of a left-padded item matrix ``seq`` ``(B, T)``."""
        t = seq.shape[1]
        keep = (seq > 0).unsqueeze(-1).to(self.item_emb.weight.dtype)  # (B, T, 1)
        # Positions count from the window's start, so the newest item always has position max_len-1.
        pos = torch.arange(self.config.max_len - t, self.config.max_len, device=seq.device)
        x = self.item_emb(seq) * self.config.hidden**0.5 + self.pos_emb(pos)  # (B, T, D)
        x = self.emb_drop(x) * keep
        allowed = causal_mask(seq)
        for block in self.blocks:
            x = block(x, allowed, keep)
        return self.ln_out(x)  # (B, T, D)

    # -- training: shifted next-item targets -------------------------------------------------
    def train_rows(self, train: Sequences) -> int:
        return int((train.lengths() >= 2).sum())

    def train_batches(
        self, train: Sequences, batch_size: int, rng: np.random.Generator
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Shuffled batches of (input, next-item target) windows; negatives redrawn every call."""
        users = np.flatnonzero(train.lengths() >= 2)
        windows = train.padded(self.config.max_len + 1, users)  # (U, T+1)
        seen = train.user_item_keys() if self.config.loss == "bce" else None
        for idx in np.array_split(rng.permutation(len(users)), max(1, -(-len(users) // batch_size))):
            w = windows[idx]
            batch = {"seq": torch.from_numpy(w[:, :-1]), "target": torch.from_numpy(w[:, 1:])}
            if seen is not None:  # one negative per position, never an item the user has seen
                neg = draw_negatives(users[idx], w[:, 1:].shape, self.n_items, seen, rng)
                batch["negative"] = torch.from_numpy(neg)
            elif self.config.loss == "sampled_ce":
                batch["negative"] = torch.from_numpy(rng.integers(1, self.n_items + 1, self.config.n_negatives))
            yield batch

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Next-item loss over real (non-padding) positions only."""
        target = batch["target"]  # (B, T)
        real = target > 0
        h = self.encode(batch["seq"])[real]  # (N, D) real positions only
        pos = target[real]  # (N,)
        emb = self.item_emb.weight  # (I+1, D)
        if self.config.loss == "bce":
            neg = batch["negative"][real]  # (N,)
            pos_logit = (h * emb[pos]).sum(-1)  # (N,)
            neg_logit = (h * emb[neg]).sum(-1)  # (N,)
            return F.binary_cross_entropy_with_logits(
                pos_logit, torch.ones_like(pos_logit)
            ) + F.binary_cross_entropy_with_logits(neg_logit, torch.zeros_like(neg_logit))
        if self.config.loss == "ce":
            return softmax_cross_entropy(h, emb, pos)  # chunked: never holds all (N, I+1) logits
        neg = batch["negative"]  # (S,) shared uniform negatives: log-Q correction is a constant
        pos_logit = (h * emb[pos]).sum(-1, keepdim=True)  # (N, 1)
        neg_logit = h @ emb[neg].T  # (N, S)
        neg_logit = neg_logit.masked_fill(neg[None, :] == pos[:, None], -torch.inf)  # accidental hits
        logits = torch.cat([pos_logit, neg_logit], dim=1)  # (N, 1+S)
        return F.cross_entropy(logits, torch.zeros(len(pos), dtype=torch.long, device=logits.device))

    # -- inference: the last position's state against every item -----------------------------
    def score_inputs(self, users: np.ndarray, histories: Sequences) -> dict[str, torch.Tensor]:
        # Padded to the batch's longest history, not max_len: positions count from the window's end
        # and padding keys are masked, so the scores are the same and short histories cost less.
        width = int(min(self.config.max_len, max(1, histories.lengths().max(initial=0))))
        return {"seq": torch.from_numpy(histories.padded(width))}

    def query_vectors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, D)`` last-position states: ``score(batch) == query_vectors(batch) @ item_vectors().T``."""
        return self.encode(batch["seq"])[:, -1, :]

    def item_vectors(self) -> torch.Tensor:
        """Item embeddings ``(n_items + 1, D)``, also the output layer (row 0 is padding)."""
        return self.item_emb.weight

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` for the next item; column 0 (padding) is ``-inf``."""
        h = self.query_vectors(batch)  # (B, D)
        scores = h @ self.item_emb.weight.T  # (B, I+1)
        scores[:, 0] = -torch.inf
        return scores

    def attention_weights(self, seq: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer attention probabilities ``(B, H, T, T)`` (eval mode, for visualisation)."""
        t = seq.shape[1]
        keep = (seq > 0).unsqueeze(-1).to(self.item_emb.weight.dtype)
        pos = torch.arange(self.config.max_len - t, self.config.max_len, device=seq.device)
        x = (self.item_emb(seq) * self.config.hidden**0.5 + self.pos_emb(pos)) * keep
        allowed, out = causal_mask(seq), []
        for block in self.blocks:
            assert isinstance(block, SASRecBlock)
            q = block.ln_attn(x)
            out.append(block.attn.weights(q, x, allowed))
            x = block(x, allowed, keep)
        return out
