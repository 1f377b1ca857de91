"""The per-position negatives batch the sampled-softmax models' tests share (``negatives="position"``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnrec.data.schema import Sequences


def position_batch(model: Any, n_negatives: int) -> dict[str, torch.Tensor]:
    """A training batch of ``model`` (configured with ``negatives="position"``) over two sequences of a
    30-item catalog, checked to hold ``(B, T, n_negatives)`` draws, rows of the batch (DDP splits them)."""
    assert model.shared_batch_keys == frozenset()
    train = Sequences.from_lists([[1, 2, 3, 4, 5], [6, 7, 8]], 30)
    batch: dict[str, torch.Tensor] = next(iter(model.train_batches(train, 8, np.random.default_rng(0))))
    assert batch["negative"].shape == (*batch["seq"].shape, n_negatives)
    return batch
