"""torch.compile of the training step: the flag is ignored on CPU, and the step traces with dynamo."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnrec.data.schema import Interactions
from attnrec.data.split import leave_one_out
from attnrec.models.sasrec import SASRec, SASRecConfig
from attnrec.training.loop import train
from attnrec.training.step import LossOf
from attnrec.training.train_config import TrainConfig


def _model(ring: Interactions, loss: str) -> SASRec:
    torch.manual_seed(0)
    cfg = SASRecConfig(
        hidden=16,
        n_layers=1,
        max_len=10,
        dropout=0.0,
        loss=loss,
        sampler="popularity",
        n_negatives=20,
        in_batch_negatives=5,
    )
    return SASRec(cfg, ring.n_users, ring.n_items)


def test_compile_flag_is_ignored_on_cpu(ring: Interactions) -> None:
    split = leave_one_out(ring)
    states = []
    for flag in (False, True):
        m = _model(ring, "ce")
        train(
            m,
            split.train,
            lambda _: {"NDCG@10": 0.0},
            TrainConfig(max_epochs=1, batch_size=64, compile=flag, device="cpu"),
            progress=False,
        )
        states.append(m.state_dict())
    assert all(torch.equal(v, states[1][k]) for k, v in states[0].items())


@pytest.mark.parametrize("loss", ["ce", "sampled_ce"])
def test_training_step_traces_with_dynamo(ring: Interactions, loss: str) -> None:
    """What ``compile=True`` wraps on CUDA, traced here with the eager backend (no kernel compilation)."""
    split = leave_one_out(ring)
    m = _model(ring, loss)
    compiled = torch.compile(LossOf(m), dynamic=True, backend="eager")
    for batch in list(m.train_batches(split.train, 32, np.random.default_rng(0)))[:2]:
        a, e = compiled(batch), LossOf(m)(batch)
        a.backward()
        assert torch.allclose(a, e)
