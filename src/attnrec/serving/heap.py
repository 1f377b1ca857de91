"""The garbage collector and tail latency: freeze the loaded models out of the collector's sight.

A served model is hundreds of thousands of long-lived Python objects (modules, parameters, ID
maps, titles). CPython's cyclic collector walks all of them in every full (oldest-generation)
collection, and a full collection happens every so often under load: a pause of a few hundred
milliseconds that stalls the micro-batch being scored, which showed as p99 ~10x p95 in the load
test. :func:`freeze_heap` collects what is garbage now and moves everything still alive into the
permanent generation (:func:`gc.freeze`), which the collector never examines; objects made later
(requests, responses) are collected as usual. Reference counting still frees frozen objects
whose last reference goes, so an unloaded model is freed unless it sits in a reference cycle;
freezing again (after a reload) first unfreezes, so such cycles are collected then. On glibc the
freed memory is then handed back to the system (``malloc_trim``): without it a reload leaves the
old model's pages in the allocator's arenas and the process's resident memory steps up.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import time
from collections.abc import Callable
from typing import cast

log = logging.getLogger("attnrec.serving")


def freeze_heap() -> int:
    """Collect garbage, then freeze every surviving object; the number of objects frozen."""
    t0 = time.perf_counter()
    gc.unfreeze()  # what an earlier freeze kept (a replaced model's cycles) can be collected now
    gc.collect()
    gc.freeze()
    _trim_malloc()
    frozen = gc.get_freeze_count()
    log.info("gc: %d objects frozen in %.0f ms", frozen, 1000 * (time.perf_counter() - t0))
    return frozen


def _trim_malloc() -> None:
    """Return free heap pages to the system where the C library can (glibc); elsewhere nothing."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once (in the process's own symbols: no ldconfig subprocess)."""
    try:
        return cast(Callable[[int], int], ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError):  # not glibc (musl, macOS): no malloc_trim
        return None


__all__ = ["freeze_heap"]
