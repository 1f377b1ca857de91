"""GRU4Rec and GRU4Rec+: recurrent next-item recommendation (Hidasi et al., ICLR 2016 and CIKM 2018).

A GRU reads the user's last ``max_len`` items (embedded) and its state after each item scores
every item as the next one through an output layer ``W_y h + b_y``. Sequences are packed, so the
recurrence starts from a zero state at the first real item whatever the padding.

Losses (``loss``):

* ``"ce"`` (GRU4Rec as registered here): full softmax cross-entropy over the catalogue at every
  position, the strongest setting of the original model family.
* ``"bpr-max"`` / ``"top1-max"`` (GRU4Rec+, "Recurrent neural networks with top-k gains"): the
  target is compared with ``n_negatives`` items shared by the batch and drawn in proportion to
  ``popularity ** sample_alpha`` (the paper's additional popularity-based samples; the in-batch
  negatives of session-parallel training follow the same distribution). The negatives' scores are
  weighted by their softmax, so the hardest ones dominate:
  BPR-max ``-log sum_j s_j sigmoid(r_i - r_j) + bpreg * sum_j s_j r_j^2`` and
  TOP1-max ``sum_j s_j (sigmoid(r_j - r_i) + sigmoid(r_j^2))``.

GRU4Rec does not use user IDs; an ad-hoc history is scored like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attnrec.data.schema import Sequences
from attnrec.models.batches.builders import ShiftedNextItem
from attnrec.models.contracts import Batch, Factorised, ItemBiased, SequentialModel
from attnrec.models.nn.wrapper import NextItemTraining
from attnrec.models.objectives import ItemTable, Scored, build_objective
from attnrec.models.registry import register
from attnrec.models.scoring import factorised_scores
from attnrec.models.validation import require_positive_fields

LOSSES = ("ce", "bpr-max", "top1-max")


@dataclass(frozen=True)
class GRU4RecConfig:
    """GRU4Rec hyperparameters."""

    hidden: int = 100  # GRU state size
    emb_dim: int = 64  # input item embedding size
    n_layers: int = 1
    dropout: float = 0.25  # on the embedded inputs and on the GRU outputs
    max_len: int = 200  # most recent items read
    loss: str = "ce"  # "ce" (full softmax), "bpr-max" or "top1-max" (sampled, GRU4Rec+)
    n_negatives: int = 2048  # shared sampled negatives per batch (bpr-max, top1-max)
    sample_alpha: float = 0.75  # negatives are drawn in proportion to popularity ** sample_alpha
    bpreg: float = 1.0  # score regularisation of BPR-max

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, not {self.loss!r}")
        require_positive_fields(self, "hidden", "emb_dim", "n_layers", "max_len", "n_negatives")
        if not 0 <= self.dropout < 1 or self.sample_alpha < 0 or self.bpreg < 0:
            raise ValueError("dropout must be in [0, 1); sample_alpha and bpreg must be >= 0")


@dataclass(frozen=True)
class GRU4RecPlusConfig(GRU4RecConfig):
    """GRU4Rec+ hyperparameters: GRU4Rec's, with the sampled BPR-max loss by default."""

    loss: str = "bpr-max"


def _presets(plus: bool) -> dict[str, dict[str, dict[str, object]]]:
    """ML-1M has long histories (read 200), Beauty short ones (read 50, more dropout).

    One ML-1M epoch costs ~84 s of one CPU core with the full softmax and ~40 s with 512 sampled
    negatives, so the full-softmax model gets a larger time budget. On Beauty a full-softmax epoch
    over 54k items takes ~4 min; 3600 s gives it 15 epochs (1200 s gave 73% of the paper's HR@10).
    """
    neg = {"n_negatives": 512} if plus else {}
    lr = 5e-3 if plus else 1e-2
    return {
        "ml-1m": {
            "model": {"hidden": 100, "emb_dim": 64, "max_len": 200, "dropout": 0.2, **neg},
            "train": {
                "lr": lr,
                "batch_size": 32,
                "grad_clip": 5.0,
                "max_epochs": 100,
                "patience": 3,
                "time_budget": 600 if plus else 900,
            },
        },
        "beauty": {
            "model": {"hidden": 100, "emb_dim": 64, "max_len": 50, "dropout": 0.4, **neg},
            "train": {
                "lr": lr,
                "batch_size": 128,
                "grad_clip": 5.0,
                "max_epochs": 100,
                "patience": 3,
                "time_budget": 600 if plus else 3600,
            },
        },
        "demo": {
            "model": {
                "hidden": 64,
                "emb_dim": 32,
                "max_len": 50,
                "dropout": 0.1,
                **({"n_negatives": 128} if plus else {}),
            },
            "train": {"lr": 5e-3, "batch_size": 64, "max_epochs": 40, "patience": 5, "time_budget": 120},
        },
    }


@register("gru4rec", config=GRU4RecConfig, presets=_presets(False))
class GRU4Rec(nn.Module, NextItemTraining, SequentialModel, Factorised, ItemBiased):
    """GRU4Rec: a GRU over the item history trained with full cross-entropy on the next item."""

    def __init__(self, config: GRU4RecConfig, n_users: int, n_items: int) -> None:
        super().__init__()
        c = self.config = config
        self.n_items = n_items
        self.item_emb = nn.Embedding(n_items + 1, c.emb_dim, padding_idx=0)
        self.gru = nn.GRU(
            c.emb_dim, c.hidden, c.n_layers, batch_first=True, dropout=c.dropout if c.n_layers > 1 else 0.0
        )
        self.drop = nn.Dropout(c.dropout)
        self.out_emb = nn.Embedding(n_items + 1, c.hidden, padding_idx=0)  # W_y
        self.out_bias = nn.Parameter(torch.zeros(n_items + 1))  # b_y
        nn.init.xavier_uniform_(self.item_emb.weight)
        nn.init.xavier_uniform_(self.out_emb.weight)
        with torch.no_grad():
            self.item_emb.weight[0].zero_()
            self.out_emb.weight[0].zero_()
        self.objective = build_objective(c, LOSSES)  # full softmax, or BPR-max / TOP1-max on sampled items
        self.builder = ShiftedNextItem(c.max_len)

    def encode(self, seq: torch.Tensor) -> torch.Tensor:
        """GRU states ``(B, T, H)`` of a left-padded item matrix ``seq`` ``(B, T)``, in the same layout."""
        b, t = seq.shape
        lengths = (seq > 0).sum(1)  # (B,)
        shift = (t - lengths)[:, None]  # (B, 1) leading padding of each row
        cols = torch.arange(t, device=seq.device)[None, :]  # (1, T)
        right = seq.gather(1, (cols + shift) % t)  # (B, T) items first, padding after
        x = self.drop(self.item_emb(right))  # (B, T, E)
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=t)  # (B, T, H), zeros after the end
        back = ((cols - shift) % t)[..., None].expand(-1, -1, h.shape[-1])  # (B, T, H)
        states: torch.Tensor = self.drop(h.gather(1, back))  # (B, T, H) left-padded again
        return states

    # -- training: next item at every position (NextItemTraining's batches), the configured objective --
    def loss(self, batch: Batch) -> torch.Tensor:
        """Mean next-item loss over the real targets (each after a real input: batching.shifted_pair)."""
        target = batch["target"]  # (B, T)
        real = target > 0
        h = self.encode(batch["seq"])[real]  # (N, H)
        table = ItemTable(self.out_emb.weight, bias=self.out_bias, gather=self.out_emb)  # W_y, b_y
        return self.objective.loss(Scored(h, target[real], real), table, batch)

    # -- inference ---------------------------------------------------------------------------------
    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        return {"seq": torch.from_numpy(histories.padded(self.config.max_len))}

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """The state after the newest item ``(B, H)``: ``score == query @ item_vectors().T + item_bias()``."""
        return self.encode(batch["seq"])[:, -1, :]

    def item_vectors(self) -> torch.Tensor:
        """Output item vectors ``W_y`` ``(n_items + 1, H)`` (row 0 is padding)."""
        return self.out_emb.weight

    def item_bias(self) -> torch.Tensor:
        """Output biases ``b_y`` ``(n_items + 1,)``."""
        return self.out_bias

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` for the next item; column 0 (padding) is ``-inf``."""
        h = self.query_vectors(batch)  # (B, H) the state after the newest item
        return factorised_scores(h, self.item_vectors(), self.item_bias())  # (B, I+1)


@register("gru4rec-plus", config=GRU4RecPlusConfig, presets=_presets(True))
class GRU4RecPlus(GRU4Rec):
    """GRU4Rec+: GRU4Rec trained on sampled negatives with the BPR-max (or TOP1-max) loss."""
