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

Item features (off by default; :mod:`attnrec.models.context`): ``item_features`` sum/concat/gate
builds the item table (input embedding and output layer) from the ID embedding and the items'
features, ``id_dropout`` teaches it to score from features alone (cold items), and ``difsr`` adds
each feature field's own attention logits (DIF-SR). With them off nothing is created or drawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.features import AlignedFeatures
from attnrec.data.schema import Sequences
from attnrec.models._blocks import MultiHeadAttention, PointWiseFeedForward, dropout
from attnrec.models.batching import inference_width, next_item_rows, shifted_batches
from attnrec.models.context import (
    DecoupledAttention,
    ModelContext,
    check_feature_options,
    grown_embedding,
    item_context,
    require_fused,
)
from attnrec.models.contracts import (
    AttentionInspectable,
    Batch,
    EmbeddingInputs,
    Factorised,
    SequentialModel,
    SharedBatch,
    WeightedLoss,
)
from attnrec.models.event_batches import request_batch, score_columns, shifted_columns, target_users
from attnrec.models.event_context import (
    EXPLICIT_NEGATIVE,
    EventFields,
    event_context,
    explicit_negative_loss,
    target_rule,
)
from attnrec.models.losses import batch_sampled_softmax, softmax_cross_entropy
from attnrec.models.masks import causal_bias
from attnrec.models.negatives import SAMPLERS, SHARED_KEYS, SharedNegatives, draw_negatives
from attnrec.models.registry import register
from attnrec.models.scoring import factorised_scores
from attnrec.models.validation import require_positive
from attnrec.search_space import Choice, Float, Int, SearchSpace


@dataclass(frozen=True)
class SASRecConfig(EventFields):
    """SASRec hyperparameters (defaults: the paper's ML-1M settings)."""

    hidden: int = 50  # d, the embedding and model width
    n_layers: int = 2  # self-attention blocks
    n_heads: int = 1
    max_len: int = 200  # n, the most recent items used
    dropout: float = 0.2
    # Dropout on attention probabilities (the authors' code uses `dropout`; 0 lets PyTorch use its
    # fused attention kernel, about 2x faster on CPU). None means "same as dropout".
    attn_dropout: float | None = None
    # The authors' attention exactly: heads concatenated without an output projection, and dropout on
    # the attention probabilities only, none on the attention's output (attnrec's block has both).
    authors_attention: bool = False
    loss: str = "bce"  # "bce" (paper: 1 negative per position), "ce" (full softmax), "sampled_ce"
    n_negatives: int = 256  # sampled_ce: catalog negatives shared by the batch
    sampler: str = (
        "uniform"  # sampled_ce catalog negatives: "uniform", "popularity" (training count + 1), "mixed"
    )
    in_batch_negatives: int = 0  # sampled_ce: also this many negatives drawn from the batch's targets
    # ce through the item-major kernel (attnrec.models.losses): one exponential per logit, chunks of 128
    # rows, faster on CPU; equal to the default to float32 rounding, not bit for bit, hence off.
    fast_ce: bool = False
    # Dropout masks from 16-bit random integers (attnrec.models._blocks.FastDropout), about 2x faster on CPU;
    # the same distribution (p to 1/32768), another random stream than nn.Dropout's, hence off.
    fast_dropout: bool = False
    # Sparse (row-wise) gradients for the item embedding, updated by lazy Adam (SparseAdam): with
    # bce or sampled_ce a step's memory and time then do not grow with the catalog. Single process,
    # no grad_clip.
    sparse_embedding: bool = False
    # Item features (attnrec.models.context): "none", "sum", "concat" or "gate" fusion of ID and feature
    # vectors in the item table; the fields used, comma-separated (a string, not a tuple, so that the
    # settings survive JSON round trips unchanged; empty: all of the data's item feature fields); the
    # probability of zeroing an item's ID vector in training (what lets features alone rank cold items);
    # DIF-SR attention (each field's own attention logits, values from the ID stream).
    item_features: str = "none"
    feature_fields: str = ""
    id_dropout: float = 0.0
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
        if self.loss not in ("bce", "ce", "sampled_ce"):
            raise ValueError(f"loss must be bce, ce or sampled_ce, not {self.loss!r}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, not {self.sampler!r}")
        require_positive(
            hidden=self.hidden, n_layers=self.n_layers, n_heads=self.n_heads, max_len=self.max_len
        )
        if (
            self.n_negatives < 0
            or self.in_batch_negatives < 0
            or self.n_negatives + self.in_batch_negatives < 1
        ):
            raise ValueError(
                "n_negatives and in_batch_negatives must be >= 0, and at least one negative is needed"
            )
        if self.fast_ce and self.loss != "ce":
            raise ValueError(f"fast_ce is the full-softmax kernel: it needs loss ce, not {self.loss!r}")
        if self.sparse_embedding and self.loss == "ce":
            raise ValueError(
                "sparse_embedding needs loss bce or sampled_ce (a full softmax touches every item)"
            )
        check_feature_options(self.item_features, self.id_dropout, self.sparse_embedding or False)
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
# window, loss and its negatives). hidden is a multiple of every n_heads choice.
SEARCH_SPACE = SearchSpace(
    model={
        "hidden": Choice((32, 64, 128)),
        "n_layers": Int(1, 3),
        "n_heads": Choice((1, 2)),
        "max_len": Choice((50, 100, 200)),
        "dropout": Float(0.0, 0.5),
        "loss": Choice(("bce", "ce", "sampled_ce")),
        "n_negatives": Int(32, 1024, log=True, when={"loss": ("sampled_ce",)}),
    },
    train={
        "lr": Float(1e-4, 1e-2, log=True),
        "weight_decay": Choice((0.0, 1e-5, 1e-4)),
        "lr_schedule": Choice(("constant", "cosine")),
        "batch_size": Choice((64, 128, 256)),
    },
)


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
class SASRec(
    nn.Module, SequentialModel, Factorised, AttentionInspectable, EmbeddingInputs, WeightedLoss, SharedBatch
):
    """SASRec: causal self-attention over the item sequence, next-item objective."""

    shared_batch_keys = SHARED_KEYS  # the sampled softmax's negatives, drawn once per batch

    def __init__(
        self, config: SASRecConfig, n_users: int, n_items: int, context: ModelContext | None = None
    ) -> None:
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
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.xavier_normal_(p)
            elif "ln" not in name:
                nn.init.zeros_(p)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()
        if self.item_ctx is not None:
            self.item_ctx.reset_padding()
        # Per-event inputs and targets, built after everything else and only when asked for.
        events = context.events if context is not None else None
        self.event_ctx = event_context(c, c.hidden, c.n_heads, events, "next" if c.request_time else "none")
        self.targets = target_rule(c, events)

    def run(
        self,
        seq: torch.Tensor,
        need_weights: bool = False,
        last_only: bool = False,
        content: torch.Tensor | None = None,
        batch: Batch | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The one forward pass: hidden states ``(B, T, D)`` of a left-padded item matrix ``seq`` ``(B, T)``
        and, with ``need_weights``, each layer's attention probabilities ``(B, H, T, T)`` (else ``[]``).

        ``last_only``: the newest position's state ``(B, 1, D)`` only; the final block then computes
        that one query (the earlier blocks still need every position as keys), which is what
        scoring needs and about half the work of a two-block model. ``content`` ``(B, T, D)``
        replaces the item embeddings of ``seq`` (:meth:`score_embedded`). ``batch``: where per-event
        inputs come from (its ``seq`` is ``seq``).
        """
        t = seq.shape[1]
        keep = (seq > 0).unsqueeze(-1).to(self.item_emb.weight.dtype)  # (B, T, 1)
        # Positions count from the window's start, so the newest item always has position max_len-1.
        pos = torch.arange(self.config.max_len - t, self.config.max_len, device=seq.device)
        emb = self.input_embeddings({"seq": seq}) if content is None else content  # (B, T, D)
        allowed = causal_bias(seq, keep.dtype)  # (B, 1, T, T) additive: earlier real items only
        if (
            self.event_ctx is not None
        ):  # + time/event/rating embeddings; interval biases (-inf off the causal mask)
            emb = self.event_ctx.add_inputs(emb, batch or {"seq": seq})  # (B, T, D)
            allowed = self.event_ctx.attention_mask(
                allowed, batch or {"seq": seq}, causal=True
            )  # (B, H, T, T)
        x = emb * self.config.hidden**0.5 + self.pos_emb(pos)  # (B, T, D)
        x = self.emb_drop(x) * keep
        side = (
            self.item_ctx.side(seq) if self.config.difsr and self.item_ctx is not None else None
        )  # (F, B, T, D)
        maps = []
        for i, block in enumerate(self.blocks):
            x, weights = block(
                x,
                allowed,
                keep,
                need_weights,
                last=1 if last_only and i == len(self.blocks) - 1 else 0,
                side=side,
            )
            if weights is not None:
                maps.append(weights)
        return self.ln_out(x), maps  # (B, T, D), or (B, 1, D) with last_only

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` item embeddings of ``batch["seq"]`` (fused with features when they are on), before
        scaling and positions."""
        seq = batch["seq"]
        return self.item_emb(seq) if self.item_ctx is None else F.embedding(seq, self.item_vectors())

    def score_embedded(self, batch: Batch, embedded: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, I+1)`` with ``embedded`` ``(B, T, D)`` in place of the history's item embeddings."""
        query = self.run(batch["seq"], last_only=True, content=embedded, batch=batch)[0][:, -1, :]  # (B, D)
        return factorised_scores(query, self.item_vectors())

    def encode(self, seq: torch.Tensor) -> torch.Tensor:
        """Hidden states ``(B, T, D)`` of a left-padded item matrix ``seq`` ``(B, T)``."""
        return self.run(seq)[0]

    def attention_weights(self, seq: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer attention probabilities ``(B, H, T, T)`` of ``seq`` (call in eval mode, for
        inspection)."""
        return self.run(seq, need_weights=True)[1]

    # -- training: shifted next-item targets -------------------------------------------------
    def train_rows(self, train: Sequences) -> int:
        if self.targets is None:
            return next_item_rows(train)
        return len(
            target_users(train, self.config.max_len, self.targets, "sasrec")
        )  # with a target of the type

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Shuffled batches of (input, next-item target) windows; negatives redrawn every call."""
        c = self.config
        seen = train.user_item_keys() if c.loss == "bce" else None
        shared = None
        if c.loss == "sampled_ce":
            shared = SharedNegatives.build(
                train.items, self.n_items, c.sampler, c.n_negatives, c.in_batch_negatives
            )
        only = None if self.targets is None else target_users(train, c.max_len, self.targets, "sasrec")
        for users, batch in shifted_batches(train, c.max_len, batch_size, rng, shared, only):
            if self.event_ctx is not None or self.targets is not None:  # per-event inputs; targets by type
                batch = shifted_columns(
                    batch,
                    train,
                    users,
                    c.max_len,
                    self.event_ctx,
                    self.targets,
                    c.explicit_negatives,
                    "sasrec",
                )
            if seen is not None:  # one negative per position, never an item the user has seen
                target = batch["target"]  # (B, T)
                batch["negative"] = torch.from_numpy(
                    draw_negatives(users, tuple(target.shape), self.n_items, seen, rng)
                )
            yield batch

    def loss_terms(self, batch: Batch) -> int:
        """How many terms :meth:`loss` averages over: the real (non-padding) target positions."""
        return int((batch["target"] > 0).sum())

    def loss(self, batch: Batch) -> torch.Tensor:
        """Next-item loss over real (non-padding) positions only (and, with ``explicit_negatives``, a
        ``softplus`` of each low-rated target's score where it would have been the target)."""
        target = batch["target"]  # (B, T)
        real = target > 0
        states = self.run(batch["seq"], batch=batch)[0]  # (B, T, D)
        emb = self.item_vectors()  # (I+1, D) the output layer (fused with features when they are on)
        out = self._target_loss(states[real], target[real], emb, batch, real)
        if self.config.explicit_negatives:  # low-rated events pushed down where they were the next event
            neg = batch[EXPLICIT_NEGATIVE]  # (B, T) the low-rated next item, else 0
            out = out + explicit_negative_loss(states[neg > 0], emb, neg[neg > 0])
        return out

    def _target_loss(
        self, h: torch.Tensor, pos: torch.Tensor, emb: torch.Tensor, batch: Batch, real: torch.Tensor
    ) -> torch.Tensor:
        """The configured loss of states ``h`` ``(N, D)`` at the ``real`` positions against their targets
        ``pos`` ``(N,)``."""
        if self.config.loss == "bce":
            neg = batch["negative"][real]  # (N,)
            pos_logit = (h * self._rows(pos, emb)).sum(-1)  # (N,)
            neg_logit = (h * self._rows(neg, emb)).sum(-1)  # (N,)
            return F.binary_cross_entropy_with_logits(
                pos_logit, torch.ones_like(pos_logit)
            ) + F.binary_cross_entropy_with_logits(neg_logit, torch.zeros_like(neg_logit))
        if self.config.loss == "ce":
            return softmax_cross_entropy(
                h, emb, pos, fast=self.config.fast_ce
            )  # chunked: never all (N, I+1) logits
        neg = batch["negative"]  # (S,) negatives shared by the batch
        pos_logit = (h * self._rows(pos, emb)).sum(-1)  # (N,)
        neg_logit = h @ self._rows(neg, emb).T  # (N, S)
        return batch_sampled_softmax(pos_logit, neg_logit, pos, batch, real)  # log-Q corrected unless uniform

    def _rows(self, idx: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        """Rows ``idx`` of the item table ``emb``; with ``sparse_embedding`` their gradient is sparse too."""
        if self.config.sparse_embedding:
            return F.embedding(idx, self.item_emb.weight, sparse=True)
        return emb[idx]

    # -- inference: the last position's state against every item -----------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        width = inference_width(histories, self.config.max_len)
        cols = score_columns(self.event_ctx, histories, width, "sasrec") | request_batch(
            self.event_ctx, request_time
        )
        return {"seq": torch.from_numpy(histories.padded(width))} | cols

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """``(B, D)`` last-position states: ``score(batch) == query_vectors(batch) @ item_vectors().T``."""
        return self.run(batch["seq"], last_only=True, batch=batch)[0][:, -1, :]

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

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` for the next item; column 0 (padding) is ``-inf``."""
        return factorised_scores(self.query_vectors(batch), self.item_vectors())  # (B, I+1)
