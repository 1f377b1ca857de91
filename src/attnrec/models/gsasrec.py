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

from dataclasses import dataclass, fields

import torch
from torch import nn

from attnrec.models.batches.builders import ShiftedNextItem
from attnrec.models.contracts import Batch
from attnrec.models.nn.wrapper import FULL, Encoded, Pass, SequentialWrapper
from attnrec.models.objectives import build_objective
from attnrec.models.registry import register
from attnrec.models.sasrec import SASRecBackbone, SASRecConfig, SASRecNetwork
from attnrec.models.validation import require_positive_fields, require_rates


@dataclass(frozen=True)
class GSASRecConfig(SASRecNetwork):
    """gSASRec hyperparameters: SASRec's network (:class:`SASRecNetwork`), then the loss's (defaults:
    the authors' ML-1M configuration, gSASRec-pytorch ``config_ml1m.py``; only the width and dropout
    differ from SASRec's)."""

    hidden: int = 128  # d, the embedding and model width
    dropout: float = 0.5
    n_negatives: int = 256  # k, uniform negatives per positive
    gbce_t: float = 0.75  # calibration: 0 = BCE, 1 = fully calibrated
    reuse_item_embeddings: bool = False  # False: a separate output item table (the authors' default)

    def __post_init__(self) -> None:
        require_positive_fields(self, "hidden", "n_layers", "n_heads", "max_len", "n_negatives")
        require_rates(self, "dropout", "attn_dropout")
        if not 0.0 <= self.gbce_t <= 1.0:
            raise ValueError(f"gbce_t must be in [0, 1], not {self.gbce_t}")

    def network(self) -> SASRecConfig:
        """The settings of the SASRec network gSASRec trains (its loss settings are never used)."""
        return SASRecConfig(**{f.name: getattr(self, f.name) for f in fields(SASRecNetwork)})


# The authors' ML-1M run (gSASRec-pytorch README and config_ml1m.py: d 128, 2 blocks, 1 head, max_len 200,
# dropout 0.5, k 256, t 0.75; batch 128, torch's Adam: lr 1e-3, betas 0.9/0.999). They stop after 200
# "epochs" of 100 batches without improvement (their best checkpoint is at batch 86,064); an attnrec epoch
# is one full pass, 48 batches on ML-1M, so that rule is patience 417. `ml-1m` keeps the model settings
# with a budget a CPU can afford (docs/explanation/models.md).
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
class GSASRec(nn.Module, SequentialWrapper):
    """gSASRec: SASRec's network trained with k uniform negatives per positive and the gBCE loss."""

    def __init__(self, config: GSASRecConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.net = SASRecBackbone(c.network(), n_items)  # embeddings, causal blocks, final LayerNorm
        self.out_emb: nn.Embedding | None = None
        if not c.reuse_item_embeddings:
            self.out_emb = nn.Embedding(n_items + 1, c.hidden, padding_idx=0)
            nn.init.xavier_normal_(self.out_emb.weight)
            with torch.no_grad():
                self.out_emb.weight[0].zero_()
        # Shifted next-item windows, each with k uniform negatives per sequence, and gBCE.
        self.objective = build_objective(c, ("gbce",), default_loss="gbce")
        self.builder = ShiftedNextItem(c.max_len)

    def forward(self, batch: Batch, how: Pass = FULL) -> Encoded:
        """SASRec's hidden states of ``batch["seq"]`` (:class:`~attnrec.models.sasrec.SASRecBackbone`)."""
        out: Encoded = self.net(batch, how)
        return out

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` the network's input item embeddings of ``batch["seq"]`` (before scaling and
        positions)."""
        return self.net.input_embeddings(batch)

    def item_vectors(self) -> torch.Tensor:
        """Output item vectors ``(n_items + 1, D)`` (row 0 is padding): gSASRec's own table unless
        ``reuse_item_embeddings``."""
        return self.net.item_emb.weight if self.out_emb is None else self.out_emb.weight
