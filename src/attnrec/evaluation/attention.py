"""Attention insight for the self-attention models (SASRec, BERT4Rec), computed from a model.

* :func:`attention_summary` averages a fitted model's attention weights over a set of users,
  per layer and head: by absolute position (the SASRec paper's heat-maps: query position x key
  position, positions counted back from the most recent one) and by relative offset
  (key position - query position).
* :func:`plot_attention` draws those heat-maps and offset profiles to PNG (matplotlib is an
  optional dependency, imported only here: ``pip install attnrec[plot]``).
* :func:`history_attention` shows, for one history, which items the predicting position attended
  to most (last layer, mean over heads, plus attention rollout through all layers);
  :func:`attnrec.recommend.explain_rec.explain_recommendation` pairs it with a recommendation.

Everything here takes the model itself (an :class:`AttentionModel`: ``attention_weights(seq)``
plus ``score_inputs(users, histories)["seq"]`` as its input) with internal-index histories and ID
maps, never the user-level recommender. Positions are left-padded, so column ``T - 1`` is the
predicting position: SASRec's newest item, BERT4Rec's appended [mask] (a token above the item
range).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable  # Any: JSON-ready dicts

import numpy as np
import torch

from attnrec.data.schema import IdMap, Interactions, Sequences
from attnrec.models.contracts import AttentionInspectable, Scorer

MASK_PREDICTS = "[mask] after the history"
NEWEST_PREDICTS = "the most recent history item"


@runtime_checkable
class AttentionModel(Scorer, AttentionInspectable, Protocol):
    """What attention insight reads: the model's own inputs and its per-layer attention maps."""

    def eval(self) -> object:
        """Inference mode (dropout off)."""
        ...


def as_attention_model(model: object, name: str) -> AttentionModel:
    """``model`` as an :class:`AttentionModel`; a clear :class:`ValueError` when it has no attention to
    show."""
    if not isinstance(model, AttentionModel):
        raise ValueError(f"{name}: the model has no attention weights to show")
    return model


@dataclass
class AttentionSummary:
    """Attention averaged over users; every array is indexed ``[layer, head, ...]``.

    ``absolute[l, h, i, j]`` is the mean weight that query position ``i`` puts on key position
    ``j`` over the users whose position ``i`` holds a real token (``query_counts[i]`` of them).
    ``relative[l, h, d + T - 1]`` is the mean attention mass a real query puts on the key ``d``
    positions after it (``d < 0``: earlier items). Position ``T - 1`` is the predicting position.
    """

    model: str
    n_users: int
    absolute: np.ndarray  # (L, H, T, T)
    relative: np.ndarray  # (L, H, 2T - 1)
    query_counts: np.ndarray  # (T,)
    predicting: str  # what sits at position T - 1
    users: list[str] = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.absolute.shape[-1])

    def offsets(self) -> np.ndarray:
        return np.arange(-(self.length - 1), self.length)

    def recent_share(self, k: int = 5) -> np.ndarray:
        """``(L, H)`` share of the predicting position's attention on the last ``k`` positions."""
        return np.asarray(self.absolute[:, :, -1, -k:].sum(-1))

    def to_dict(self, window: int = 20) -> dict[str, Any]:
        """JSON-ready summary restricted to the last ``window`` positions and offsets ``|d| < window``."""
        w = min(window, self.length)
        rel = self.relative[:, :, self.length - w : self.length + w - 1]
        return {
            "model": self.model,
            "n_users": self.n_users,
            "length": self.length,
            "window": w,
            "predicting_position": self.predicting,
            "positions": list(range(-(w - 1), 1)),  # 0 = the predicting position
            "absolute": np.round(self.absolute[:, :, -w:, -w:], 6).tolist(),
            "query_counts": self.query_counts[-w:].tolist(),
            "offsets": list(range(-(w - 1), w)),
            "relative": np.round(rel, 6).tolist(),
            "recent_share_5": np.round(self.recent_share(5), 4).tolist(),
        }


def _model_input(
    model: AttentionModel, users: np.ndarray, histories: Sequences, device: torch.device
) -> torch.Tensor:
    return model.score_inputs(users, histories)["seq"].to(device)  # (B, T)


def _predicting(seq: torch.Tensor, n_items: int) -> str:
    """What sits at the predicting position ``T - 1`` of ``seq`` ``(B, T)``: a [mask] is above the item
    range."""
    return MASK_PREDICTS if bool((seq[:, -1] > n_items).any()) else NEWEST_PREDICTS


def attention_summary(
    model: object,
    histories: Sequences,
    user_ids: Sequence[str],
    *,
    name: str,
    max_len: int,
    device: torch.device | None = None,
    n_users: int = 1000,
    seed: int = 0,
    batch_size: int = 256,
) -> AttentionSummary:
    """Average attention of ``model`` over ``n_users`` users drawn with ``seed`` (or all if fewer).

    ``histories`` are internal-index sequences whose rows ``user_ids`` name; ``max_len`` is the
    model's window (the summary's ``T``); ``name`` labels the summary; inputs go to ``device``.
    """
    att = as_attention_model(model, name)
    device = device or torch.device("cpu")
    candidates = np.flatnonzero(histories.lengths() > 0)
    if len(candidates) == 0:
        raise ValueError("no user with a non-empty history")
    rng = np.random.default_rng([seed, 31])
    chosen = np.sort(rng.choice(candidates, min(n_users, len(candidates)), replace=False))
    # Batches may be padded to their own longest history; positions are right-aligned, so a batch of
    # width w fills the last w rows and columns of the full (max_len) accumulators.
    t_full = int(max_len)
    abs_sum: torch.Tensor | None = None
    counts = torch.zeros(t_full)
    predicting = NEWEST_PREDICTS
    att.eval()
    with torch.no_grad():
        for lo in range(0, len(chosen), batch_size):
            rows = chosen[lo : lo + batch_size]
            seq = _model_input(att, rows, histories.take(rows), device)  # (B, W)
            predicting = _predicting(seq, histories.n_items)
            real = (seq > 0).float()  # (B, W), [mask] counts as real
            w = torch.stack(att.attention_weights(seq), 1).float()  # (B, L, H, W, W)
            w = (w * real[:, None, None, :, None]).sum(0).cpu()  # (L, H, W, W), real queries only
            if abs_sum is None:
                abs_sum = torch.zeros(*w.shape[:2], t_full, t_full)
            width = w.shape[-1]
            abs_sum[:, :, t_full - width :, t_full - width :] += w
            counts[t_full - width :] += real.sum(0).cpu()
    assert abs_sum is not None
    n_layers, n_heads, t, _ = abs_sum.shape
    absolute = (abs_sum / counts.clamp(min=1)[None, None, :, None]).numpy()
    # Offset d = j - i of every (query i, key j) cell, shifted to 0..2T-2.
    d = (torch.arange(t)[None, :] - torch.arange(t)[:, None] + t - 1).flatten()  # (T*T,)
    rel = torch.zeros(n_layers, n_heads, 2 * t - 1, dtype=abs_sum.dtype)
    rel.index_add_(2, d, abs_sum.reshape(n_layers, n_heads, t * t))
    relative = (rel / counts.sum().clamp(min=1)).numpy()
    return AttentionSummary(
        name,
        len(chosen),
        absolute,
        relative,
        counts.numpy().astype(np.int64),
        predicting,
        [user_ids[i] for i in chosen],
    )


def histories_from_data(items: IdMap, data: Interactions) -> tuple[Sequences, list[str]]:
    """The sequences of ``data`` in the internal indices of ``items`` (a model's item map; items it
    does not know are dropped), and ``data``'s user IDs naming their rows."""
    ext = data.items.to_list()
    to_model = np.zeros(data.n_items + 1, dtype=np.int64)
    for i, e in enumerate(ext, start=1):
        to_model[i] = items.get(e) or 0
    seqs = data.sequences()
    mapped = to_model[seqs.items]
    keep = mapped > 0
    owner = seqs.owners()
    lengths = np.bincount(owner[keep], minlength=seqs.n_users)
    offsets = np.zeros(seqs.n_users + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Sequences(offsets, mapped[keep], len(items)), data.users.to_list()


def plot_attention(summary: AttentionSummary, out: str | Path, window: int = 15) -> list[Path]:
    """Write ``attention_heatmap.png`` (per layer x head, plus the head mean) and
    ``attention_offsets.png``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError("plotting needs matplotlib: pip install 'attnrec[plot]'") from e
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n_layers, n_heads = summary.absolute.shape[:2]
    w = min(window, summary.length)
    ticks = list(range(w - 1, -1, -max(1, w // 5)))[::-1]  # always include 0, the predicting position
    labels = [str(i - (w - 1)) for i in ticks]
    fig, axes = plt.subplots(
        n_layers, n_heads + 1, figsize=(3.2 * (n_heads + 1), 3.0 * n_layers), squeeze=False
    )
    for layer in range(n_layers):
        maps = [summary.absolute[layer, h, -w:, -w:] for h in range(n_heads)]
        maps.append(np.mean(maps, axis=0))
        for h, m in enumerate(maps):
            ax = axes[layer][h]
            im = ax.imshow(m, cmap="viridis", vmin=0.0)
            ax.set_title(
                f"layer {layer + 1}, " + ("mean of heads" if h == n_heads else f"head {h + 1}"), fontsize=9
            )
            ax.set_xticks(ticks, labels, fontsize=7)
            ax.set_yticks(ticks, labels, fontsize=7)
            ax.set_xlabel("key position (0 = predicting)", fontsize=7)
            ax.set_ylabel("query position", fontsize=7)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(
        f"{summary.model}: mean attention over {summary.n_users} users (last {w} positions; "
        f"0 = {summary.predicting})",
        fontsize=10,
    )
    fig.tight_layout()
    heat = out / "attention_heatmap.png"
    fig.savefig(heat, dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, n_layers, figsize=(4.5 * n_layers, 3.2), squeeze=False)
    offs = summary.offsets()
    sel = np.abs(offs) < w
    for layer in range(n_layers):
        ax = axes[0][layer]
        for h in range(n_heads):
            ax.plot(offs[sel], summary.relative[layer, h, sel], marker=".", label=f"head {h + 1}")
        ax.set_title(f"layer {layer + 1}", fontsize=9)
        ax.set_xlabel("key offset from the query (negative = earlier)", fontsize=8)
        ax.set_ylabel("mean attention mass", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(f"{summary.model}: attention by relative position", fontsize=10)
    fig.tight_layout()
    rel = out / "attention_offsets.png"
    fig.savefig(rel, dpi=110)
    plt.close(fig)
    return [heat, rel]


@dataclass
class AttendedItem:
    """One history item with the attention the predicting position put on it."""

    item: str
    title: str | None
    back: int  # 0 = the most recent history item
    weight: float  # last layer, mean over heads
    rollout: float  # attention rollout through all layers (residual counted as 0.5 identity)
    per_layer: list[float]


@dataclass
class HistoryAttention:
    """The history items of one input ranked by the attention the predicting position put on them."""

    predicting: str
    attended: list[AttendedItem]  # most attended first
    self_weight: float  # last-layer attention of the predicting [mask] on itself (0 for SASRec)
    history_length: int
    window: int  # history items the model saw (the most recent ones)


def history_attention(
    model: object,
    history: np.ndarray,
    items: IdMap,
    titles: Mapping[str, str],
    *,
    name: str,
    user: int = 0,
    device: torch.device | None = None,
) -> HistoryAttention:
    """Rank the items of ``history`` (internal indices, oldest first) by the attention the predicting
    position put on them; ``user`` is the internal user index fed to the model.

    ``rollout`` multiplies the head-averaged attention of all layers (each mixed half and half with
    the identity for the residual connection), following Abnar & Zuidema (2020).
    """
    att = as_attention_model(model, name)
    if len(history) == 0:
        raise ValueError("the history has no known items; there is no attention to show")
    n_items = len(items)
    seqs = Sequences(np.array([0, len(history)]), np.asarray(history, dtype=np.int64), n_items)
    att.eval()
    with torch.no_grad():
        seq = _model_input(att, np.array([user]), seqs, device or torch.device("cpu"))  # (1, T)
        maps = [a[0].float().mean(0).cpu() for a in att.attention_weights(seq)]  # L x (T, T)
    t = seq.shape[1]
    roll = torch.eye(t)
    for a in maps:
        a = 0.5 * a + 0.5 * torch.eye(t)
        roll = (a / a.sum(-1, keepdim=True)) @ roll
    tokens = seq[0].cpu().numpy()
    cols = np.flatnonzero((tokens > 0) & (tokens <= n_items))  # history items in the window
    attended = []
    for n, j in enumerate(cols):
        ext = items.to_external([int(tokens[j])])[0]
        attended.append(
            AttendedItem(
                ext,
                titles.get(ext),
                len(cols) - 1 - n,
                float(maps[-1][t - 1, j]),
                float(roll[t - 1, j]),
                [round(float(a[t - 1, j]), 6) for a in maps],
            )
        )
    attended.sort(key=lambda a: -a.weight)
    self_w = float(maps[-1][t - 1, t - 1]) if tokens[t - 1] > n_items else 0.0
    return HistoryAttention(_predicting(seq, n_items), attended, self_w, len(history), len(cols))


__all__ = [
    "AttendedItem",
    "AttentionModel",
    "AttentionSummary",
    "HistoryAttention",
    "as_attention_model",
    "attention_summary",
    "histories_from_data",
    "history_attention",
    "plot_attention",
]
