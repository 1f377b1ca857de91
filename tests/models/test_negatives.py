"""Negative sampling: the sampled-softmax proposal distributions, computed by hand."""

import numpy as np
import pytest

from attnrec.models.negatives import negative_proposal


def test_negative_proposals_by_hand() -> None:
    items = np.array([1, 1, 1, 2])  # training counts 3, 1, 0 over items 1..3
    pop = np.array([0.0, 4 / 7, 2 / 7, 1 / 7])  # count + 1, normalised; padding never drawn
    uniform = np.array([0.0, 1 / 3, 1 / 3, 1 / 3])
    assert np.allclose(negative_proposal(items, 3, "popularity"), pop)
    assert np.allclose(negative_proposal(items, 3, "uniform"), uniform)
    mixed = negative_proposal(items, 3, "mixed")
    assert np.allclose(mixed, (pop + uniform) / 2) and np.isclose(mixed.sum(), 1.0)
    assert mixed[3] > pop[3]  # the unseen tail item is drawn more often than under popularity


def test_unknown_sampler_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="sampler must be one of"):
        negative_proposal(np.array([1]), 3, "zipf")
