"""Attention insight for the self-attention models (SASRec, BERT4Rec).

* :func:`attention_summary` averages a fitted model's attention weights over a set of users,
  per layer and head: by absolute position (the SASRec paper's heat-maps: query position x key
  position, positions counted back from the most recent one) and by relative offset
  (key position - query position).
* :func:`plot_attention` draws those heat-maps and offset profiles to PNG (matplotlib is an
  optional dependency, imported only here: ``pip install attnrec[plot]``).
* :func:`explain_recommendation` shows, for one recommendation, which history items the
  predicting position attended to most (last layer, mean over heads, plus attention rollout
  through all layers).

The model must provide ``attention_weights(seq) -> list[Tensor[B, H, T, T]]`` and take
``score_inputs(users, histories)["seq"]`` as its input. Positions are left-padded, so column
``T - 1`` is the predicting position: SASRec's newest item, BERT4Rec's appended [mask].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnrec.data.schema import Interactions, Sequences

if TYPE_CHECKING:  # evaluation sits below the recommender layer: types only
    from attnrec.recommender import Recommendation, Recommender


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
        return self.absolute[:, :, -1, -k:].sum(-1)

    def to_dict(self, window: int = 20) -> dict[str, Any]:
        """JSON-ready summary restricted to the last ``window`` positions and offsets ``|d| < window``."""
        w = min(window, self.length)
        rel = self.relative[:, :, self.length - w : self.length + w - 1]
        return {
            "model": self.model, "n_users": self.n_users, "length": self.length, "window": w,
            "predicting_position": self.predicting,
            "positions": list(range(-(w - 1), 1)),  # 0 = the predicting position
            "absolute": np.round(self.absolute[:, :, -w:, -w:], 6).tolist(),
            "query_counts": self.query_counts[-w:].tolist(),
            "offsets": list(range(-(w - 1), w)),
            "relative": np.round(rel, 6).tolist(),
            "recent_share_5": np.round(self.recent_share(5), 4).tolist(),
        }  # fmt: skip


def _model_input(rec: Recommender, users: np.ndarray, histories: Sequences) -> torch.Tensor:
    core = rec.core
    if not hasattr(core, "attention_weights"):
        raise TypeError(f"{rec.name}: the model has no attention weights to show")
    return core.score_inputs(users, histories)["seq"].to(rec.device)


def attention_summary(
    rec: Recommender,
    histories: Sequences | None = None,
    *,
    n_users: int = 1000,
    seed: int = 0,
    user_ids: list[str] | None = None,
    batch_size: int = 256,
) -> AttentionSummary:
    """Average attention of ``rec`` over ``n_users`` users drawn with ``seed`` (or all if fewer).

    ``histories`` are internal-index sequences (default: the histories stored with the model);
    ``user_ids`` name their rows (default: the model's user IDs).
    """
    rec._require_fitted()
    hist = rec.histories_ if histories is None else histories
    assert hist is not None and rec.users_ is not None
    names = user_ids if user_ids is not None else rec.users_.to_list()
    candidates = np.flatnonzero(hist.lengths() > 0)
    if len(candidates) == 0:
        raise ValueError("no user with a non-empty history")
    rng = np.random.default_rng([seed, 31])
    chosen = np.sort(rng.choice(candidates, min(n_users, len(candidates)), replace=False))
    # Batches may be padded to their own longest history; positions are right-aligned, so a batch of
    # width w fills the last w rows and columns of the full (max_len) accumulators.
    t_full = int(rec.core.config.max_len)
    abs_sum: torch.Tensor | None = None
    counts = torch.zeros(t_full)
    rec.core.eval()
    with torch.no_grad():
        for lo in range(0, len(chosen), batch_size):
            rows = chosen[lo : lo + batch_size]
            seq = _model_input(rec, rows, hist.take(rows))  # (B, W)
            real = (seq > 0).float()  # (B, W), [mask] counts as real
            w = torch.stack(rec.core.attention_weights(seq), 1).float()  # (B, L, H, W, W)
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
    predicting = "[mask] after the history" if rec.name == "bert4rec" else "the most recent history item"
    return AttentionSummary(rec.name, len(chosen), absolute, relative, counts.numpy().astype(np.int64),
                            predicting, [names[i] for i in chosen])


def histories_from_data(rec: Recommender, data: Interactions) -> tuple[Sequences, list[str]]:
    """The sequences of ``data`` in ``rec``'s item indices (items the model does not know are dropped)."""
    rec._require_fitted()
    assert rec.items_ is not None
    ext = data.items.to_list()
    to_model = np.zeros(data.n_items + 1, dtype=np.int64)
    for i, e in enumerate(ext, start=1):
        to_model[i] = rec.items_.get(e) or 0
    seqs = data.sequences()
    mapped = to_model[seqs.items]
    keep = mapped > 0
    owner = np.repeat(np.arange(seqs.n_users), seqs.lengths())
    lengths = np.bincount(owner[keep], minlength=seqs.n_users)
    offsets = np.zeros(seqs.n_users + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Sequences(offsets, mapped[keep], len(rec.items_)), data.users.to_list()


def plot_attention(summary: AttentionSummary, out: str | Path, window: int = 15) -> list[Path]:
    """Write ``attention_heatmap.png`` (per layer x head, plus the head mean) and ``attention_offsets.png``."""
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
    fig, axes = plt.subplots(n_layers, n_heads + 1, figsize=(3.2 * (n_heads + 1), 3.0 * n_layers), squeeze=False)
    for layer in range(n_layers):
        maps = [summary.absolute[layer, h, -w:, -w:] for h in range(n_heads)]
        maps.append(np.mean(maps, axis=0))
        for h, m in enumerate(maps):
            ax = axes[layer][h]
            im = ax.imshow(m, cmap="viridis", vmin=0.0)
            ax.set_title(f"layer {layer + 1}, " + ("mean of heads" if h == n_heads else f"head {h + 1}"), fontsize=9)
            ax.set_xticks(ticks, labels, fontsize=7)
            ax.set_yticks(ticks, labels, fontsize=7)
            ax.set_xlabel("key position (0 = predicting)", fontsize=7)
            ax.set_ylabel("query position", fontsize=7)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(f"{summary.model}: mean attention over {summary.n_users} users (last {w} positions; "
                 f"0 = {summary.predicting})", fontsize=10)
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
class RecExplanation:
    """A recommendation and the history items that drove it, most attended first."""

    model: str
    user: str | None
    recommendation: Recommendation
    predicting: str
    attended: list[AttendedItem]
    self_weight: float  # last-layer attention of the predicting [mask] on itself (0 for SASRec)
    history_length: int
    window: int  # history items the model saw (the most recent ones)

    def to_dict(self) -> dict[str, Any]:
        r = self.recommendation
        return {"model": self.model, "user": self.user, "predicting_position": self.predicting,
                "history_length": self.history_length, "items_seen_by_model": self.window,
                "recommended": [{"item": i, "title": t, "score": s} for i, t, s in zip(r.items, r.titles, r.scores, strict=True)],
                "attended": [a.__dict__ for a in self.attended], "self_weight": self.self_weight}


def explain_recommendation(
    rec: Recommender,
    user: object | None = None,
    history: list[object] | None = None,
    *,
    k: int = 10,
    top: int = 10,
) -> RecExplanation:
    """Recommend for ``user`` (or an ad-hoc ``history`` of external item IDs) and rank the history
    items by the attention the predicting position put on them.

    Attention belongs to the predicting position, so the ranking is shared by the whole top-``k``
    list. ``rollout`` multiplies the head-averaged attention of all layers (each mixed half and
    half with the identity for the residual connection), following Abnar & Zuidema (2020).
    """
    rec._require_fitted()
    assert rec.items_ is not None and rec.users_ is not None and rec.histories_ is not None
    r = rec.recommend(user=user, history=history, k=k)
    uid = 0
    if history is not None:
        hist = rec.items_.split_known(history)[0]
    else:
        idx = rec.users_.get(user)
        if idx is None:
            raise KeyError(f"unknown user {user!r}")
        uid, hist = idx, rec.histories_[idx]
    if len(hist) == 0:
        raise ValueError("the history has no known items; there is no attention to show")
    seqs = Sequences(np.array([0, len(hist)]), np.asarray(hist, dtype=np.int64), len(rec.items_))
    rec.core.eval()
    with torch.no_grad():
        seq = _model_input(rec, np.array([uid]), seqs)  # (1, T)
        maps = [a[0].float().mean(0).cpu() for a in rec.core.attention_weights(seq)]  # L x (T, T)
    t = seq.shape[1]
    roll = torch.eye(t)
    for a in maps:
        a = 0.5 * a + 0.5 * torch.eye(t)
        roll = (a / a.sum(-1, keepdim=True)) @ roll
    tokens = seq[0].cpu().numpy()
    cols = np.flatnonzero((tokens > 0) & (tokens <= len(rec.items_)))  # history items in the window
    attended = []
    for n, j in enumerate(cols):
        ext = rec.items_.to_external([int(tokens[j])])[0]
        attended.append(AttendedItem(ext, rec.titles_.get(ext), len(cols) - 1 - n, float(maps[-1][t - 1, j]),
                                     float(roll[t - 1, j]), [round(float(a[t - 1, j]), 6) for a in maps]))
    attended.sort(key=lambda a: -a.weight)
    self_w = float(maps[-1][t - 1, t - 1]) if tokens[t - 1] > len(rec.items_) else 0.0
    predicting = "[mask] after the history" if rec.name == "bert4rec" else "the most recent history item"
    return RecExplanation(rec.name, None if user is None else str(user), r, predicting, attended[:top], self_w,
                          len(hist), len(cols))
