"""Shared fixtures: small synthetic logs with sequential structure, single-threaded torch."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch

from attnrec.data.schema import Interactions
from synthetic_logs import ring_log

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ring() -> Interactions:
    return ring_log()


# Loggers that commands configure for the whole process (`attnrec serve` sends them to the stderr of
# the moment, which under CliRunner is a stream closed when the command returns).
CONFIGURED_LOGGERS = ("", "attnrec", "uvicorn", "uvicorn.error", "uvicorn.access")  # "": the root logger


@pytest.fixture(autouse=True)
def _logging_as_before() -> Iterator[None]:
    """Each test leaves the process's logging as it found it: handlers, level and propagation."""
    saved = {
        name: (list(lg.handlers), lg.level, lg.propagate)
        for name in CONFIGURED_LOGGERS
        for lg in [logging.getLogger(name)]
    }
    yield
    for name, (handlers, level, propagate) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
