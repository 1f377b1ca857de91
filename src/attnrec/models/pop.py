"""POP: rank items by how often they occur in the training data.

The simplest baseline of the SASRec and BERT4Rec papers. It is not personalised: every user gets
the same ranking (minus the items they have seen, which the evaluator and the recommender
remove). It is fitted in closed form (:class:`~attnrec.models.contracts.ClosedForm`): ``fit``
counts, nothing is learned by gradient descent. It is still an ``nn.Module`` whose counts are a
buffer, so devices, scoring and state dicts work as for every other model (the saved key is
``"counts"``, float64, as before).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models._baselines import CountedItems
from attnrec.models.contracts import Batch, ClosedForm
from attnrec.models.registry import register


@dataclass(frozen=True)
class PopConfig:
    """POP has no settings: the score of an item is its number of training interactions."""


@register(
    "pop",
    config=PopConfig,
    presets={"ml-1m": {}, "beauty": {}, "demo": {}},
)
class Pop(CountedItems[PopConfig], ClosedForm):
    """POP: the most popular items of the training data, the same for every user."""

    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """Only the rows matter (the ranking is the same for everyone): ``{"users": (B,)}``."""
        return {"users": torch.as_tensor(np.asarray(users), dtype=torch.long)}

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)``: the item counts for every row; column 0 is ``-inf``."""
        scores = self.counts.to(torch.float32).clone()  # (I+1,)
        scores[0] = -torch.inf
        return scores.expand(len(batch["users"]), -1).clone()  # (B, I+1)
