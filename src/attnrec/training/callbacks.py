"""Hooks into the one training loop: code that watches each epoch (tracking, tuning) without a second loop.

A callback is any object with ``on_epoch(record)``. The loop calls every callback on the main rank
after each epoch, once the epoch's record is complete (training loss and time, validation metrics
when the epoch was validated) and its state is saved. A callback ends the run early by raising
:class:`StopTraining`: the loop stops after that epoch as it would on patience (the best weights
are restored) and records the exception's message as :attr:`TrainResult.stopped`. Any other
exception propagates and ends training.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from attnrec.config import ConfigError
from attnrec.training.result import EpochRecord


class StopTraining(Exception):
    """Raised by a callback to end training after the current epoch; the message says why (e.g.
    ``pruned``)."""


@runtime_checkable
class EpochCallback(Protocol):
    """Receives every finished epoch's record."""

    def on_epoch(self, record: EpochRecord) -> None:
        """Called on the main rank after each epoch; raise :class:`StopTraining` to stop after it."""
        ...


def check_callbacks(callbacks: object) -> tuple[EpochCallback, ...]:
    """``callbacks`` as a tuple of objects with an ``on_epoch`` method; a one-line ``ConfigError`` before any
    training otherwise (a plain function ended the first epoch in an ``AttributeError``)."""
    if isinstance(callbacks, str | bytes) or not isinstance(callbacks, Iterable):
        raise ConfigError(f"callbacks is a list of epoch callbacks, not {type(callbacks).__name__}")
    listed = tuple(callbacks)
    for cb in listed:
        if not callable(getattr(cb, "on_epoch", None)):
            raise ConfigError(
                f"a callback has an on_epoch(record) method (attnrec.training.callbacks); {cb!r:.60} has none"
            )
    return listed


def run_callbacks(callbacks: tuple[EpochCallback, ...], record: EpochRecord) -> str:
    """Call each callback with ``record``; the first :class:`StopTraining`'s reason, or ``""`` to go on."""
    for cb in callbacks:
        try:
            cb.on_epoch(record)
        except StopTraining as stop:
            return str(stop) or f"stopped by {type(cb).__name__}"
    return ""


__all__ = ["EpochCallback", "StopTraining", "check_callbacks", "run_callbacks"]
