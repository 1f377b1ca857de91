"""BERT4Rec: bidirectional encoder representations for sequential recommendation (Sun et al., CIKM 2019).

A BERT encoder reads the user's items in both directions and is trained with the Cloze task:
items are replaced by a [mask] token and predicted from the context on both sides. The
computation follows the paper and its public code: item + learnable position embeddings, then
LayerNorm and dropout; post-LN blocks ``LN(x + Dropout(sublayer(x)))`` with multi-head attention
over every non-padding position and a GELU FFN of width 4d; the output layer
``softmax(LN(GELU(h W + b)) E^T + b_O)`` with ``E`` the shared item embedding (the LayerNorm is
in the authors' code, not in the paper's formula). Inference appends [mask] to the history.

Embedding rows: 0 = padding, 1..n_items = items, n_items + 1 = [mask]. Sequences are
left-padded, so the newest item (or the appended [mask]) always has position ``max_len - 1``.
``item_features``/``id_dropout`` (off by default) fuse item features into the item table
(:mod:`attnrec.models.item_context`); [mask] keeps its own vector. Per-event inputs and targets (off
by default, :mod:`attnrec.models.event_context`): [mask] stands at the request time, targets are
masked by type/rating.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.features import AlignedFeatures
from attnrec.data.schema import Sequences
from attnrec.models import event_context as ev
from attnrec.models.batches import events as eb
from attnrec.models.batches.builders import Cloze, LengthChunks
from attnrec.models.contracts import Batch, ItemBiased
from attnrec.models.item_context import (
    ItemFeatureFields,
    ModelContext,
    grown_embedding,
    item_context,
    require_fused,
)
from attnrec.models.nn.layers import MultiHeadAttention, PointWiseFeedForward
from attnrec.models.nn.masks import padding_bias
from attnrec.models.nn.search import NETWORK_RANGES, OPTIMISER_RANGES
from attnrec.models.nn.wrapper import FULL, Encoded, Pass, SequentialWrapper
from attnrec.models.objectives import ItemTable, Scored, build_objective, check_objective
from attnrec.models.registry import register
from attnrec.models.validation import require_positive_fields, require_rates
from attnrec.search_space import Choice, Float, Int, SearchSpace

LOSSES = ("ce", "sampled_ce")  # the objectives BERT4Rec trains with (attnrec.models.objectives)


@dataclass(frozen=True)
class BERT4RecConfig(ev.EventFields, ItemFeatureFields):
    """BERT4Rec hyperparameters (defaults: the paper's ML-1M model with BERT's dropout): the item-feature
    settings (ItemFeatureFields), the per-event settings (EventFields), then these."""

    hidden: int = 64  # d, the embedding and model width (FFN width 4d)
    n_layers: int = 2
    n_heads: int = 2
    max_len: int = 200  # N, the window length (training) / last N-1 items + [mask] (inference)
    dropout: float = 0.1  # embeddings, sublayer outputs
    attn_dropout: float = 0.1  # attention probabilities
    mask_prob: float = 0.2  # p, each item is masked with this probability (at least one per sample)
    mask_last_prob: float = 0.1  # share of samples where only the last item is masked (test-like)
    use_80_10_10: bool = False  # BERT's rule for masked items: 80% [mask], 10% random item, 10% kept
    sliding_step: int = (
        0  # windows over histories longer than max_len start this far apart; 0 = last window only
    )
    length_chunks: int = 0  # > 1: encode a training batch as this many trimmed chunks of similar-length rows
    loss: str = "ce"  # "ce" (full softmax) or "sampled_ce" (n_negatives shared negatives, log-Q corrected)
    n_negatives: int = 256
    sampler: str = (
        "uniform"  # sampled_ce negatives: "uniform", "popularity" (training counts) or "mixed" (half each)
    )
    use_positions: bool = True  # False: no positional embedding (the paper's ablation)
    init: str = (
        "xavier"  # linear layers: "xavier" (normal) or "bert" (truncated normal, init_std, the authors' code)
    )
    init_std: float = 0.02  # embeddings (and linear layers with init="bert"): truncated normal, as BERT

    def __post_init__(self) -> None:
        self.check_events()  # the per-event fields (EventFields)
        check_objective(self, LOSSES)  # the loss, its sampler and who draws its negatives
        if self.init not in ("xavier", "bert"):
            raise ValueError(f"init must be xavier or bert, not {self.init!r}")
        require_positive_fields(self, "hidden", "n_layers", "n_heads", "max_len", "n_negatives")
        require_rates(self, "dropout", "attn_dropout")
        if not (0.0 < self.mask_prob <= 1.0 and 0.0 <= self.mask_last_prob <= 1.0):
            raise ValueError("mask_prob must be in (0, 1] and mask_last_prob in [0, 1]")
        if self.sliding_step < 0 or self.length_chunks < 0:
            raise ValueError("sliding_step and length_chunks must be >= 0")
        self.check_item_features()


class BERT4RecBlock(nn.Module):
    """Post-LN transformer layer: ``A = LN(x + Drop(MH(x)))``, ``LN(A + Drop(FFN(A)))``."""

    def __init__(self, c: BERT4RecConfig) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(c.hidden, c.n_heads, c.attn_dropout)
        self.ln_attn = nn.LayerNorm(c.hidden, eps=1e-12)
        self.ffn = PointWiseFeedForward(c.hidden, 4 * c.hidden, 0.0, "gelu")  # BERT: no inner dropout
        self.ln_ffn = nn.LayerNorm(c.hidden, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)

    def forward(
        self, x: torch.Tensor, allowed: torch.Tensor, need_weights: bool = False, last: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The layer's output ``(B, T, D)`` and, with ``need_weights``, its attention probabilities.

        ``last > 0``: the output of the last ``last`` positions only ``(B, last, D)`` (they attend to
        every position as before; nothing is computed for the others).
        """
        xq = x[:, -last:] if last else x  # (B, Tq, D)
        a, weights = self.attn(
            xq, x, allowed[..., -last:, :] if last else allowed, need_weights
        )  # (B, Tq, D)
        xq = self.ln_attn(xq + self.drop(a))  # (B, Tq, D)
        return self.ln_ffn(xq + self.drop(self.ffn(xq))), weights  # (B, Tq, D)


# What `attnrec tune --model bert4rec` searches by default: the Cloze task's masking rate and the
# dropouts matter most (the authors' scripts change them per dataset), then width, depth and window.
SEARCH_SPACE = SearchSpace(
    model={
        **NETWORK_RANGES,
        "attn_dropout": Float(0.0, 0.5),
        "mask_prob": Float(0.1, 0.6),
        "loss": Choice(("ce", "sampled_ce")),
        "n_negatives": Int(32, 1024, log=True, when={"loss": ("sampled_ce",)}),
    },
    train=OPTIMISER_RANGES,
)


class BERT4RecBackbone(nn.Module):
    """BERT4Rec's network: token and position embeddings, bidirectional post-LN blocks, the output transform
    and the output bias."""

    def __init__(self, config: BERT4RecConfig, n_items: int, context: ModelContext | None = None) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.mask_id = n_items + 1
        self.item_emb = nn.Embedding(n_items + 2, c.hidden, padding_idx=0)  # pad, items, [mask]
        self.pos_emb = nn.Embedding(c.max_len, c.hidden) if c.use_positions else None
        self.ln_emb = nn.LayerNorm(c.hidden, eps=1e-12)
        self.emb_drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(BERT4RecBlock(c) for _ in range(c.n_layers))
        self.proj = nn.Linear(c.hidden, c.hidden)  # W^P, b^P
        self.ln_proj = nn.LayerNorm(c.hidden, eps=1e-12)
        self.out_bias = nn.Parameter(torch.zeros(n_items + 1))  # b^O over padding + items
        self.item_ctx = item_context(c.item_features, False, context, c.hidden, c.id_dropout, "bert4rec")
        # With few training steps the 0.02 init sits long near uniform attention (q.k ~ 0); xavier
        # linear layers left that plateau sooner in our demo runs. Embeddings always use init_std.
        for name, p in self.named_parameters():
            if p.dim() > 1 and c.init == "xavier" and "emb" not in name:
                nn.init.xavier_normal_(p)
            elif p.dim() > 1:
                nn.init.trunc_normal_(p, std=c.init_std, a=-2 * c.init_std, b=2 * c.init_std)
            elif "ln" not in name:
                nn.init.zeros_(p)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()
        if self.item_ctx is not None:
            self.item_ctx.reset_padding()
        self.event_ctx = ev.event_context(
            c, c.hidden, c.n_heads, context, "last"
        )  # per-event inputs, built last

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` token content of ``batch["seq"]``: item rows (fused with features when on) and
        [mask]'s own row."""
        seq = batch["seq"]  # (B, T); with features: items from the fused table, [mask] from its own row
        fused = (
            None
            if self.item_ctx is None
            else torch.cat([self.item_vectors(), self.item_emb.weight[self.mask_id :]])
        )
        return self.item_emb(seq) if fused is None else F.embedding(seq, fused)  # (B, T, D)

    def embed(self, batch: Batch, content: torch.Tensor | None = None) -> torch.Tensor:
        """Inputs ``(B, T, D)`` of tokens ``batch["seq"]`` ``(B, T)``: ``content`` (or theirs) + positions,
        LayerNorm, dropout."""
        seq = batch["seq"]  # (B, T)
        x = self.input_embeddings(batch) if content is None else content  # (B, T, D)
        if self.event_ctx is not None:  # + time/event/rating embeddings of the batch's per-event entries
            x = self.event_ctx.add_inputs(x, batch)  # (B, T, D)
        if self.pos_emb is not None:  # counted from the end: the newest token is at max_len - 1
            t = seq.shape[1]
            x = x + self.pos_emb(
                torch.arange(self.config.max_len - t, self.config.max_len, device=seq.device)
            )
        out: torch.Tensor = self.emb_drop(self.ln_emb(x))  # (B, T, D)
        return out

    def forward(self, batch: Batch, how: Pass = FULL) -> Encoded:
        """Hidden states ``(B, T, D)`` of the left-padded tokens ``batch["seq"]`` ``(B, T)`` and the per-event
        entries the settings read; ``how`` (:class:`~attnrec.models.nn.wrapper.Pass`): the final [mask]
        position only (the final layer computes that one query), other token content (:meth:`embed`),
        each layer's attention ``(B, H, T, T)`` too."""
        seq = batch["seq"]  # (B, T)
        x = self.embed(batch, how.content)  # (B, T, D)
        allowed = padding_bias(seq, x.dtype)  # (B, 1, 1, T) additive: every real position, before and after
        if self.event_ctx is not None:  # time-interval biases (a float mask), or allowed as it is
            allowed = self.event_ctx.attention_mask(allowed, batch, causal=False)
        maps = []
        for i, block in enumerate(self.blocks):
            last = (
                1 if how.last_only and i == len(self.blocks) - 1 else 0
            )  # the final layer: [mask]'s query only
            x, weights = block(x, allowed, how.need_weights, last=last)  # (B, T or 1, D)
            if weights is not None:
                maps.append(weights)
        return Encoded(x, maps)  # (B, T, D), or (B, 1, D) with last_only

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """The output transform ``LN(GELU(h W^P + b^P))`` of hidden states ``(N, D)``."""
        out: torch.Tensor = self.ln_proj(F.gelu(self.proj(h)))
        return out

    def item_vectors(self) -> torch.Tensor:
        """The shared item embedding ``E`` ``(n_items + 1, D)``; row 0 is padding, [mask] is left out.
        With item features: the fused ID + feature table (in training with ``id_dropout``, dropped per
        call)."""
        if self.item_ctx is None:
            return self.item_emb.weight[: self.n_items + 1]
        return self.item_ctx.table(self.item_emb.weight)

    def add_items(self, rows: AlignedFeatures) -> None:
        """Append ``rows.n_rows`` cold items with zero ID vectors and the mean output bias; [mask] moves
        last."""
        ctx = require_fused(self.item_ctx, "bert4rec")
        self.item_emb = grown_embedding(self.item_emb, rows.n_rows, self.n_items + 1)
        b = self.out_bias.detach()
        self.out_bias = nn.Parameter(torch.cat([b, b[1:].mean().expand(rows.n_rows)]))
        ctx.add_rows(rows)
        self.n_items += rows.n_rows
        self.mask_id = self.n_items + 1

    def item_bias(self) -> torch.Tensor:
        """The output bias ``b^O`` ``(n_items + 1,)``."""
        return self.out_bias


@register(
    "bert4rec",
    config=BERT4RecConfig,
    search_space=SEARCH_SPACE,
    presets={
        # The authors' run scripts: hidden 64, 2 layers, 2 heads; ML-1M max_len 200, p 0.2, dropout
        # 0.2, sliding step 0.5 * max_len; Beauty max_len 50, p 0.6, hidden dropout 0.5, step 0.1 *
        # max_len. One last-item-masked copy per 10 random ones (dupe_factor 10) ~ mask_last_prob 0.1.
        # Their 400k steps x 256 are ~10,000 epochs of ML-1M's 10k windows (~2,500 of Beauty's 42k):
        # out of reach on 2 CPU cores, so lr 1e-3 (not 1e-4, no warm-up) for far fewer steps, at
        # most 100 / 60 epochs with early stopping, and a 4-hour training cap.
        "ml-1m": {
            "model": {
                "max_len": 200,
                "mask_prob": 0.2,
                "dropout": 0.2,
                "attn_dropout": 0.2,
                "sliding_step": 100,
                "mask_last_prob": 0.1,
            },
            "train": {
                "lr": 1e-3,
                "batch_size": 256,
                "max_epochs": 100,
                "patience": 10,
                "beta2": 0.999,
                "time_budget": 14400.0,
            },
        },
        "beauty": {
            "model": {
                "max_len": 50,
                "mask_prob": 0.6,
                "dropout": 0.5,
                "attn_dropout": 0.2,
                "sliding_step": 5,
                "mask_last_prob": 0.1,
            },
            "train": {
                "lr": 1e-3,
                "batch_size": 256,
                "max_epochs": 60,
                "patience": 10,
                "beta2": 0.999,
                "time_budget": 14400.0,
            },
        },
        "demo": {  # the built-in demo data (2,000 users, 500 items, ~50 items each): ~2-4 min on 2 cores
            "model": {
                "max_len": 50,
                "mask_prob": 0.3,
                "dropout": 0.2,
                "attn_dropout": 0.2,
                "sliding_step": 25,
                "mask_last_prob": 0.1,
            },
            "train": {
                "lr": 2e-3,
                "batch_size": 64,
                "max_epochs": 40,
                "patience": 5,
                "beta2": 0.999,
                "time_budget": 300.0,
            },
        },
    },
)
class BERT4Rec(BERT4RecBackbone, SequentialWrapper, ItemBiased):
    """BERT4Rec: bidirectional self-attention trained on the Cloze (masked item) task."""

    def __init__(
        self, config: BERT4RecConfig, n_users: int, n_items: int, context: ModelContext | None = None
    ) -> None:
        super().__init__(config, n_items, context)
        c, events = config, context.events if context is not None else None
        self.targets = ev.target_rule(c, events)  # which events may be targets (None: every one)
        self.objective = build_objective(c, LOSSES)
        self.builder: Cloze = Cloze(
            c.max_len,
            c.sliding_step,
            c.mask_prob,
            c.mask_last_prob,
            c.use_80_10_10,
            n_items,
            self.event_ctx,
            self.targets,
            c.explicit_negatives,
        )
        self.chunks = LengthChunks(c.length_chunks)

    def head(self, states: torch.Tensor) -> torch.Tensor:
        """Logits read the output transform of the states (:meth:`project`)."""
        return self.project(states)

    def add_items(self, rows: AlignedFeatures) -> None:
        """Append cold items (:meth:`BERT4RecBackbone.add_items`); [mask], the builder's, moves last."""
        super().add_items(rows)
        self.builder = replace(self.builder, n_items=self.n_items)

    # -- training: the Cloze task ------------------------------------------------------------
    def encode_at(self, seq: torch.Tensor, sel: torch.Tensor, batch: Batch | None = None) -> torch.Tensor:
        """Hidden states ``(N, D)`` at the positions ``sel`` ``(B, T)`` selects, in ``seq[sel]`` order; with
        ``length_chunks`` chunk by chunk, each trimmed to its longest row (:class:`LengthChunks`)."""
        full = (batch or {}) | {"seq": seq}  # seq and its per-event columns, trimmed together
        return self.chunks.encode_at(lambda part: self.forward(part).states, full, sel)

    def loss(self, batch: Batch) -> torch.Tensor:
        """The objective's loss of the true items at masked positions only (with ``explicit_negatives``, plus
        ``softplus`` of the score of each masked low-rated item at its position)."""
        labels, bad = batch["labels"], batch.get(ev.EXPLICIT_NEGATIVE)  # (B, T) each
        sel = labels > 0
        both = (
            sel if bad is None else sel | (bad > 0)
        )  # the positions encoded: targets and explicit negatives
        states = self.project(self.encode_at(batch["seq"], both, batch))  # (N', D) masked positions only
        z, target = states[sel[both]], labels[sel]  # (N, D), (N,)
        extra = (
            None
            if bad is None
            else ev.explicit_negative_loss(
                states[(bad > 0)[both]], self.item_vectors(), bad[bad > 0], self.out_bias
            )
        )
        table = ItemTable(self.item_vectors, bias=self.out_bias)  # (I+1, D), read when the objective needs it
        out = self.objective.loss(Scored(z, target, sel), table, batch)
        return out if extra is None else out + extra

    # -- inference: [mask] appended after the history ----------------------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """The last ``max_len - 1`` items of each history followed by [mask]: ``(B, W + 1)``, ``W`` the
        batch's longest history (positions count from the end, padding keys are masked: a narrower batch
        scores the same)."""
        width = int(min(self.config.max_len - 1, histories.lengths().max(initial=0)))
        seq = histories.padded(width)
        mask = np.full(
            (len(seq), 1), self.mask_id, dtype=np.int64
        )  # [mask] at the request time (event_context)
        cols = eb.mask_columns(eb.score_columns(self.event_ctx, histories, width, "bert4rec"))
        cols |= eb.request_batch(self.event_ctx, request_time)  # [mask]'s time, when the model reads time
        return {"seq": torch.from_numpy(np.concatenate([seq, mask], axis=1))} | cols
