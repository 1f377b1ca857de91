"""Loads that cannot wedge the server: each on a thread of its own, given up after a timeout.

A model directory is checked before it is read (:func:`attnrec.recommend.load`), so a load of a
damaged directory is refused in well under a second. What no check can bound (a file system that
stops answering, a machine swapping) is bounded here: :func:`run_abandonable` runs the load on a
fresh daemon thread and stops waiting for it after ``timeout_s``. The caller then goes on (the
reload lock is released, the old model keeps serving); the thread is abandoned: its result, if it
ever comes, is dropped, and being a daemon thread it does not hold the process at exit, so SIGTERM
still stops the server. Threads of a :class:`~concurrent.futures.ThreadPoolExecutor` (asyncio's
default executor included) would: they are joined at exit.

:class:`ReloadLog` records what every reload came to (``ok``, ``refused``, ``timed_out``), for
``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

R = TypeVar("R")

OUTCOMES = ("ok", "refused", "timed_out")

# The niceness a load thread gives itself (Linux schedules threads one by one): on a busy core the
# scheduler then prefers the threads that answer requests, and the load takes the time they leave.
LOAD_NICENESS = 10


def lower_priority() -> None:
    """Lower the calling thread's scheduling priority by :data:`LOAD_NICENESS` where the platform
    schedules threads one by one (Linux); elsewhere, or when not permitted, leave it."""
    if not sys.platform.startswith("linux"):  # elsewhere setpriority(PRIO_PROCESS) takes process IDs only
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + LOAD_NICENESS))
    except OSError:
        pass


class LoadTimedOut(Exception):
    """A load did not finish within its timeout; its thread was abandoned."""


@dataclass(frozen=True)
class ReloadOutcome:
    """What one reload of a model came to."""

    model: str
    outcome: str  # one of OUTCOMES
    finished_at: float  # Unix time
    seconds: float
    message: str | None = None  # why it was refused or timed out


@dataclass
class ReloadLog:
    """Every reload's outcome, counted per model, the last one of each model, the reloads running
    now and the load threads abandoned after a timeout (``stuck``: those still running)."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (model, outcome) -> reloads
    last: dict[str, ReloadOutcome] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)  # model -> Unix time it started
    abandoned: list[threading.Thread] = field(default_factory=list)

    def started(self, model: str) -> None:
        self.running[model] = time.time()

    def finished(self, model: str, outcome: str, message: str | None = None) -> ReloadOutcome:
        """Record the end of ``model``'s running reload; returns the record."""
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown reload outcome {outcome!r}")
        now = time.time()
        done = ReloadOutcome(model, outcome, now, now - self.running.pop(model, now), message)
        self.counts[model, outcome] += 1
        self.last[model] = done
        return done

    @property
    def stuck(self) -> int:
        """Abandoned load threads still running (each holds whatever it had loaded so far)."""
        self.abandoned = [t for t in self.abandoned if t.is_alive()]
        return len(self.abandoned)


async def run_abandonable(
    fn: Callable[[], R],
    timeout_s: float,
    name: str,
    log: ReloadLog | None = None,
    *,
    background: bool = False,
) -> R:
    """``fn()`` on a new daemon thread named ``name``; :class:`LoadTimedOut` after ``timeout_s``
    seconds, the thread then abandoned (recorded in ``log``). Cancelling the caller abandons it too.
    ``background``: the thread runs at a lower priority (:func:`lower_priority`), for a load that
    shares the cores with requests being answered (a hot reload)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[R] = loop.create_future()

    def settle(ok: bool, value: object) -> None:
        if future.done():  # given up meanwhile
            return
        if ok:
            future.set_result(value)  # type: ignore[arg-type]
        else:
            assert isinstance(value, BaseException)
            future.set_exception(value)

    def run() -> None:
        if background:
            lower_priority()
        try:
            result: object = fn()
            ok = True
        except BaseException as e:  # noqa: BLE001 - handed to the waiting coroutine
            result, ok = e, False
        try:
            loop.call_soon_threadsafe(settle, ok, result)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        return await asyncio.wait_for(future, timeout_s)
    except TimeoutError:
        if log is not None:
            log.abandoned.append(thread)
        raise LoadTimedOut(f"did not finish within {timeout_s:g} s; given up") from None


__all__ = ["OUTCOMES", "LoadTimedOut", "ReloadLog", "ReloadOutcome", "run_abandonable"]
