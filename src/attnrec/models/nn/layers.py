"""The transformer pieces the models share word for word: multi-head attention, the FFN, dropout,
initialisation."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention; queries and keys/values may come from different inputs."""

    def __init__(self, hidden: int, n_heads: int, dropout: float, project: bool = True) -> None:
        # project=False: heads concatenated without an output layer (SASRec's authors' code)
        super().__init__()
        if hidden % n_heads:
            raise ValueError(f"hidden size {hidden} is not divisible by {n_heads} heads")
        self.n_heads, self.dropout = n_heads, dropout
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.out: nn.Module = nn.Linear(hidden, hidden) if project else nn.Identity()

    def forward(
        self, x_q: torch.Tensor, x_kv: torch.Tensor, allowed: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention output ``(B, Tq, D)`` and, with ``need_weights``, its probabilities
        ``(B, H, Tq, T)``.

        ``x_q`` ``(B, Tq, D)`` holds the queries and ``x_kv`` ``(B, T, D)`` the keys and values
        (``Tq < T`` when only the last positions are wanted, e.g. at inference). ``allowed``: a float
        mask added to the logits, broadcastable to ``(B, H, Tq, T)`` (:mod:`attnrec.models.nn.masks`), or
        a bool one, True where query t may attend to key s. The probabilities are the dropout-free ones, for
        inspection; the output always comes from the fused kernel, so asking for them changes nothing else.
        """
        b, tq, d = x_q.shape
        t, h = x_kv.shape[1], self.n_heads
        q = self.q(x_q).view(b, tq, h, d // h).transpose(1, 2)  # (B, H, Tq, D/H)
        k = self.k(x_kv).view(b, t, h, d // h).transpose(1, 2)  # (B, H, T, D/H)
        v = self.v(x_kv).view(b, t, h, d // h).transpose(1, 2)  # (B, H, T, D/H)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p)  # (B, H, Tq, D/H)
        weights = None
        if need_weights:
            logits = q @ k.transpose(-1, -2) / (d // h) ** 0.5  # (B, H, Tq, T)
            # a float mask (time-interval biases, -inf where not allowed) adds to the logits as in the kernel
            masked = (
                logits + allowed if allowed.is_floating_point() else logits.masked_fill(~allowed, -torch.inf)
            )
            weights = masked.softmax(-1)  # (B, H, Tq, T)
        out: torch.Tensor = self.out(y.transpose(1, 2).reshape(b, tq, d))  # (B, Tq, D)
        return out, weights


class FastDropout(nn.Module):
    """Dropout whose masks come from 16-bit random integers, four from each 64-bit draw of torch's generator.

    ``nn.Dropout`` draws a Bernoulli variable per element, which on CPU costs more than the layer it
    follows in a small model (8-33 ms for a ``(128, 50..200, 64)`` batch, one thread); these masks take
    40-55% of that. Each element is kept with probability ``1 - p`` rounded to 1/32768 and scaled by
    ``1 / (1 - p)``. The random stream differs from ``nn.Dropout``'s, so results are not bit for bit
    those of a model with ``nn.Dropout``; seeded the same, it repeats itself exactly.
    """

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` with each element zeroed with probability ``p`` and the others scaled (training only)."""
        if not self.training or self.p == 0:
            return x
        if self.p >= 1:
            return x * 0.0
        n = x.numel()
        bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_()  # 63 random bits each
        lanes = bits.view(torch.int16)[:n].view(x.shape)  # the low 15 bits of every 16-bit lane are uniform
        keep = (lanes & 0x7FFF) >= round(self.p * 32768)  # (x.shape) True with probability 1 - p
        return x * (keep.to(x.dtype) * (1.0 / (1.0 - self.p)))


def dropout(p: float, fast: bool = False) -> nn.Module:
    """``nn.Dropout(p)``, or :class:`FastDropout` with ``fast`` (a model's ``fast_dropout`` option)."""
    return FastDropout(p) if fast else nn.Dropout(p)


class PointWiseFeedForward(nn.Module):
    """Two position-wise linear layers with an activation and dropout after each."""

    def __init__(
        self, hidden: int, inner: int, dropout_p: float, activation: str, fast_dropout: bool = False
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, inner)
        self.fc2 = nn.Linear(inner, hidden)
        self.act: nn.Module = nn.GELU() if activation == "gelu" else nn.ReLU()
        self.drop = dropout(dropout_p, fast_dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` -> ``(B, T, D)``."""
        out: torch.Tensor = self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))
        return out


def init_xavier(module: nn.Module) -> None:
    """Every matrix (embeddings included) Xavier-normal, every other parameter zero except the LayerNorms'
    (names with ``ln``), in ``named_parameters`` order (the SASRec and eSASRec authors' initialisation)."""
    for name, p in module.named_parameters():
        if p.dim() > 1:
            nn.init.xavier_normal_(p)
        elif "ln" not in name:
            nn.init.zeros_(p)
