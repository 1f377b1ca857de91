"""POP: rank items by how often they occur in the training data.

The simplest baseline of the SASRec and BERT4Rec papers. It is not personalised: every user gets
the same ranking (minus the items they have seen, which the evaluator and the recommender
remove). It is an estimator, not a neural network: ``fit`` counts, nothing is learned by
gradient descent, and the checkpoint holds the counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models._baselines import item_counts
from attnrec.registry import register


@dataclass(frozen=True)
class PopConfig:
    """POP has no settings: the score of an item is its number of training interactions."""


@register(
    "pop",
    config=PopConfig,
    kind="estimator",
    presets={"ml-1m": {}, "beauty": {}, "demo": {}},
)
class Pop:
    """POP: the most popular items of the training data, the same for every user."""

    def __init__(self, config: PopConfig, n_users: int, n_items: int) -> None:
        self.config = config
        self.n_users, self.n_items = n_users, n_items
        self.counts = torch.zeros(n_items + 1, dtype=torch.float64)  # (I+1,)

    def fit(self, train: Sequences, rng: np.random.Generator) -> Pop:
        """Count each item's training interactions (``rng`` is unused: counting is exact)."""
        if train.n_items != self.n_items:
            raise ValueError(f"training data has {train.n_items} items, the model {self.n_items}")
        self.counts = torch.from_numpy(item_counts(train).astype(np.float64))  # (I+1,)
        return self

    def score(self, users: np.ndarray, histories: Sequences) -> torch.Tensor:
        """Scores ``(B, n_items + 1)``: the item counts for every row; column 0 is ``-inf``."""
        scores = self.counts.to(torch.float32).clone()  # (I+1,)
        scores[0] = -torch.inf
        return scores.expand(len(users), -1).clone()  # (B, I+1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"counts": self.counts.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        counts = state["counts"]
        if counts.shape != (self.n_items + 1,):
            raise RuntimeError(f"counts of shape {tuple(counts.shape)} do not fit {self.n_items} items")
        self.counts = counts.to(torch.float64).clone()

    def num_parameters(self) -> int:
        """No trainable parameters (the counts are statistics, not weights)."""
        return 0
