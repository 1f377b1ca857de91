"""The few pieces SASRec and BERT4Rec share word for word: attention, FFN, batch helpers."""

from __future__ import annotations

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
    ``user * (n_items + 1) + item`` keys of the training data. Collisions are redrawn (a few
    rounds; with realistic catalogs almost none remain).
    """
    neg = rng.integers(1, n_items + 1, size=shape)
    u = np.broadcast_to(users.reshape((-1,) + (1,) * (len(shape) - 1)), shape)
    for _ in range(10):
        keys = u * (n_items + 1) + neg
        pos = np.searchsorted(seen_keys, keys).clip(0, len(seen_keys) - 1)
        bad = seen_keys[pos] == keys
        if not bad.any():
            break
        neg[bad] = rng.integers(1, n_items + 1, size=int(bad.sum()))
    return neg
