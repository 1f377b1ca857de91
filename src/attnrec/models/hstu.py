"""HSTU: hierarchical sequential transduction units (Zhai et al., ICML 2024).

"Actions Speak Louder than Words: Trillion-Parameter Sequential Transducers for Generative
Recommendations"; the settings follow the authors' code (facebookresearch/generative-recommenders,
``modeling/sequential/hstu.py`` and ``configs/ml-1m/*.gin``). One HSTU layer, for input ``X``:

    U, V, Q, K = Split(SiLU(f1(LayerNorm(X))))             f1: one bias-free linear map
    A(X) V     = (SiLU(Q K^T + rab^{p,t}) / n  *  causal) V  pointwise: the rows are NOT normalised
    Y(X)       = X + f2(Dropout(LayerNorm(A(X) V) * U))

``n`` is a constant (here ``max_len``), never the row's length, so the weight of an earlier item
does not shrink as a history grows, and a history's output does not depend on how wide its batch
was padded. ``rab^{p,t}`` is a learned relative attention bias shared by the heads of a layer: one
weight per relative position ``i - j``, plus, when the batch carries per-event ``timestamps``,
one weight per bucket ``floor(ln(max(|t_i - t_j|, 1)) / 0.301)`` of the time gap (the
reference's bucketing, up to ``time_buckets``).

The input is the reference's: item embeddings times ``sqrt(d)`` plus learned absolute positions
counted from the oldest item of the window, dropout, padding zeroed. The output is L2-normalised;
items are L2-normalised too, and a score is their dot product divided by ``temperature`` (cosine
similarity / 0.05 in the reference), so ``score == query_vectors @ item_vectors.T``.
Attributions (:class:`~attnrec.models.contracts.EmbeddingInputs`) take as a position's content
the item's raw embedding row, before the ``sqrt(d)`` scaling and positions; the L2 normalisation
belongs to the output item vectors only, so it never enters the content.

Objective: causal next-item prediction at every position with a sampled softmax (the reference:
128 uniform negatives, temperature 0.05, accidental hits masked), or ``loss="ce"``, a full softmax
over the catalog. Two choices differ from the reference, both documented in ``docs/explanation/models.md``:
negatives are drawn per training sequence (``negatives="sequence"``, the presets; shared by the
sequence's positions) or per batch (``"batch"``, the library's cheapest sampled softmax,
:class:`~attnrec.models.objectives.negatives.SharedNegatives`), where the reference draws 128 per position
(``O(positions x negatives x d)`` memory; ``negatives="position"`` draws that way too); on ML-1M the
batch's 128 learned far more slowly than the sequence's. And a time gap is measured from the query
event's own timestamp, so no position sees anything of the event it predicts (the reference measures
from the next event's timestamp).

Timestamps: an optional batch entry ``"timestamps"`` ``(B, T)`` int64 seconds aligned with
``"seq"`` (``<= 0``: padding or unknown, and then no time bias for that pair). :meth:`HSTU.train_batches`
and :meth:`HSTU.score_inputs` fill it from the sequences' ``timestamp`` column when they have one
(logs without timestamps, e.g. ``ml-1m.txt``, use the relative position bias only).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.schema import TIMESTAMP, Sequences
from attnrec.models.batches.builders import ShiftedNextItem
from attnrec.models.contracts import Batch
from attnrec.models.event_context import LOG_BUCKET_WIDTH, TIMESTAMPS, log_bucket
from attnrec.models.nn.masks import causal_mask
from attnrec.models.nn.wrapper import FULL, Encoded, Pass, SequentialWrapper
from attnrec.models.objectives import ItemTable, build_objective, check_negative_counts, check_objective
from attnrec.models.registry import register
from attnrec.models.validation import require_positive_fields

LOSSES = ("sampled_ce", "ce")  # the objectives HSTU trains with (attnrec.models.objectives)

TIME_BUCKET_WIDTH = (
    LOG_BUCKET_WIDTH  # the reference divides ln(gap in seconds) by this: a bucket spans a factor 1.35
)
EPS = 1e-6  # the reference's epsilon for its layer norms and L2 normalisations


@dataclass(frozen=True)
class HSTUConfig:
    """HSTU hyperparameters (defaults: the reference's ML-1M HSTU,
    ``hstu-sampled-softmax-n128-final.gin``)."""

    hidden: int = 50  # d, the item embedding and model width
    n_layers: int = 2
    n_heads: int = 1
    dqk: int = 50  # query/key width per head
    dv: int = 50  # value (and U) width per head
    max_len: int = 200  # n, the most recent items used; also the attention's constant divisor
    dropout: float = 0.2  # on the input embeddings and before f2 (the reference's dropout and linear dropout)
    time_buckets: int = 128  # log time-gap buckets of the relative bias (used only with timestamps)
    temperature: float = 0.05  # scores are cosine similarities divided by this
    loss: str = "sampled_ce"  # "sampled_ce" (the reference) or "ce" (full softmax over the catalog)
    n_negatives: int = 128  # sampled_ce: catalog negatives per batch (or per sequence, see negatives)
    sampler: str = "uniform"  # sampled_ce catalog negatives: "uniform" (the reference), "popularity", "mixed"
    in_batch_negatives: int = 0  # sampled_ce: also this many negatives drawn from the batch's targets
    negatives: str = "batch"  # sampled_ce: drawn once per "batch", per training "sequence" or per "position"

    def __post_init__(self) -> None:
        check_objective(self, LOSSES)  # the loss, its sampler and who draws its negatives
        require_positive_fields(self, "hidden", "n_layers", "n_heads", "dqk", "dv", "max_len", "time_buckets")
        if not 0.0 <= self.dropout < 1.0 or self.temperature <= 0:
            raise ValueError("dropout must be in [0, 1) and temperature > 0")
        check_negative_counts(self.n_negatives, self.in_batch_negatives)


def time_buckets(timestamps: torch.Tensor, n_buckets: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bucket ``(B, T, T)`` of every (query i, key j) time gap, and whether both times are known.

    ``floor(ln(max(|t_i - t_j|, 1 s)) / 0.301)``, at most ``n_buckets``; a pair with a timestamp
    ``<= 0`` (padding or unknown) is not known and gets no time bias.
    """
    ts = timestamps.long()  # (B, T) seconds
    gap = (ts[:, :, None] - ts[:, None, :]).abs()  # (B, T, T)
    bucket = log_bucket(gap, n_buckets)  # (B, T, T) the reference's bucketing, shared with SASRec/BERT4Rec
    known = (ts > 0)[:, :, None] & (ts > 0)[:, None, :]  # (B, T, T)
    return bucket, known


class RelativeBias(nn.Module):
    """rab^{p,t}: one weight per relative position i - j and one per time-gap bucket (one layer's, all
    heads')."""

    def __init__(self, max_len: int, n_buckets: int) -> None:
        super().__init__()
        # Causal attention only ever looks back, so offsets 0..max_len-1 are all there is.
        self.pos_w = nn.Parameter(torch.empty(max_len).normal_(0.0, 0.02))
        self.time_w = nn.Parameter(torch.empty(n_buckets + 1).normal_(0.0, 0.02))

    def forward(self, offsets: torch.Tensor, times: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        """The bias ``(1 or B, Tq, T)`` for ``offsets`` ``(Tq, T)`` = i - j and optional ``time_buckets``
        rows."""
        bias = self.pos_w[offsets][None]  # (1, Tq, T)
        if times is None:
            return bias
        bucket, known = times  # (B, Tq, T) each
        return bias + self.time_w[bucket] * known  # (B, Tq, T)


class HSTUBlock(nn.Module):
    """One HSTU layer: pointwise projection, pointwise (SiLU) aggregated attention, pointwise
    transformation."""

    def __init__(self, c: HSTUConfig) -> None:
        super().__init__()
        self.heads, self.dqk, self.dv, self.n = c.n_heads, c.dqk, c.dv, c.max_len
        self.norm_in = nn.LayerNorm(c.hidden, eps=EPS, elementwise_affine=False)
        self.f1 = nn.Linear(c.hidden, 2 * c.n_heads * (c.dv + c.dqk), bias=False)  # U, V, Q, K in one matmul
        self.rab = RelativeBias(c.max_len, c.time_buckets)
        self.norm_attn = nn.LayerNorm(c.n_heads * c.dv, eps=EPS, elementwise_affine=False)  # over all heads
        self.drop = nn.Dropout(c.dropout)
        self.f2 = nn.Linear(c.n_heads * c.dv, c.hidden)
        nn.init.normal_(self.f1.weight, 0.0, 0.02)
        nn.init.xavier_uniform_(self.f2.weight)

    def forward(
        self,
        x: torch.Tensor,
        allowed: torch.Tensor,
        offsets: torch.Tensor,
        times: tuple[torch.Tensor, torch.Tensor] | None,
        need_weights: bool = False,
        last: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The layer's output ``(B, Tq, D)`` and, with ``need_weights``, its attention ``(B, H, Tq, T)``.

        ``allowed`` ``(B, 1, Tq, T)``, ``offsets`` ``(Tq, T)`` and ``times`` ``(B, Tq, T)`` describe the
        wanted query rows: all ``T`` positions, or with ``last > 0`` the last ``last`` ones only (they
        still attend to every position; nothing is computed for the other queries).
        """
        b, t, _ = x.shape
        h = self.heads
        uvqk = F.silu(self.f1(self.norm_in(x)))  # (B, T, 2H(dv + dqk))
        u, v, q, k = torch.split(uvqk, [h * self.dv, h * self.dv, h * self.dqk, h * self.dqk], dim=-1)
        if last:  # keys and values come from every position; queries, U and the residual from the last
            x, u, q = x[:, -last:], u[:, -last:], q[:, -last:]  # (B, Tq, .)
        tq = q.shape[1]
        qh = q.reshape(b, tq, h, self.dqk).transpose(1, 2)  # (B, H, Tq, dqk)
        kh = k.reshape(b, t, h, self.dqk).transpose(1, 2)  # (B, H, T, dqk)
        vh = v.reshape(b, t, h, self.dv).transpose(1, 2)  # (B, H, T, dv)
        logits = (
            qh @ kh.transpose(-1, -2) + self.rab(offsets, times)[:, None]
        )  # (B, H, Tq, T), no 1/sqrt(dqk)
        # Pointwise aggregated attention: SiLU instead of a softmax, so a row's weights need not sum
        # to 1 and the number and strength of matching past actions survive; / n keeps them small.
        weights = (F.silu(logits) / self.n).masked_fill(~allowed, 0.0)  # (B, H, Tq, T)
        av = (weights @ vh).transpose(1, 2).reshape(b, tq, h * self.dv)  # (B, Tq, H dv)
        y = self.f2(self.drop(self.norm_attn(av) * u))  # (B, Tq, D): U gates the normalised aggregate
        return x + y, weights if need_weights else None  # (B, Tq, D)


class HSTUBackbone(nn.Module):
    """HSTU's network: scaled item embeddings plus positions, pointwise causal attention blocks with
    relative position/time bias, L2-normalised states."""

    def __init__(self, config: HSTUConfig, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.item_emb = nn.Embedding(n_items + 1, c.hidden, padding_idx=0)
        self.pos_emb = nn.Embedding(c.max_len, c.hidden)
        self.emb_drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(HSTUBlock(c) for _ in range(c.n_layers))
        nn.init.trunc_normal_(self.item_emb.weight, 0.0, 0.02, -0.04, 0.04)
        nn.init.xavier_normal_(self.pos_emb.weight)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()

    def forward(self, batch: Batch, how: Pass = FULL) -> Encoded:
        """L2-normalised states ``(B, T, D)`` of the left-padded items ``batch["seq"]`` ``(B, T)`` (with
        optional ``batch["timestamps"]`` ``(B, T)``); ``how`` (:class:`~attnrec.models.nn.wrapper.Pass`):
        the newest position only (the final layer computes that one query), other raw item content, each
        layer's attention weights ``(B, H, T, T)`` too."""
        seq, timestamps = batch["seq"], batch.get(TIMESTAMPS)  # (B, T) each
        if timestamps is not None and timestamps.shape != seq.shape:
            raise ValueError(
                f"timestamps must have the shape of seq {tuple(seq.shape)}, not {tuple(timestamps.shape)}"
            )
        if timestamps is not None and timestamps.is_floating_point():
            raise ValueError("timestamps must be integer seconds (int64), 0 for padding")
        t = seq.shape[1]
        keep = seq > 0  # (B, T)
        pos = (keep.long().cumsum(1) - 1).clamp(min=0)  # (B, T) counted from the window's oldest item
        emb = self.input_embeddings(batch) if how.content is None else how.content  # (B, T, D)
        x = emb * self.config.hidden**0.5 + self.pos_emb(pos)  # (B, T, D)
        x = self.emb_drop(x) * keep[..., None]  # (B, T, D)
        allowed = causal_mask(seq)  # (B, 1, T, T): earlier real items and the position itself
        idx = torch.arange(t, device=seq.device)
        offsets = (idx[:, None] - idx[None, :]).clamp(min=0)  # (T, T) i - j; j > i is masked anyway
        times = None if timestamps is None else time_buckets(timestamps, self.config.time_buckets)
        maps = []
        for i, block in enumerate(self.blocks):
            if how.last_only and i == len(self.blocks) - 1:  # the newest query row only
                rows = (
                    allowed[..., -1:, :],
                    offsets[-1:],
                    None if times is None else (times[0][:, -1:], times[1][:, -1:]),
                )
                x, weights = block(x, *rows, how.need_weights, last=1)  # (B, 1, D)
            else:
                x, weights = block(x, allowed, offsets, times, how.need_weights)  # (B, T, D)
            if weights is not None:
                maps.append(weights)
        return Encoded(F.normalize(x, dim=-1, eps=EPS), maps)  # (B, T, D), or (B, 1, D) with last_only

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` raw item embeddings of ``batch["seq"]``: the rows looked up, before the sqrt(d)
        scaling and positions. Not L2-normalised: only the output item vectors are (:meth:`item_vectors`)."""
        out: torch.Tensor = self.item_emb(batch["seq"])  # (B, T, D)
        return out

    def item_vectors(self) -> torch.Tensor:
        """L2-normalised item embeddings ``(n_items + 1, D)`` (row 0, padding, is zero), computed on every
        call."""
        # Never an inference tensor, even under inference mode: serving caches derived data keyed on
        # a tensor's version counter, which inference tensors lack. Grad mode stays what it was.
        grad = torch.is_grad_enabled()
        with torch.inference_mode(False), torch.set_grad_enabled(grad):
            return F.normalize(self.item_emb.weight, dim=-1, eps=EPS)


# The reference's training of its ML-1M configs: AdamW with betas (0.9, 0.98), lr 1e-3, no weight
# decay, batch 128, 101 epochs (all of them: min_epochs; the best validation epoch's weights are kept).
_REFERENCE_TRAINING = {
    "optimizer": "adamw",
    "lr": 1e-3,
    "beta2": 0.98,
    "weight_decay": 0.0,
    "batch_size": 128,
    "max_epochs": 101,
    "min_epochs": 101,
}


@register(
    "hstu",
    config=HSTUConfig,
    presets={
        # The paper's HSTU row on ML-1M (HR@10 0.3097, NDCG@10 0.1720 in the reference README):
        # configs/ml-1m/hstu-sampled-softmax-n128-final.gin, i.e. the config defaults and the reference's
        # training (_REFERENCE_TRAINING). Negatives per training sequence (the reference: per
        # position); with 128 per batch the GPU runs ml-1m-hstu-gpu / -large-gpu learned far more slowly
        # (docs/explanation/models.md). Promise: the reference's recipe on the reference's data; ml-1m.txt has
        # no timestamps (no time bias).
        "ml-1m": {
            "model": {"negatives": "sequence"},
            "train": _REFERENCE_TRAINING,
        },
        # HSTU-large (HR@10 0.3294, NDCG@10 0.1893): configs/ml-1m/hstu-sampled-softmax-n128-large-final.gin,
        # 4x the layers and 2x the heads, 25-wide per head; the rest as "ml-1m".
        "ml-1m-large": {
            "model": {"n_layers": 8, "n_heads": 2, "dqk": 25, "dv": 25, "negatives": "sequence"},
            "train": _REFERENCE_TRAINING,
        },
        # Small and quick: the built-in demo data (and the contract tests) in seconds to minutes.
        "demo": {
            "model": {"hidden": 32, "dqk": 16, "dv": 16, "n_heads": 2, "max_len": 50, "n_negatives": 64},
            "train": {
                "optimizer": "adamw",
                "lr": 2e-3,
                "batch_size": 128,
                "max_epochs": 30,
                "patience": 3,
                "time_budget": 150.0,
            },
        },
    },
)
class HSTU(HSTUBackbone, SequentialWrapper):
    """HSTU: pointwise (SiLU) causal attention with relative position/time bias, normalised dot-product
    scores."""

    def __init__(self, config: HSTUConfig, n_users: int, n_items: int) -> None:
        super().__init__(config, n_items)
        self.objective = build_objective(config, LOSSES)
        self.builder = ShiftedNextItem(config.max_len)

    def encode(self, seq: torch.Tensor, timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """L2-normalised states ``(B, T, D)`` of ``seq`` ``(B, T)`` (and optional ``timestamps``)."""
        return self.forward({"seq": seq} | ({} if timestamps is None else {TIMESTAMPS: timestamps})).states

    def head(self, states: torch.Tensor) -> torch.Tensor:
        """Logits are cosine similarities divided by the temperature."""
        return states / self.config.temperature

    def output_table(self) -> ItemTable:
        """The normalised item table; the rows of given items are normalised one by one (not the table)."""
        return ItemTable(self.item_vectors, gather=partial(_unit_rows, self.item_emb))

    def with_columns(self, batch: Batch, train: Sequences, users: np.ndarray) -> Batch:
        """The inputs' times, when the log has them (the targets' are never read)."""
        if TIMESTAMP in train.columns:
            batch[TIMESTAMPS] = torch.from_numpy(
                train.padded_column(TIMESTAMP, self.config.max_len + 1, users)[:, :-1]
            )
        return batch

    def inference_columns(self, histories: Sequences, width: int, request_time: np.ndarray | None) -> Batch:
        """The events' times, for the time-gap bias. Padded to the batch's longest history: positions count
        from each row's oldest item, the bias from offsets and the attention divides by max_len, so the
        width changes no score."""
        if TIMESTAMP not in histories.columns:
            return {}
        return {TIMESTAMPS: torch.from_numpy(histories.padded_column(TIMESTAMP, width))}


def _unit_rows(table: nn.Embedding, idx: torch.Tensor) -> torch.Tensor:
    """L2-normalised embeddings ``(*idx.shape, D)`` of the items ``idx`` (only those rows are normalised)."""
    return F.normalize(table(idx), dim=-1, eps=EPS)
