"""The sequential wrapper: what every transformer does the same way around its backbone, written once.

A transformer model is its backbone (an ``nn.Module`` whose ``forward(batch)`` gives the hidden states,
in the model's own file) plus this wrapper, which trains and scores it:

- training: the model's builder (:mod:`attnrec.models.batches.builders`) makes the epoch's batches,
  its :mod:`~attnrec.models.objectives` objective draws their negatives and turns the scored
  positions' states into the loss;
- scoring: the newest position's state is the query, the item table the output layer
  (``score == query_vectors @ item_vectors().T``, column 0 ``-inf``);
- the capability protocols of :mod:`attnrec.models.contracts` (factorised scores, attention
  inspection, embedding inputs, weighted loss, shared batch entries).

The model class inherits from its backbone and from this wrapper (``class SASRec(SASRecBackbone,
SequentialWrapper)``): the network's modules stay attributes of the model, so the names of saved
weights do not depend on the split. A model sets :attr:`objective` and :attr:`builder` in its
``__init__`` and overrides the hooks (``with_columns``, ``training_inputs``, ``output_table``,
``head``, ``extra_loss``, ``inference_columns``) only where it reads more than the items.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models.batches.builders import BatchBuilder
from attnrec.models.batches.windows import inference_width
from attnrec.models.contracts import (
    AttentionInspectable,
    Batch,
    EmbeddingInputs,
    Factorised,
    ItemBiased,
    SequentialModel,
    SharedBatch,
    WeightedLoss,
)
from attnrec.models.objectives import ItemTable, Objective, Scored
from attnrec.models.scoring import factorised_scores


class Encoded(NamedTuple):
    """A backbone's output: hidden states ``(B, T, D)`` (``(B, 1, D)`` for the newest position only) and,
    when asked for, each layer's attention weights ``(B, H, T, T)`` (else ``[]``)."""

    states: torch.Tensor
    attention: list[torch.Tensor]


@dataclass(frozen=True)
class Pass:
    """How a backbone's forward pass runs (the default, :data:`FULL`: every position, the items' own
    embeddings, no attention weights)."""

    last_only: bool = False  # the newest position's state (B, 1, D) only: the final block computes one query
    content: torch.Tensor | None = None  # (B, T, D) in place of the items' embeddings (attributions)
    need_weights: bool = False  # each layer's attention weights (B, H, T, T) too, for inspection


FULL = Pass()
NEWEST = Pass(last_only=True)


class NextItemTraining:
    """The epochs of a model trained on next items (the transformers, GRU4Rec): its builder's batches
    with its objective's negatives."""

    n_items: int
    objective: Objective  # chosen from the config by attnrec.models.objectives.build_objective
    builder: BatchBuilder  # the model's batch builder (attnrec.models.batches.builders)

    def with_columns(self, batch: Batch, train: Sequences, users: np.ndarray) -> Batch:
        """A training ``batch`` of ``users`` with the per-event entries the model reads (none here)."""
        return batch

    def train_rows(self, train: Sequences) -> int:
        return self.builder.rows(train)

    def train_batches(self, train: Sequences, batch_size: int, rng: np.random.Generator) -> Iterator[Batch]:
        """One epoch of shuffled batches from the builder, with the objective's negatives drawn per batch."""
        negatives = self.objective.negatives(train, self.n_items)
        for users, batch in self.builder.batches(train, batch_size, rng, negatives):
            yield self.with_columns(batch, train, users)


class SequentialWrapper(
    NextItemTraining,
    SequentialModel,
    Factorised,
    AttentionInspectable,
    EmbeddingInputs,
    WeightedLoss,
    SharedBatch,
):
    """Training, scoring and the capability protocols of a next-item transformer, around its backbone."""

    config: Any  # the model's config dataclass

    # -- the backbone's part (defined by the model's backbone, earlier in the class's MRO) -----------
    def forward(self, batch: Batch, how: Pass = FULL) -> Encoded:
        """Hidden states of ``batch["seq"]`` ``(B, T)``, computed as ``how`` says."""
        raise NotImplementedError

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` per-position input content of ``batch["seq"]`` (before positions and scaling)."""
        raise NotImplementedError

    def item_vectors(self) -> torch.Tensor:
        """Item vectors ``(I + 1, D)``, the output layer (row 0 is padding)."""
        raise NotImplementedError

    @property
    def shared_batch_keys(self) -> frozenset[str]:  # type: ignore[override]
        """Batch entries drawn once per batch (the objective's), kept whole on every DDP rank."""
        return self.objective.shared_batch_keys()

    def head(self, states: torch.Tensor) -> torch.Tensor:
        """The output head: what the logits read from hidden states ``(..., D)`` (HSTU divides them by its
        temperature, BERT4Rec transforms them; unchanged here)."""
        return states

    # -- inspection ---------------------------------------------------------------------------------
    def encode(self, seq: torch.Tensor) -> torch.Tensor:
        """Hidden states ``(B, T, D)`` of a left-padded item matrix ``seq`` ``(B, T)``."""
        return self.forward({"seq": seq}).states

    def attention_weights(self, seq: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer attention weights ``(B, H, T, T)`` of ``seq`` (call in eval mode, for inspection)."""
        return self.forward({"seq": seq}, Pass(need_weights=True)).attention

    # -- training ----------------------------------------------------------------------------------
    def output_table(self) -> ItemTable:
        """The output layer the objective scores against (the item vectors)."""
        return ItemTable(self.item_vectors())

    def training_inputs(self, batch: Batch) -> tuple[torch.Tensor | None, ItemTable | None]:
        """Inputs a training step uses in place of the usual ones, drawn before the forward pass: the
        item content ``(B, T, D)`` and the output table (``None``: the item embeddings and
        :meth:`output_table`, the table read after the forward pass)."""
        return None, None

    def extra_loss(self, states: torch.Tensor, table: ItemTable, batch: Batch) -> torch.Tensor | None:
        """A term added to the objective's loss (e.g. explicit negatives), or ``None``."""
        return None

    def loss_terms(self, batch: Batch) -> int:
        """How many terms :meth:`loss` averages over: the real (non-padding) target positions."""
        return int((batch[self.builder.label] > 0).sum())

    def loss(self, batch: Batch) -> torch.Tensor:
        """The objective's loss over the real (non-padding) target positions (plus :meth:`extra_loss`)."""
        target = batch[self.builder.label]  # (B, T)
        real = target > 0
        content, table = self.training_inputs(batch)
        states = self.head(self.forward(batch, Pass(content=content)).states)  # (B, T, D)
        if table is None:
            table = self.output_table()  # (I+1, D) the output layer, read after the forward pass
        out = self.objective.loss(Scored(states[real], target[real], real, states), table, batch)
        extra = self.extra_loss(states, table, batch)
        return out if extra is None else out + extra

    # -- scoring: the newest position's state against every item ------------------------------------
    def output_bias(self) -> torch.Tensor | None:
        """The per-item output bias ``(I + 1,)`` of a model that has one (:class:`ItemBiased`), else
        ``None``."""
        return self.item_bias() if isinstance(self, ItemBiased) else None

    def inference_columns(self, histories: Sequences, width: int, request_time: np.ndarray | None) -> Batch:
        """The per-event entries the model reads when scoring ``histories`` padded to ``width`` (none
        here)."""
        return {}

    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        width = inference_width(histories, self.config.max_len)
        seq = torch.from_numpy(histories.padded(width))
        return {"seq": seq} | self.inference_columns(histories, width, request_time)

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """``(B, D)`` newest-position states: ``score(batch) == query_vectors(batch) @ item_vectors().T``."""
        return self.head(self.forward(batch, NEWEST).states[:, -1, :])

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` for the next item; column 0 (padding) is ``-inf``."""
        return factorised_scores(
            self.query_vectors(batch), self.item_vectors(), self.output_bias()
        )  # (B, I+1)

    def score_embedded(self, batch: Batch, embedded: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, I+1)`` with ``embedded`` ``(B, T, D)`` in place of the history's item embeddings."""
        query = self.forward(batch, Pass(last_only=True, content=embedded)).states[:, -1, :]  # (B, D)
        return factorised_scores(self.head(query), self.item_vectors(), self.output_bias())
