"""Tiny trained models shared by the serving tests (a few seconds of CPU in all)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from attnrec.data.schema import DataSource, Interactions
from attnrec.recommend import Recommender
from synthetic_logs import ring_log

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))


def synthetic_log(n_users: int = 120, n_items: int = 60, seed: int = 0) -> Interactions:
    """The ring log (item i is often followed by i+1, so there is sequential signal), every other item
    titled."""
    titles = {f"i{i}": f"Item number {i}" for i in range(0, n_items, 2)}
    return ring_log(
        n_users, n_items, seed, min_len=5, follow=0.8, source=DataSource("ring-synthetic"), item_titles=titles
    )


@pytest.fixture(scope="session")
def log() -> Interactions:
    return synthetic_log()


@pytest.fixture(scope="session")
def sasrec(log: Interactions) -> Recommender:
    rec = Recommender(
        "sasrec",
        {"hidden": 16, "n_layers": 1, "max_len": 20, "dropout": 0.1},
        {"max_epochs": 3, "batch_size": 64, "lr": 5e-3, "device": "cpu"},
    )
    rec.fit(log, progress=False)
    from attnrec.data.split import leave_one_out

    rec.evaluate(leave_one_out(log).test)
    return rec


@pytest.fixture(scope="session")
def sasrec_dir(sasrec: Recommender, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sasrec.save(tmp_path_factory.mktemp("ckpt") / "sasrec")
