"""The few pieces SASRec and BERT4Rec share word for word: attention, FFN, batch helpers."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention; queries and keys/values may come from different inputs."""

    def __init__(self, hidden: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        if hidden % n_heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {n_heads} heads")
        self.n_heads, self.dropout = n_heads, dropout
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``allowed``: bool ``(B, 1, T, T)``, True where query t may attend to key s."""
        b, t, d = x_q.shape
        h = self.n_heads
        q = self.q(x_q).view(b, t, h, d // h).transpose(1, 2)  # (B, H, T, D/H)
        k = self.k(x_kv).view(b, t, h, d // h).transpose(1, 2)  # (B, H, T, D/H)
        v = self.v(x_kv).view(b, t, h, d // h).transpose(1, 2)  # (B, H, T, D/H)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)  # (B, H, T, D/H)
        return self.out(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)

    def weights(self, x_q: torch.Tensor, x_kv: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Attention probabilities ``(B, H, T, T)`` for inspection (no dropout)."""
        b, t, d = x_q.shape
        h = self.n_heads
        q = self.q(x_q).view(b, t, h, d // h).transpose(1, 2)
        k = self.k(x_kv).view(b, t, h, d // h).transpose(1, 2)
        logits = q @ k.transpose(-1, -2) / (d // h) ** 0.5  # (B, H, T, T)
        return logits.masked_fill(~allowed, -torch.inf).softmax(-1)


class PointWiseFeedForward(nn.Module):
    """Two position-wise linear layers with an activation and dropout after each."""

    def __init__(self, hidden: int, inner: int, dropout: float, activation: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, inner)
        self.fc2 = nn.Linear(inner, hidden)
        self.act: nn.Module = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


def draw_negatives(
    users: np.ndarray, shape: tuple[int, ...], n_items: int, seen_keys: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Uniform random items in ``1..n_items`` that the row's user never interacted with.

    ``users`` has one entry per row of ``shape``; ``seen_keys`` are the sorted
    ``user * (n_items + 1) + item`` keys of the training data. Collisions are redrawn until
    none remain (bounded only for the degenerate user who has seen the whole catalog).
    """
    neg = rng.integers(1, n_items + 1, size=shape)
    u = np.broadcast_to(users.reshape((-1,) + (1,) * (len(shape) - 1)), shape)
    for _ in range(200):
        keys = u * (n_items + 1) + neg
        pos = np.searchsorted(seen_keys, keys).clip(0, len(seen_keys) - 1)
        bad = seen_keys[pos] == keys
        if not bad.any():
            break
        neg[bad] = rng.integers(1, n_items + 1, size=int(bad.sum()))
    return neg


SAMPLERS = ("uniform", "popularity", "mixed")


def negative_proposal(train_items: np.ndarray, n_items: int, sampler: str) -> np.ndarray:
    """Probabilities ``(n_items + 1,)`` of drawing each item as a sampled-softmax negative (0 for padding).

    ``"uniform"``: every item alike. ``"popularity"``: in proportion to training count + 1.
    ``"mixed"``: half of each, so popular items are drawn often (hard negatives) and every tail
    item still ~``0.5 / n_items`` of the time (a popularity proposal almost never draws it, and its
    logit is then only ever pushed up, as a target).
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, not {sampler!r}")
    uniform = np.ones(n_items + 1)
    uniform[0] = 0.0
    uniform /= uniform.sum()
    if sampler == "uniform":
        return uniform
    pop = np.bincount(train_items, minlength=n_items + 1).astype(np.float64) + 1.0
    pop[0] = 0.0
    pop /= pop.sum()
    return pop if sampler == "popularity" else 0.5 * (pop + uniform)


CE_CHUNK_ELEMENTS = 1 << 23  # logits the chunked cross-entropy holds at once (32 MiB in float32)


class _ChunkedSoftmaxCE(torch.autograd.Function):
    """Mean cross-entropy of ``h @ weight.T + bias`` without materialising the ``(N, I)`` logits.

    Rows are processed in chunks that fit in cache (fewer rows per chunk for large catalogs, so a
    chunk never holds more than ``CE_CHUNK_ELEMENTS`` logits); the backward pass recomputes each
    chunk's logits. Column 0 (padding) is excluded from the softmax. Under autocast the matmuls run in
    bfloat16 with float32 accumulation of the log-sum-exp and the gradients.
    """

    @staticmethod
    def forward(
        ctx: Any, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        low = torch.is_autocast_enabled(h.device.type)
        chunk = max(1, min(256 if low else 512, CE_CHUNK_ELEMENTS // max(weight.shape[0], 1)))
        w = weight.to(torch.bfloat16) if low else weight.float()
        n = h.shape[0]
        lse = torch.empty(n, dtype=torch.float32, device=h.device)
        target_logit = (h.float() * weight[target].float()).sum(-1)  # (N,)
        if bias is not None:
            target_logit = target_logit + bias[target].float()
        for s in range(0, n, chunk):
            logits = (h[s : s + chunk].to(w.dtype) @ w.T).float()  # (C, I)
            if bias is not None:
                logits += bias.float()
            logits[:, 0] = -torch.inf
            lse[s : s + chunk] = torch.logsumexp(logits, dim=1)
        ctx.save_for_backward(h, weight, bias, target, lse)
        ctx.chunk, ctx.low = chunk, low
        return (lse - target_logit).mean()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        h, weight, bias, target, lse = ctx.saved_tensors
        w = weight.to(torch.bfloat16) if ctx.low else weight.float()
        n, scale = h.shape[0], grad / h.shape[0]
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=h.device)
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=h.device) if bias is not None else None
        for s in range(0, n, ctx.chunk):
            hc = h[s : s + ctx.chunk]
            logits = (hc.to(w.dtype) @ w.T).float()  # (C, I)
            if bias is not None:
                logits += bias.float()
            p = logits.sub_(lse[s : s + ctx.chunk, None]).exp_()  # softmax, (C, I)
            p[:, 0] = 0.0
            p[torch.arange(len(hc), device=h.device), target[s : s + ctx.chunk]] -= 1.0
            p.mul_(scale)
            if grad_b is not None:
                grad_b += p.sum(0)
            pc = p.to(w.dtype)
            grad_h[s : s + ctx.chunk] = (pc @ w).to(h.dtype)  # (C, D)
            grad_w += (pc.T @ hc.to(w.dtype)).float()  # (I, D)
        return grad_h, grad_w.to(weight.dtype), None if grad_b is None else grad_b.to(bias.dtype), None


def softmax_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Full-catalog cross-entropy of hidden states ``h`` (N, D) against item embeddings ``weight`` (I, D).

    Memory is bounded by the chunk size, not by ``N x I``; column 0 is padding and never a class.
    """
    return _ChunkedSoftmaxCE.apply(h, weight, bias, target)
