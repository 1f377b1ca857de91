"""FMC and FPMC: recover a deterministic item-to-item chain, beat POP, persist exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from baseline_kit import (
    chain,
    demo,
    fit,
    successor_accuracy,
)

from attnrec.models.batches.windows import positions
from attnrec.models.fpmc import FMC, FPMC, FPMCConfig


@pytest.mark.parametrize("name", ["fmc", "fpmc"])
def test_recovers_a_deterministic_chain(name: str) -> None:
    data = chain()
    rec = fit(name, data, epochs=25, batch_size=128)
    assert successor_accuracy(rec, data) == 1.0


def test_transition_positions() -> None:
    from attnrec.data.schema import Sequences

    train = Sequences.from_lists([[5, 6, 7], [], [8], [1, 2]], n_items=8)
    users, prev, nxt = positions(train, 2, 2, min_prev=1)
    assert users.tolist() == [0, 0, 3]
    assert prev.tolist() == [[0, 5], [5, 6], [0, 1]]
    assert nxt.tolist() == [[6, 7], [7, 0], [2, 0]]


def test_fmc_has_no_user_factors_and_ignores_the_user() -> None:
    data, split = demo()
    fmc, fpmc = (
        FMC(FPMCConfig(dim=8), data.n_users, data.n_items),
        FPMC(FPMCConfig(dim=8), data.n_users, data.n_items),
    )
    assert not hasattr(fmc, "user_emb") and hasattr(fpmc, "user_emb")
    assert sum(p.numel() for p in fmc.parameters()) == 2 * 8 * (data.n_items + 1)
    hist = split.test.histories.take(np.array([0, 0]))
    with torch.no_grad():
        a = fmc.score(fmc.score_inputs(np.array([0, 5]), hist))
    assert torch.equal(a[0], a[1])
