"""Hot reload: replace a served model by a new directory without failing a request.

The new model is loaded, switched to the backend and warmed up on a thread of its own (not the
event loop, not the model thread, so serving goes on meanwhile); then the entry's
:class:`~attnrec.serving.model_table.Loaded` record is replaced in one assignment on the event loop.
A micro-batch already handed to the model thread read the old record and finishes on the old
model; every request picked after the swap gets the new one. If the new directory fails to load
(any exception of :func:`attnrec.recommend.load`: a file that is not a regular one or is too
large, missing files, checksum, size or signature mismatch, an unsigned directory, a model too
large to build, NaN weights, malformed JSON) or cannot do what the old model did, the reload is
refused (422 ``reload_failed``) with a clear log line and the old model keeps serving. A load
that does not finish within ``load_timeout_s`` is given up (504 ``reload_timeout``): the lock is
released, the old model keeps serving, and the abandoned thread cannot hold up shutdown
(:mod:`~attnrec.serving.loading`). While :data:`MAX_STUCK` abandoned loads are still running,
further reloads are refused (503 ``reload_stuck``) rather than piling up threads. Every outcome
(``ok``, ``refused``, ``timed_out``) is recorded in the app's :class:`~attnrec.serving.loading.ReloadLog`.

The swap costs the requests nothing: the collector's freeze of the new model
(:func:`~attnrec.serving.heap.freeze_reloaded`) does not walk the heap.

Triggers: ``POST /v1/admin/reload`` (:mod:`~attnrec.serving.admin`) and, when
``reload_on_sighup`` is set (``attnrec serve`` sets it), SIGHUP, which reloads every model from
the directory it was last loaded from.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from attnrec.serving.api_errors import ApiError
from attnrec.serving.heap import freeze_reloaded
from attnrec.serving.lifecycle import ServingState, prepare
from attnrec.serving.loading import LoadTimedOut, run_abandonable
from attnrec.serving.model_table import Loaded, ServedModel

log = logging.getLogger("attnrec.serving")
MAX_STUCK = 2  # abandoned loads still running beyond which reloads are refused


def _target(e: ServedModel, path: str | Path | None) -> Path:
    if e.status == "loading":
        raise ApiError(409, "model_loading", f"model {e.name!r} is still loading; reload it once it is ready")
    if path is not None:
        return Path(path)
    if e.directory is None:
        raise ApiError(
            409,
            "no_directory",
            f"model {e.name!r} was passed in as an object, not loaded from a "
            'directory: give the directory to load ("path")',
        )
    return e.directory


def _check_compatible(e: ServedModel, new: Loaded) -> None:
    """A reloaded model must answer every endpoint the old one answered (requests in flight rely on it)."""
    lost = [c for c in e.capabilities if c not in new.capabilities]
    if e.status == "ready" and lost:
        raise ValueError(
            f"the new model ({type(new.obj).__name__}) cannot do {', '.join(lost)}, which the served one does"
        )


async def reload_model(state: ServingState, name: str, path: str | Path | None = None) -> ServedModel:
    """Load ``path`` (default: the model's current directory) and swap it in for model ``name``.

    Raises :class:`ApiError`: 404 for an unknown model, 409 while it is still loading or when there
    is no directory to reload from, 422 ``reload_failed`` when the new directory does not load,
    504 ``reload_timeout`` when it does not load in time, 503 ``reload_stuck`` while earlier loads
    given up are still running (the old model keeps serving in each case). A model that had failed
    to load can be reloaded to fix it.
    """
    e = state.models.get(name)
    if e is None:
        raise ApiError(
            404, "unknown_model", f"unknown model {name!r}; loaded models: {', '.join(state.models)}"
        )
    async with state.reloading:
        directory = _target(e, path)
        if state.reloads.stuck >= MAX_STUCK:
            raise ApiError(
                503,
                "reload_stuck",
                f"{state.reloads.stuck} earlier loads that timed out are still running; "
                "no reload until they end (or restart the server)",
            )
        state.reloads.started(name)
        keeps = "the previous model keeps serving" if e.status == "ready" else f"the model stays {e.status}"
        try:
            new = await run_abandonable(
                functools.partial(prepare, None, directory, state.config),
                state.config.load_timeout_s,
                f"attnrec-reload-{name}",
                state.reloads,
                background=True,
            )
            _check_compatible(e, new)
        except LoadTimedOut as exc:
            message = f"reload of model {name!r} from {directory} timed out, {keeps}: {exc}"
            _refused(state, name, "timed_out", message)
            raise ApiError(504, "reload_timeout", message) from None
        except Exception as exc:  # noqa: BLE001 - any load error refuses the reload; the old model stays
            message = (
                f"reload of model {name!r} from {directory} refused, {keeps}: {type(exc).__name__}: {exc}"
            )
            _refused(state, name, "refused", message)
            raise ApiError(422, "reload_failed", message) from None
        e.loaded, e.given, e.given_seconds, e.directory = (
            new,
            new.obj,
            new.load_seconds,
            directory,
        )  # the swap: one assignment serves the new model
        e.status, e.error = "ready", None
        if state.config.gc_freeze:  # the new model out of the collector's sight, without walking the heap
            freeze_reloaded()
        state.reloads.finished(name, "ok")
    state.metrics.reload_done(name, ok=True)
    state.metrics.model_loaded(name, new.load_seconds, new.loaded_at)
    log.info("model %s reloaded from %s in %.1fs", name, directory, new.load_seconds)
    return e


def _refused(state: ServingState, name: str, outcome: str, message: str) -> None:
    state.reloads.finished(name, outcome, message)
    state.metrics.reload_done(name, ok=False)
    log.error("%s", message)


async def reload_all(state: ServingState) -> None:
    """Reload every model that has a directory from it (what SIGHUP does); failures are logged, not raised."""
    log.info("SIGHUP: reloading every model from its directory")
    for e in list(state.models.values()):
        if e.directory is None:
            log.warning("SIGHUP: model %s was passed in as an object; nothing to reload it from", e.name)
            continue
        try:
            await reload_model(state, e.name)
        except ApiError as exc:
            if exc.code not in ("reload_failed", "reload_timeout"):  # logged by reload_model
                log.warning("SIGHUP: model %s not reloaded: %s", e.name, exc.message)


@contextlib.asynccontextmanager
async def sighup_reloads(state: ServingState) -> AsyncIterator[None]:
    """While open, SIGHUP reloads every model (:func:`reload_all`); needs the main thread's event loop."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def on_hangup() -> None:
        task = loop.create_task(reload_all(state))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, on_hangup)
    except (
        NotImplementedError,
        RuntimeError,
        ValueError,
        AttributeError,
    ) as exc:  # not main thread / Windows
        log.warning("SIGHUP reloading is not available here (%s); use POST /v1/admin/reload", exc)
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        for task in list(tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


__all__ = ["reload_all", "reload_model", "sighup_reloads"]
