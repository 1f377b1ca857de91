"""What a model is, and what it can do: the explicit contracts every layer above the models codes to.

Every registered model implements one *required* contract for its task; everything else is an
optional *capability* declared by implementing the matching protocol (models subclass the
protocols they implement, so mypy checks the signatures and a reader sees them in the class
line). :func:`capabilities` is the one place that answers "what can this model do"; no other
module probes a model with ``hasattr``.

Required contracts
    :class:`Trainable` (the training loop's view: rows, batches, loss), and for the sequential task
    :class:`SequentialModel` (``score_inputs`` + ``score``). Closed-form models (POP) implement
    :class:`ClosedForm` instead of learning by gradient descent.

Optional capabilities
    :class:`Factorised` (``score = query_vectors @ item_vectors.T``), :class:`ItemBiased` (plus
    ``item_bias``), :class:`CandidateScorer` (``score_items`` for given candidates),
    :class:`AttentionInspectable` (``attention_weights``), :class:`EmbeddingInputs`
    (``input_embeddings`` + ``score_embedded``, for gradient attributions), :class:`WeightedLoss`
    (``loss_terms``),
    :class:`SharedBatch` (``shared_batch_keys``, entries drawn once per batch).

Shapes: ``B`` rows, ``I`` items (internal indices ``1..I``; column ``0`` is padding and is
``-inf`` in every full score matrix), ``D`` the vector width, ``C`` candidates per row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np
import torch

from attnrec.data.schema import Sequences

Batch = dict[str, torch.Tensor]
"""A batch: named tensors built by the model itself (``train_batches`` / ``score_inputs``)."""

TrainData_contra = TypeVar("TrainData_contra", contravariant=True)


# -- required ------------------------------------------------------------------------------------
@runtime_checkable
class Trainable(Protocol[TrainData_contra]):
    """What the one training loop needs: an ``nn.Module`` that builds its own batches and loss."""

    def train_rows(self, train: TrainData_contra) -> int:
        """How many training rows (samples) an epoch over ``train`` has."""
        ...

    def train_batches(
        self, train: TrainData_contra, batch_size: int, rng: np.random.Generator
    ) -> Iterator[Batch]:
        """One epoch of shuffled batches; all randomness comes from ``rng``."""
        ...

    def loss(self, batch: Batch) -> torch.Tensor:
        """The scalar training loss of ``batch`` (a mean over its terms)."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """Ranks the whole catalog for a batch of users and their histories (the sequential task)."""

    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """The model's inputs for ``users`` ``(B,)`` (``-1``: unknown) and their internal-index ``histories``.

        ``request_time`` ``(B,)``: each row's time of the request (int64 seconds; evaluation passes the
        target event's timestamp). Every model accepts it; only a model that reads the request's time
        (SASRec/BERT4Rec with time settings, :mod:`attnrec.models.event_context`) uses it, the others
        ignore it, so their scores do not depend on it.
        """
        ...

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, I + 1)``; column 0 (padding) is ``-inf``."""
        ...


@runtime_checkable
class SequentialModel(Trainable[Sequences], Scorer, Protocol):
    """The required contract of a neural sequential recommender: trainable on sequences, scores the
    catalog."""


@runtime_checkable
class ClosedForm(Scorer, Protocol):
    """A model fitted in closed form (counting, a solve), not by the training loop (POP)."""

    def fit(self, train: Sequences, rng: np.random.Generator) -> object:
        """Fit on the training sequences; ``rng`` for any randomness the fit needs."""
        ...


# -- optional capabilities -----------------------------------------------------------------------
@runtime_checkable
class Factorised(Protocol):
    """``score(batch) == query_vectors(batch) @ item_vectors().T`` (+ ``item_bias()`` if :class:`ItemBiased`).

    Serving's chunked top-k, ANN export, similar items and candidate-only evaluation build on this.
    """

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """``(B, D)`` query vectors."""
        ...

    def item_vectors(self) -> torch.Tensor:
        """``(I + 1, D)`` item vectors (row 0 is padding)."""
        ...


@runtime_checkable
class ItemBiased(Protocol):
    """A factorised model whose scores add a per-item bias."""

    def item_bias(self) -> torch.Tensor:
        """``(I + 1,)`` per-item bias added to ``query @ item_vectors.T``."""
        ...


@runtime_checkable
class CandidateScorer(Protocol):
    """Scores given candidates directly (NCF's MLP, TransRec's distances), equal to the matching score
    columns."""

    def score_items(self, batch: Batch, items: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, C)`` of the internal ``items`` ``(B, C)``."""
        ...


@runtime_checkable
class AttentionInspectable(Protocol):
    """Exposes its self-attention probabilities for inspection and attribution."""

    def attention_weights(self, seq: torch.Tensor) -> list[torch.Tensor]:
        """Per-layer attention probabilities ``(B, H, T, T)`` of a left-padded item matrix ``seq``
        ``(B, T)``."""
        ...


@runtime_checkable
class EmbeddingInputs(Protocol):
    """Scores computed from its per-position input embeddings, which a caller may replace (integrated
    gradients).

    ``score_embedded(batch, input_embeddings(batch)) == score(batch)``; the embeddings are each
    position's *content* (the item's row of the input table, fused with its features when those are
    on), before the model adds positions, scales or normalises them, so a zero row means "no item
    content here" while positions, padding and special tokens stay as the batch has them.
    """

    def input_embeddings(self, batch: Batch) -> torch.Tensor:
        """``(B, T, D)`` per-position input content of ``batch["seq"]`` ``(B, T)``."""
        ...

    def score_embedded(self, batch: Batch, embedded: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, I + 1)`` of ``batch`` with ``embedded`` ``(B, T, D)`` in place of
        :meth:`input_embeddings`."""
        ...


@runtime_checkable
class WeightedLoss(Protocol):
    """Its loss is a mean over a batch-dependent number of terms (e.g. real target positions).

    Distributed training weights each rank's loss by its share of these terms.
    """

    def loss_terms(self, batch: Batch) -> int:
        """How many terms :meth:`Trainable.loss` averages over for ``batch``."""
        ...


@runtime_checkable
class SharedBatch(Protocol):
    """Batch entries drawn once per batch (not per row), kept whole on every rank under DDP."""

    shared_batch_keys: frozenset[str]


# -- the one place that answers "what can this model do" ---------------------------------------
@dataclass(frozen=True)
class Capabilities:
    """What a model can do; each flag is one protocol of this module."""

    trainable: bool
    closed_form: bool
    scores_catalog: bool
    factorised: bool
    item_bias: bool
    candidate_scoring: bool
    attention: bool
    embedding_inputs: bool
    weighted_loss: bool
    shared_batch: bool

    def names(self) -> list[str]:
        """The names of the capabilities present, in declaration order."""
        return [f.name for f in fields(self) if getattr(self, f.name)]


def capabilities(model: object) -> Capabilities:
    """The capabilities of a model instance (checked against the protocols above)."""
    return Capabilities(
        trainable=isinstance(model, Trainable),
        closed_form=isinstance(model, ClosedForm),
        scores_catalog=isinstance(model, Scorer),
        factorised=isinstance(model, Factorised),
        item_bias=isinstance(model, ItemBiased),
        candidate_scoring=isinstance(model, CandidateScorer),
        attention=isinstance(model, AttentionInspectable),
        embedding_inputs=isinstance(model, EmbeddingInputs),
        weighted_loss=isinstance(model, WeightedLoss),
        shared_batch=isinstance(model, SharedBatch),
    )


__all__ = [
    "AttentionInspectable",
    "Batch",
    "CandidateScorer",
    "Capabilities",
    "ClosedForm",
    "EmbeddingInputs",
    "Factorised",
    "ItemBiased",
    "Scorer",
    "SequentialModel",
    "SharedBatch",
    "Trainable",
    "WeightedLoss",
    "capabilities",
]
