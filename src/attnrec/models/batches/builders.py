"""The named batch builders a model declares: how an epoch of training rows becomes batches.

- :class:`ShiftedNextItem`: each user's newest ``max_len + 1`` items, inputs ``seq`` and the next item
  at every position as ``target`` (SASRec, gSASRec, eSASRec, HSTU).

Every builder draws from the epoch's seeded generator only: the rows' shuffle first, then, per batch,
the objective's negatives (:class:`~attnrec.models.objectives.negatives.NegativeDraw`), so an epoch is a
function of its seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from attnrec.data.schema import Sequences
from attnrec.models.batches.windows import batches, next_item_rows, next_item_windows, shifted_pair
from attnrec.models.contracts import Batch
from attnrec.models.objectives.negatives import NegativeDraw


@dataclass(frozen=True)
class ShiftedNextItem:
    """Shifted next-item windows: inputs ``seq`` ``(B, T)`` and next-item targets ``target`` ``(B, T)``.

    A row is a user with at least two items: their newest ``max_len + 1`` items, left-padded, split
    into inputs and targets (:func:`~attnrec.models.batches.windows.shifted_pair`: a target only where
    its input is a real item).
    """

    max_len: int
    label: ClassVar[str] = "target"  # the batch entry the loss's terms are counted in

    def rows(self, train: Sequences, only: np.ndarray | None = None) -> int:
        """Training rows of an epoch: every user with two items, or the users ``only``."""
        return next_item_rows(train) if only is None else len(only)

    def batches(
        self,
        train: Sequences,
        batch_size: int,
        rng: np.random.Generator,
        negatives: NegativeDraw | None = None,
        only: np.ndarray | None = None,
    ) -> Iterator[tuple[np.ndarray, Batch]]:
        """One epoch as ``(users (B,), batch)`` in shuffled order; ``negatives`` drawn per batch after its
        rows (the models' RNG order); ``only``: just these users (e.g. those with a target of a wanted
        event type), else every user with two items."""
        users, windows = next_item_windows(train, self.max_len)  # (U,), (U, T+1)
        if only is not None:
            keep = np.isin(users, only)
            users, windows = users[keep], windows[keep]
        for idx in batches(len(users), batch_size, rng):
            seq, target = shifted_pair(windows[idx])  # (B, T) each
            batch = {"seq": seq, "target": target}
            if negatives is not None:  # e.g. shared by the batch, with their log-Q corrections
                batch |= negatives.draw(target.numpy(), rng, users[idx])
            yield users[idx], batch
