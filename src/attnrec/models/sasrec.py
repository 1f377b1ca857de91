"""SASRec: self-attentive sequential recommendation (Kang & McAuley, ICDM 2018).

A causal transformer over the user's last ``max_len`` items predicts the next item at every
position. The computation follows the authors' code: embeddings scaled by sqrt(d) plus learnable
positions, pre-LayerNorm blocks whose attention queries are normalised while keys/values are not,
a ReLU point-wise FFN of width d, padding positions zeroed after every block, a final LayerNorm,
and the item embedding reused as the output layer.

Losses: ``bce`` (the paper: one unseen negative per position), ``ce`` (full softmax over the
catalog, computed in chunks) and ``sampled_ce`` for catalogs too large for a full softmax: a
softmax over the target and negatives shared by the whole batch, ``n_negatives`` drawn from the
catalog (``sampler`` uniform, by training popularity or half each) plus ``in_batch_negatives`` drawn from the
batch's own targets. Every logit is corrected by ``-log E[k]``, the expected number of times item
``k`` appears among the sampled negatives (log-Q correction, mixed proposal), and sampled copies of
a row's target are masked. The per-step memory is ``O(positions x negatives)``, whatever the
catalog size.
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
    SAMPLERS,
    MultiHeadAttention,
    PointWiseFeedForward,
    draw_negatives,
    negative_proposal,
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
    n_negatives: int = 256  # sampled_ce: catalog negatives shared by the batch
    sampler: str = "uniform"  # sampled_ce catalog negatives: "uniform", "popularity" (training count + 1), "mixed"
    in_batch_negatives: int = 0  # sampled_ce: also this many negatives drawn from the batch's targets
    # Sparse (row-wise) gradients for the item embedding, updated by lazy Adam (SparseAdam): with
    # bce or sampled_ce a step's memory and time then do not grow with the catalog. Single process,
    # no grad_clip.
    sparse_embedding: bool = False

    def __post_init__(self) -> None:
        if self.loss not in ("bce", "ce", "sampled_ce"):
            raise ValueError(f"loss must be bce, ce or sampled_ce, not {self.loss!r}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, not {self.sampler!r}")
        if min(self.hidden, self.n_layers, self.n_heads, self.max_len) < 1:
            raise ValueError("hidden, n_layers, n_heads and max_len must be positive")
        if self.n_negatives < 0 or self.in_batch_negatives < 0 or self.n_negatives + self.in_batch_negatives < 1:
            raise ValueError("n_negatives and in_batch_negatives must be >= 0, and at least one negative is needed")
        if self.sparse_embedding and self.loss == "ce":
            raise ValueError("sparse_embedding needs loss bce or sampled_ce (a full softmax touches every item)")


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

    # Batch entries drawn once per batch (not per row): kept whole on every rank under DDP.
    shared_batch_keys = frozenset({"negative", "neg_logq"})

    def __init__(self, config: SASRecConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.item_emb = nn.Embedding(n_items + 1, c.hidden, padding_idx=0, sparse=c.sparse_embedding)
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
        q = self.proposal(train) if self.config.loss == "sampled_ce" else None
        cdf = np.cumsum(q) if q is not None and self.config.sampler != "uniform" else None
        for idx in np.array_split(rng.permutation(len(users)), max(1, -(-len(users) // batch_size))):
            w = windows[idx]
            batch = {"seq": torch.from_numpy(w[:, :-1]), "target": torch.from_numpy(w[:, 1:])}
            if seen is not None:  # one negative per position, never an item the user has seen
                neg = draw_negatives(users[idx], w[:, 1:].shape, self.n_items, seen, rng)
                batch["negative"] = torch.from_numpy(neg)
            elif q is not None:
                batch |= self.sampled_negatives(w[:, 1:], q, cdf, rng)
            yield batch

    def proposal(self, train: Sequences) -> np.ndarray:
        """Probabilities ``(n_items + 1,)`` of drawing each item as a catalog negative (0 for padding)."""
        return negative_proposal(train.items, self.n_items, self.config.sampler)

    def sampled_negatives(
        self, target: np.ndarray, q: np.ndarray, cdf: np.ndarray | None, rng: np.random.Generator
    ) -> dict[str, torch.Tensor]:
        """Negatives shared by a batch and their log-Q corrections; ``target`` is the ``(B, T)`` target matrix.

        Returns ``negative`` ``(S,)`` and, unless the correction is a constant (uniform catalog
        negatives only), ``neg_logq`` ``(S,)`` and ``target_logq`` ``(B, T)``: the log of the expected
        count of each item among the ``S`` draws, ``n_negatives * q(k) + in_batch_negatives * c_k / N``
        where ``c_k`` counts ``k`` among the batch's ``N`` real targets.
        """
        c = self.config
        parts = []
        if c.n_negatives:
            if cdf is None:
                parts.append(rng.integers(1, self.n_items + 1, c.n_negatives))
            else:
                parts.append(np.searchsorted(cdf, rng.random(c.n_negatives) * cdf[-1], side="right").clip(1, self.n_items))
        flat = target[target > 0]  # (N,) real targets
        if c.in_batch_negatives:
            parts.append(flat[rng.integers(0, len(flat), c.in_batch_negatives)])
        neg = np.concatenate(parts) if len(parts) > 1 else parts[0]
        out = {"negative": torch.from_numpy(neg)}
        if cdf is None and not c.in_batch_negatives:
            return out  # uniform catalog negatives only: -log E[k] is the same for every item
        uniq, counts = np.unique(flat, return_counts=True)

        def log_expected(items: np.ndarray) -> np.ndarray:
            e = c.n_negatives * q[items]
            if c.in_batch_negatives:
                pos = np.searchsorted(uniq, items).clip(0, len(uniq) - 1)
                e = e + c.in_batch_negatives * np.where(uniq[pos] == items, counts[pos], 0) / len(flat)
            return np.log(np.maximum(e, 1e-30)).astype(np.float32)

        out["neg_logq"] = torch.from_numpy(log_expected(neg))
        out["target_logq"] = torch.from_numpy(np.where(target > 0, log_expected(target), 0.0).astype(np.float32))
        return out

    def loss_terms(self, batch: dict[str, torch.Tensor]) -> int:
        """How many terms :meth:`loss` averages over: the real (non-padding) target positions."""
        return int((batch["target"] > 0).sum())

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Next-item loss over real (non-padding) positions only."""
        target = batch["target"]  # (B, T)
        real = target > 0
        h = self.encode(batch["seq"])[real]  # (N, D) real positions only
        pos = target[real]  # (N,)
        emb = self.item_emb.weight  # (I+1, D)
        if self.config.loss == "bce":
            neg = batch["negative"][real]  # (N,)
            pos_logit = (h * self._rows(pos)).sum(-1)  # (N,)
            neg_logit = (h * self._rows(neg)).sum(-1)  # (N,)
            return F.binary_cross_entropy_with_logits(
                pos_logit, torch.ones_like(pos_logit)
            ) + F.binary_cross_entropy_with_logits(neg_logit, torch.zeros_like(neg_logit))
        if self.config.loss == "ce":
            return softmax_cross_entropy(h, emb, pos)  # chunked: never holds all (N, I+1) logits
        neg = batch["negative"]  # (S,) negatives shared by the batch
        pos_logit = (h * self._rows(pos)).sum(-1, keepdim=True)  # (N, 1)
        neg_logit = h @ self._rows(neg).T  # (N, S)
        if "neg_logq" in batch:  # log-Q correction: logit - log E[count among the draws]
            pos_logit = pos_logit - batch["target_logq"][real][:, None]
            neg_logit = neg_logit - batch["neg_logq"][None, :]
        neg_logit = neg_logit.masked_fill(neg[None, :] == pos[:, None], -torch.inf)  # accidental hits
        logits = torch.cat([pos_logit, neg_logit], dim=1)  # (N, 1+S)
        return F.cross_entropy(logits, torch.zeros(len(pos), dtype=torch.long, device=logits.device))

    def _rows(self, idx: torch.Tensor) -> torch.Tensor:
        """Item embedding rows; with ``sparse_embedding`` their gradient is sparse too."""
        if self.config.sparse_embedding:
            return F.embedding(idx, self.item_emb.weight, sparse=True)
        return self.item_emb.weight[idx]

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
