"""gSASRec: SASRec trained with many negatives and generalised BCE (Petrov & Macdonald, RecSys 2023).

The network is SASRec's, unchanged (:class:`attnrec.models.sasrec.SASRec`: causal self-attention over
the last ``max_len`` items, next-item targets at every position). What differs is training: each
positive is contrasted with ``k = n_negatives`` items drawn uniformly from the catalog, and the loss
is gBCE, binary cross-entropy with the positive's probability raised to ``beta``::

    loss = -( beta * log sigmoid(s+) + sum_j log(1 - sigmoid(s-_j)) ) / (k + 1)
    alpha = k / (|I| - 1)                      # the negative sampling rate
    beta  = alpha * (t * (1 - 1/alpha) + 1/alpha) = 1 - t * (1 - alpha)

``t = gbce_t`` in ``[0, 1]``: ``t = 0`` is plain BCE (``beta = 1``, SASRec's overconfident
objective), ``t = 1`` makes the predicted probabilities calibrated (``beta = alpha``); the paper
recommends ``k = 256``, ``t = 0.75``. With negative sampling a positive is over-represented by
``1/alpha``; ``beta < 1`` shrinks its log-likelihood term to undo that.

Negatives: the authors' code draws ``k`` per position. Here each training *sequence* draws its own
``k``, shared by its positions (``(B, k)`` per batch instead of ``(B, T, k)``): each positive is still
contrasted with ``k`` uniform draws, but the batch gathers ``B x k`` embedding rows, not ``B x T x k``
(about 3 GB a batch at the paper's ML-1M settings). A drawn negative equal to a position's target is
masked for that position.

As in the authors' code, the output layer is a separate item table by default
(``reuse_item_embeddings=False``; they found it converges better); ``True`` ties it to the input
embedding as SASRec does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models.batching import batches, next_item_rows, next_item_windows, shifted_pair
from attnrec.models.contracts import (
    AttentionInspectable,
    Batch,
    EmbeddingInputs,
    Factorised,
    SequentialModel,
    WeightedLoss,
)
from attnrec.models.losses import gbce_beta, gbce_loss
from attnrec.models.registry import register
from attnrec.models.sasrec import SASRec, SASRecConfig
from attnrec.models.scoring import factorised_scores
from attnrec.models.validation import require_positive


@dataclass(frozen=True)
class GSASRecConfig:
    """gSASRec hyperparameters (defaults: the authors' ML-1M configuration, gSASRec-pytorch
    ``config_ml1m.py``)."""

    hidden: int = 128  # d, the embedding and model width
    n_layers: int = 2  # self-attention blocks
    n_heads: int = 1
    max_len: int = 200  # n, the most recent items used
    dropout: float = 0.5
    # Dropout on attention probabilities; None means "same as dropout" (see SASRecConfig.attn_dropout).
    attn_dropout: float | None = None
    n_negatives: int = 256  # k, uniform negatives per positive
    gbce_t: float = 0.75  # calibration: 0 = BCE, 1 = fully calibrated
    reuse_item_embeddings: bool = False  # False: a separate output item table (the authors' default)

    def __post_init__(self) -> None:
        require_positive(
            hidden=self.hidden,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            max_len=self.max_len,
            n_negatives=self.n_negatives,
        )
        if not 0.0 <= self.gbce_t <= 1.0:
            raise ValueError(f"gbce_t must be in [0, 1], not {self.gbce_t}")

    def network(self) -> SASRecConfig:
        """The settings of the SASRec network gSASRec trains (its loss settings are never used)."""
        return SASRecConfig(
            hidden=self.hidden,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            max_len=self.max_len,
            dropout=self.dropout,
            attn_dropout=self.attn_dropout,
        )


# The authors' ML-1M run (gSASRec-pytorch README and config_ml1m.py: d 128, 2 blocks, 1 head, max_len 200,
# dropout 0.5, k 256, t 0.75; batch 128, torch's Adam: lr 1e-3, betas 0.9/0.999). They stop after 200
# "epochs" of 100 batches without improvement (their best checkpoint is at batch 86,064); an attnrec epoch
# is one full pass, 48 batches on ML-1M, so that rule is patience 417. `ml-1m` keeps the model settings
# with a budget a CPU can afford (docs/models.md).
_PAPER_TRAIN = {"lr": 1e-3, "batch_size": 128, "beta2": 0.999}


@register(
    "gsasrec",
    config=GSASRecConfig,
    presets={
        "paper": {"model": {}, "train": _PAPER_TRAIN | {"max_epochs": 3000, "patience": 417}},
        # At these settings gBCE first learns popularity and stays there for many epochs: on a GPU
        # (ml-1m-gsasrec-gpu) validation NDCG@10 sat at 0.02 from epoch 4 to 54, where patience 20 stopped
        # it. Hence all 200 epochs (min_epochs), never a stop on that plateau.
        "ml-1m": {
            "model": {},
            "train": _PAPER_TRAIN | {"max_epochs": 200, "patience": 20, "min_epochs": 200},
        },
        # `make demo`-sized: the built-in demo data in a couple of minutes on 2 CPU cores. gBCE needs many
        # steps before validation leaves popularity level (~400 batches here), hence small batches and
        # patience.
        "demo": {
            "model": {"hidden": 64, "max_len": 50, "dropout": 0.2, "n_negatives": 64},
            "train": {"lr": 2e-3, "batch_size": 32, "max_epochs": 40, "patience": 10, "time_budget": 150.0},
        },
    },
)
class GSASRec(nn.Module, SequentialModel, Factorised, AttentionInspectable, EmbeddingInputs, WeightedLoss):
    """gSASRec: SASRec's network trained with k uniform negatives per positive and the gBCE loss."""

    def __init__(self, config: GSASRecConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.net = SASRec(c.network(), n_users, n_items)  # embeddings, causal blocks, final LayerNorm
        self.out_emb: nn.Embedding | None = None
        if not c.reuse_item_embeddings:
            self.out_emb = nn.Embedding(n_items + 1, c.hidden, padding_idx=0)
            nn.init.xavier_normal_(self.out_emb.weight)
            with torch.no_grad():
                self.out_emb.weight[0].zero_()
        self.beta = gbce_beta(c.n_negatives, n_items, c.gbce_t)  # fixed by k, the catalog size and t

    # -- the network (SASRec's) --------------------------------------------------------------
    def encode(self, seq: torch.Tensor) -> torch.Tensor:
        """Hidden states ``(B, T, D)`` of a left-padded item matrix ``seq`` ``(B, T)``."""
        return self.net.encode(seq)

    def attention_weights(self, seq: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer attention probabilities ``(B, H, T, T)`` of ``seq`` (call in eval mode, for
        inspection)."""
        return self.net.attention_weights(seq)

    def item_vectors(self) -> torch.Tensor:
        """Output item vectors ``(n_items + 1, D)`` (row 0 is padding)."""
        return self.net.item_emb.weight if self.out_emb is None else self.out_emb.weight

    # -- training: shifted next-item targets, k negatives per sequence, gBCE --------------------
    def train_rows(self, train: Sequences) -> int:
        return next_item_rows(train)

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """Shuffled (input, next-item target) windows, each with ``n_negatives`` uniform catalog items."""
        users, windows = next_item_windows(train, self.config.max_len)  # (U,), (U, T+1)
        for idx in batches(len(users), batch_size, rng):
            w = windows[idx]  # (B, T+1)
            neg = rng.integers(1, self.n_items + 1, size=(len(idx), self.config.n_negatives))  # (B, k)
            seq, target = shifted_pair(w)  # (B, T) each
            yield {"seq": seq, "target": target, "negative": torch.from_numpy(neg)}

    def loss_terms(self, batch: Batch) -> int:
        """How many terms :meth:`loss` averages over: the real (non-padding) target positions."""
        return int((batch["target"] > 0).sum())

    def loss(self, batch: Batch) -> torch.Tensor:
        """gBCE over real positions: each target against its sequence's ``k`` negatives."""
        target, neg = batch["target"], batch["negative"]  # (B, T), (B, k)
        h = self.encode(batch["seq"])  # (B, T, D)
        out = self.item_vectors()  # (I+1, D)
        pos_logit = (h * out[target]).sum(-1)  # (B, T)
        neg_logit = h @ out[neg].transpose(1, 2)  # (B, T, k): (B, T, D) @ (B, D, k)
        # A negative that is the position's own target is no negative there (accidental hit).
        neg_logit = neg_logit.masked_fill(neg[:, None, :] == target[..., None], -torch.inf)  # (B, T, k)
        real = target > 0
        return gbce_loss(pos_logit[real], neg_logit[real], self.beta)  # (N,), (N, k) real positions only

    # -- inference: the last position's state against every item -----------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        return self.net.score_inputs(users, histories, request_time)

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """``(B, D)`` last-position states: ``score(batch) == query_vectors(batch) @ item_vectors().T``."""
        return self.net.query_vectors(batch)

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` for the next item; column 0 (padding) is ``-inf``."""
        return factorised_scores(self.query_vectors(batch), self.item_vectors())  # (B, I+1)

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` the network's input item embeddings of ``batch["seq"]`` (SASRec's, before scaling and
        positions)."""
        return self.net.input_embeddings(batch)

    def score_embedded(self, batch: Batch, embedded: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, I+1)`` with ``embedded`` ``(B, T, D)`` in place of the history's item embeddings."""
        query = self.net.run(batch["seq"], last_only=True, content=embedded)[0][:, -1, :]  # (B, D)
        # Against gSASRec's own output table (separate unless reuse_item_embeddings), as score does.
        return factorised_scores(query, self.item_vectors())  # (B, I+1)
