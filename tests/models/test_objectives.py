"""Objectives as objects: one mapping from a model's ``loss`` setting to its objective, each model declaring
the objectives it trains with, and the same objective object behind every model that names it."""

from __future__ import annotations

import pytest
import torch

from attnrec.models import bert4rec, esasrec, gru4rec, hstu, sasrec
from attnrec.models.objectives import (
    BCE,
    GBCE,
    OBJECTIVES,
    BPRMax,
    FullSoftmax,
    ItemTable,
    SampledSoftmax,
    Scored,
    TOP1Max,
    build_objective,
)
from attnrec.models.objectives.negatives import SHARED_KEYS

DECLARED = {
    "sasrec": sasrec.LOSSES,
    "bert4rec": bert4rec.LOSSES,
    "esasrec": esasrec.LOSSES,
    "hstu": hstu.LOSSES,
    "gru4rec": gru4rec.LOSSES,
}


@pytest.mark.parametrize("model", sorted(DECLARED))
def test_every_declared_loss_has_an_objective(model: str) -> None:
    assert set(DECLARED[model]) <= set(OBJECTIVES)


def test_the_config_picks_the_objective_and_its_settings() -> None:
    assert isinstance(build_objective(sasrec.SASRecConfig(), sasrec.LOSSES), BCE)
    assert build_objective(sasrec.SASRecConfig(loss="ce", fast_ce=True), sasrec.LOSSES) == FullSoftmax(True)
    cfg = esasrec.ESASRecConfig(n_negatives=7, sampler="mixed", in_batch_negatives=2, negatives="sequence")
    assert build_objective(cfg, esasrec.LOSSES) == SampledSoftmax(7, "mixed", 2, "sequence")
    assert build_objective(gru4rec.GRU4RecConfig(loss="bpr-max", bpreg=0.5), gru4rec.LOSSES) == BPRMax(
        2048, 0.75, 0.5
    )
    assert isinstance(build_objective(gru4rec.GRU4RecConfig(loss="top1-max"), gru4rec.LOSSES), TOP1Max)


def test_a_loss_the_model_does_not_declare_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match="loss must be one of sampled_ce, ce, not 'bce'"):
        build_objective(sasrec.SASRecConfig(), esasrec.LOSSES)


def test_only_negatives_drawn_once_per_batch_are_kept_whole_under_ddp() -> None:
    assert SampledSoftmax(8).shared_batch_keys() == SHARED_KEYS
    assert SampledSoftmax(8, per="position").shared_batch_keys() == frozenset()
    assert BCE().shared_batch_keys() == frozenset()  # one negative per position: rows, split with them
    assert GBCE(4, 0.5).shared_batch_keys() == frozenset()
    assert BPRMax(8, 0.75).shared_batch_keys() == SHARED_KEYS


def test_a_table_function_is_called_only_when_an_objective_reads_the_whole_table() -> None:
    calls = []

    def whole() -> torch.Tensor:
        calls.append(1)
        return torch.eye(4)

    h, target, rows = torch.ones(2, 4), torch.tensor([1, 2]), torch.tensor([[True, True]])
    batch = {"negative": torch.tensor([3]), "target": target[None]}
    SampledSoftmax(1).loss(Scored(h, target, rows), ItemTable(whole, gather=lambda i: torch.eye(4)[i]), batch)
    assert calls == []  # negatives shared by the batch: only their rows are read
    FullSoftmax().loss(Scored(h, target, rows), ItemTable(whole), batch)
    assert calls == [1]
