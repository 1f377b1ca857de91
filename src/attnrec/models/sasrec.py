"""SASRec: self-attentive sequential recommendation (Kang & McAuley, ICDM 2018).

A causal transformer over the user's last ``max_len`` items predicts the next item at every
position. The computation follows the authors' code: embeddings scaled by sqrt(d) plus learnable
positions, pre-LayerNorm blocks whose attention queries are normalised while keys/values are not,
a ReLU point-wise FFN of width d, padding positions zeroed after every block, a final LayerNorm,
and the item embedding reused as the output layer. Two differences from that code, both kept by
default so that committed results repeat: the attention has an output projection (as PyTorch's
``nn.MultiheadAttention``) and dropout on its output; ``authors_attention`` removes both.

Losses: ``bce`` (the paper: one unseen negative per position), ``ce`` (full softmax over the
catalog, computed in chunks) and ``sampled_ce`` for catalogs too large for a full softmax: a
softmax over the target and negatives shared by the whole batch, ``n_negatives`` drawn from the
catalog (``sampler`` uniform, by training popularity or half each) plus ``in_batch_negatives`` drawn from the
batch's own targets. Every logit is corrected by ``-log E[k]``, the expected number of times item
``k`` appears among the sampled negatives (log-Q correction, mixed proposal), and sampled copies of
a row's target are masked. The per-step memory is ``O(positions x negatives)``, whatever the
catalog size.

Per-event inputs and targets (off by default; :mod:`attnrec.models.event_context`): TiSASRec interval
biases, periodic time and request-time embeddings, event-type and rating embeddings, targets by event
type and rating, explicit negatives. SASRec stays causal with every one of them.

Item features (off by default; :mod:`attnrec.models.item_context`): ``item_features`` sum/concat/gate
builds the item table (input embedding and output layer) from the ID embedding and the items'
features, ``id_dropout`` teaches it to score from features alone (cold items), and ``difsr`` adds
each feature field's own attention logits (DIF-SR). With them off nothing is created or drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.features import AlignedFeatures
from attnrec.data.schema import Sequences
from attnrec.models.batches.builders import ShiftedNextItem
from attnrec.models.batches.events import request_batch, score_columns
from attnrec.models.contracts import Batch
from attnrec.models.event_context import (
    EXPLICIT_NEGATIVE,
    EventFields,
    event_context,
    explicit_negative_loss,
    target_rule,
)
from attnrec.models.item_context import (
    DecoupledAttention,
    ItemFeatureFields,
    ModelContext,
    grown_embedding,
    item_context,
    require_fused,
)
from attnrec.models.nn.layers import MultiHeadAttention, PointWiseFeedForward, dropout, init_xavier
from attnrec.models.nn.masks import causal_bias
from attnrec.models.nn.search import NETWORK_RANGES, OPTIMISER_RANGES
from attnrec.models.nn.wrapper import FULL, Encoded, Pass, SequentialWrapper
from attnrec.models.objectives import (
    FullSoftmax,
    ItemTable,
    build_objective,
    check_negative_counts,
    check_objective,
)
from attnrec.models.registry import register
from attnrec.models.validation import require_positive_fields, require_rates
from attnrec.search_space import Choice, Int, SearchSpace

LOSSES = ("bce", "ce", "sampled_ce")  # the objectives SASRec trains with (attnrec.models.objectives)


@dataclass(frozen=True)
class SASRecNetwork:
    """The size and dropout of SASRec's network (defaults: the paper's ML-1M settings); gSASRec trains
    the same network (:meth:`attnrec.models.gsasrec.GSASRecConfig.network`)."""

    hidden: int = 50  # d, the embedding and model width
    n_layers: int = 2  # self-attention blocks
    n_heads: int = 1
    max_len: int = 200  # n, the most recent items used
    dropout: float = 0.2
    # Dropout on attention probabilities (the authors' code uses `dropout`; 0 lets PyTorch use its
    # fused attention kernel, about 2x faster on CPU). None means "same as dropout".
    attn_dropout: float | None = None


@dataclass(frozen=True)
class SASRecConfig(SASRecNetwork, EventFields, ItemFeatureFields):
    """SASRec hyperparameters (defaults: the paper's ML-1M settings): the item-feature settings
    (ItemFeatureFields), the per-event settings (EventFields), the network's (SASRecNetwork), then these."""

    # The authors' attention exactly: heads concatenated without an output projection, and dropout on
    # the attention probabilities only, none on the attention's output (attnrec's block has both).
    authors_attention: bool = False
    loss: str = "bce"  # "bce" (paper: 1 negative per position), "ce" (full softmax), "sampled_ce"
    n_negatives: int = 256  # sampled_ce: catalog negatives shared by the batch
    sampler: str = (
        "uniform"  # sampled_ce catalog negatives: "uniform", "popularity" (training count + 1), "mixed"
    )
    in_batch_negatives: int = 0  # sampled_ce: also this many negatives drawn from the batch's targets
    # ce through the item-major kernel (attnrec.models.objectives.kernels): one exponential per logit,
    # chunks of 128 rows, faster on CPU; equal to the row-major kernel to float32 rounding, not bit for
    # bit. None: on with loss ce (the only loss it serves), off otherwise; False: the row-major kernel.
    fast_ce: bool | None = None
    # Dropout masks from 16-bit random integers (attnrec.models.nn.layers.FastDropout), about 2x faster on
    # CPU; the same distribution (p to 1/32768), another random stream than nn.Dropout's (three seeds on
    # two files trained to the same quality: benchmarks/results/fast_dropout.md). False: nn.Dropout.
    fast_dropout: bool = True
    # Sparse (row-wise) gradients for the item embedding, updated by lazy Adam (SparseAdam): with
    # bce or sampled_ce a step's memory and time then do not grow with the catalog. Single process,
    # no grad_clip.
    sparse_embedding: bool = False
    # DIF-SR attention over the item features: each field's own attention logits, values from the ID stream.
    difsr: bool = False
    # Per-event inputs and targets: the EventFields (attnrec.models.event_context), plus the time of the
    # predicted event (the request's, at the newest position) as an input at each position.
    request_time: bool = False

    def __post_init__(self) -> None:
        self.check_events()
        if self.difsr and self.time_intervals:
            raise ValueError(
                "difsr cannot be combined with time_intervals (both change the attention logits)"
            )
        check_objective(self, LOSSES)  # the loss, its sampler and who draws its negatives
        require_positive_fields(self, "hidden", "n_layers", "n_heads", "max_len")
        require_rates(self, "dropout", "attn_dropout")
        check_negative_counts(self.n_negatives, self.in_batch_negatives)
        full = isinstance(build_objective(self, LOSSES), FullSoftmax)  # reads every item's vector
        if self.fast_ce is None:  # resolved here, so that a saved config says which kernel trained it
            object.__setattr__(self, "fast_ce", full)
        if self.fast_ce and not full:
            raise ValueError(f"fast_ce is the full-softmax kernel: it needs loss ce, not {self.loss!r}")
        if self.sparse_embedding and full:
            raise ValueError(
                "sparse_embedding needs loss bce or sampled_ce (a full softmax touches every item)"
            )
        self.check_item_features(sparse=self.sparse_embedding)
        if self.difsr and self.authors_attention:
            raise ValueError("difsr cannot be combined with authors_attention")
        if self.difsr and self.sparse_embedding:
            raise ValueError("sparse_embedding cannot be combined with difsr")


class SASRecBlock(nn.Module):
    """Pre-LN block of the authors' code: only the attention queries are normalised, padding rows zeroed."""

    def __init__(self, c: SASRecConfig, n_side: int = 0) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(c.hidden, eps=1e-8)
        p = c.dropout if c.attn_dropout is None else c.attn_dropout
        # n_side > 0: DIF-SR attention with one attribute stream per feature field
        self.attn = (
            DecoupledAttention(c.hidden, c.n_heads, p, n_side)
            if n_side
            else MultiHeadAttention(c.hidden, c.n_heads, p, project=not c.authors_attention)
        )
        self.drop = (
            nn.Identity() if c.authors_attention else dropout(c.dropout, c.fast_dropout)
        )  # on the attention's output
        self.ln_ffn = nn.LayerNorm(c.hidden, eps=1e-8)
        self.ffn = PointWiseFeedForward(c.hidden, c.hidden, c.dropout, "relu", c.fast_dropout)

    def forward(
        self,
        x: torch.Tensor,
        allowed: torch.Tensor,
        keep: torch.Tensor,
        need_weights: bool = False,
        last: int = 0,
        side: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The block's output ``(B, T, D)`` and, with ``need_weights``, its attention probabilities.

        ``last > 0``: the output of the last ``last`` positions only ``(B, last, D)``; they attend to
        every position as before, but nothing is computed for the others (inference of the newest state).
        ``side`` ``(F, B, T, D)``: DIF-SR attribute streams (a block built with ``n_side = F``).
        """
        xq = x[:, -last:] if last else x  # (B, Tq, D) the positions whose output is wanted
        q = self.ln_attn(xq)  # (B, Tq, D)
        mask = allowed[..., -last:, :] if last else allowed
        if side is not None and isinstance(self.attn, DecoupledAttention):
            a, weights = self.attn(q, x, mask, need_weights, side)  # (B, Tq, D)
        else:
            a, weights = self.attn(q, x, mask, need_weights)  # (B, Tq, D)
        xq = q + self.drop(a)  # the residual adds the normalised queries
        y = self.ln_ffn(xq)
        return (y + self.ffn(y)) * (
            keep[:, -last:] if last else keep
        ), weights  # (B, Tq, D), padding rows zeroed


# What `attnrec tune --model sasrec` searches unless a --space file or --set says otherwise: the
# settings the hand-tuned ML-1M runs showed to matter (dropout, lr and its schedule, width, depth,
# window, loss and its negatives).
SEARCH_SPACE = SearchSpace(
    model={
        **NETWORK_RANGES,
        "loss": Choice(("bce", "ce", "sampled_ce")),
        "n_negatives": Int(32, 1024, log=True, when={"loss": ("sampled_ce",)}),
    },
    train={**OPTIMISER_RANGES, "batch_size": Choice((64, 128, 256))},
)


class SASRecBackbone(nn.Module):
    """SASRec's network: item and position embeddings, causal pre-LN blocks, a final LayerNorm."""

    def __init__(self, config: SASRecConfig, n_items: int, context: ModelContext | None = None) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.item_emb = nn.Embedding(n_items + 1, c.hidden, padding_idx=0, sparse=c.sparse_embedding)
        self.pos_emb = nn.Embedding(c.max_len, c.hidden)
        self.emb_drop = dropout(c.dropout, c.fast_dropout)
        # Built after the ID-only modules, and only when asked for: features off, nothing else changes.
        self.item_ctx = item_context(c.item_features, c.difsr, context, c.hidden, c.id_dropout, "sasrec")
        n_side = len(self.item_ctx.fields) if c.difsr and self.item_ctx is not None else 0
        self.blocks = nn.ModuleList(SASRecBlock(c, n_side) for _ in range(c.n_layers))
        self.ln_out = nn.LayerNorm(c.hidden, eps=1e-8)
        init_xavier(self)  # Xavier-normal matrices, zero biases, as the authors initialise
        with torch.no_grad():
            self.item_emb.weight[0].zero_()
        if self.item_ctx is not None:
            self.item_ctx.reset_padding()
        # Per-event inputs and targets, built after everything else and only when asked for.
        self.event_ctx = event_context(c, c.hidden, c.n_heads, context, "next" if c.request_time else "none")

    def forward(self, batch: Batch, how: Pass = FULL) -> Encoded:
        """Hidden states ``(B, T, D)`` of the left-padded items ``batch["seq"]`` ``(B, T)`` and the per-event
        entries the settings read; ``how`` (:class:`~attnrec.models.nn.wrapper.Pass`): the newest position
        only (the final block computes that one query: about half the work of a two-block model), other
        item content, each layer's attention ``(B, H, T, T)`` too."""
        seq = batch["seq"]  # (B, T)
        t = seq.shape[1]
        keep = (seq > 0).unsqueeze(-1).to(self.item_emb.weight.dtype)  # (B, T, 1) real items
        # Positions count from the window's start, so the newest item always has position max_len-1.
        pos = torch.arange(self.config.max_len - t, self.config.max_len, device=seq.device)  # (T,)
        emb = self.input_embeddings(batch) if how.content is None else how.content  # (B, T, D)
        allowed = causal_bias(seq, keep.dtype)  # (B, 1, T, T) additive: earlier real items only
        if self.event_ctx is not None:  # + time/event/rating embeddings; interval biases (-inf off causal)
            emb = self.event_ctx.add_inputs(emb, batch)  # (B, T, D)
            allowed = self.event_ctx.attention_mask(allowed, batch, causal=True)  # (B, H, T, T)
        x = emb * self.config.hidden**0.5 + self.pos_emb(pos)  # (B, T, D)
        x = self.emb_drop(x) * keep  # padding rows zeroed
        difsr = self.config.difsr and self.item_ctx is not None
        side = self.item_ctx.side(seq) if difsr and self.item_ctx is not None else None  # (F, B, T, D)
        maps = []
        for i, block in enumerate(self.blocks):
            last = (
                1 if how.last_only and i == len(self.blocks) - 1 else 0
            )  # the final block: newest query only
            x, weights = block(x, allowed, keep, how.need_weights, last=last, side=side)  # (B, T or 1, D)
            if weights is not None:
                maps.append(weights)
        return Encoded(self.ln_out(x), maps)  # (B, T, D), or (B, 1, D) with last_only

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` item embeddings of ``batch["seq"]`` (fused with features when they are on), before
        scaling and positions."""
        seq = batch["seq"]
        return self.item_emb(seq) if self.item_ctx is None else F.embedding(seq, self.item_vectors())

    def item_vectors(self) -> torch.Tensor:
        """Item embeddings ``(n_items + 1, D)``, also the output layer (row 0 is padding); with item
        features the fused ID + feature table (in training with ``id_dropout``, freshly dropped per call)."""
        if self.item_ctx is None or self.item_ctx.mode == "none":
            return self.item_emb.weight
        return self.item_ctx.table(self.item_emb.weight)

    def add_items(self, rows: AlignedFeatures) -> None:
        """Append ``rows.n_rows`` cold items (features encoded by ``ItemFeatures.encode``) with zero ID
        vectors."""
        ctx = require_fused(self.item_ctx, "sasrec")
        self.item_emb = grown_embedding(self.item_emb, rows.n_rows, self.n_items + 1)
        ctx.add_rows(rows)
        self.n_items += rows.n_rows


@register(
    "sasrec",
    config=SASRecConfig,
    search_space=SEARCH_SPACE,
    presets={
        # The paper's settings and training length: d 50, 2 blocks, 1 head, n 200, dropout 0.2, BCE with
        # one negative, Adam lr 1e-3 (beta2 0.98), batch 128, and the authors' code's 200 epochs without
        # early stopping (min_epochs = max_epochs); the weights kept are the best validation epoch's.
        # Promise: on ML-1M it reproduces the paper's sampled-protocol figures (HR@10 0.8245,
        # NDCG@10 0.5905) within a few percent; off ML-1M it is the paper's dense-data setting.
        "paper": {
            "model": {},
            "train": {"lr": 1e-3, "batch_size": 128, "max_epochs": 200, "min_epochs": 200},
        },
        # The paper's sparse-data setting (Beauty, Games, Steam): n 50 and dropout 0.5, trained as "paper".
        "paper-sparse": {
            "model": {"max_len": 50, "dropout": 0.5},
            "train": {"lr": 1e-3, "batch_size": 128, "max_epochs": 200, "min_epochs": 200},
        },
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
class SASRec(SASRecBackbone, SequentialWrapper):
    """SASRec: causal self-attention over the item sequence, next-item objective."""

    def __init__(
        self, config: SASRecConfig, n_users: int, n_items: int, context: ModelContext | None = None
    ) -> None:
        super().__init__(config, n_items, context)
        events = context.events if context is not None else None
        self.targets = target_rule(config, events)  # which next events may be targets (None: every one)
        self.objective = build_objective(config, LOSSES)
        self.builder = ShiftedNextItem(
            config.max_len, self.event_ctx, self.targets, config.explicit_negatives, "sasrec"
        )

    # -- training: what SASRec reads besides the items -------------------------------------------
    def output_table(self) -> ItemTable:
        """The item table; with ``sparse_embedding`` the rows an objective reads get sparse gradients."""
        if not self.config.sparse_embedding:
            return ItemTable(self.item_vectors())
        return ItemTable(
            self.item_vectors(), gather=partial(F.embedding, weight=self.item_emb.weight, sparse=True)
        )

    def extra_loss(self, states: torch.Tensor, table: ItemTable, batch: Batch) -> torch.Tensor | None:
        """With ``explicit_negatives``, a ``softplus`` of each low-rated next event's score where it would
        have been the target (pushed down)."""
        if not self.config.explicit_negatives:
            return None
        neg = batch[EXPLICIT_NEGATIVE]  # (B, T) the low-rated next item, else 0
        return explicit_negative_loss(states[neg > 0], table.weight, neg[neg > 0])

    # -- scoring -------------------------------------------------------------------------------------
    def inference_columns(self, histories: Sequences, width: int, request_time: np.ndarray | None) -> Batch:
        """The per-event entries the settings read, and the request's time when they read time."""
        return score_columns(self.event_ctx, histories, width, "sasrec") | request_batch(
            self.event_ctx, request_time
        )
