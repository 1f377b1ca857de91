"""Shared fixtures: small synthetic logs with sequential structure, single-threaded torch."""

from __future__ import annotations

import pytest
import torch

from attnrec.data.schema import Interactions
from synthetic_logs import ring_log

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ring() -> Interactions:
    return ring_log()
