"""An app's running state and its life: the model worker thread, loading, warm-up and batchers.

Nothing lives at module level: every model, queue and thread belongs to the :class:`ServingState`
of one app, so several apps (and tests) can coexist in one process. Model work runs on one worker
thread per app (torch uses its own intra-op threads), never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from fastapi import FastAPI, Request

from attnrec import __version__
from attnrec.checkpoint import CheckpointError, read_json
from attnrec.recommend import Recommendation, Recommender, load
from attnrec.recommend.event_requests import event_keys, request_values
from attnrec.serving.ann import ApproximateRecommender
from attnrec.serving.api_errors import ApiError
from attnrec.serving.batcher import MicroBatcher
from attnrec.serving.export import use_onnx
from attnrec.serving.heap import collect_unfrozen, freeze_heap
from attnrec.serving.loading import ReloadLog, run_abandonable
from attnrec.serving.model_table import (
    Loaded,
    RecommendArgs,
    RecommendsMany,
    Served,
    ServedModel,
    backend_of,
    pick,
    served_capabilities,
)
from attnrec.serving.prometheus import ServiceMetrics
from attnrec.serving.serving_config import ServingConfig

log = logging.getLogger("attnrec.serving")
R = TypeVar("R")


@dataclass
class ServingState:
    """Everything one app owns: its settings, its table of models, its metrics and (while running)
    its worker thread."""

    config: ServingConfig
    models: dict[str, ServedModel]
    metrics: ServiceMetrics = field(default_factory=ServiceMetrics)
    workers: list[ThreadPoolExecutor] = field(
        default_factory=list
    )  # the running lifespan's (an app can restart)
    reloading: asyncio.Lock = field(default_factory=asyncio.Lock)  # one reload at a time (new per lifespan)
    reloads: ReloadLog = field(default_factory=ReloadLog)  # what each reload came to

    def worker(self) -> ThreadPoolExecutor:
        """The model thread; 503 when the app's lifespan has not started."""
        if not self.workers:
            raise ApiError(503, "not_started", "the app is not running (its lifespan has not started)")
        return self.workers[-1]

    async def on_worker(self, fn: Callable[[], R]) -> R:
        """``fn()`` run on the model thread."""
        return await asyncio.get_running_loop().run_in_executor(self.worker(), fn)

    def pick(self, name: str | None, capability: str) -> ServedModel:
        """See :func:`attnrec.serving.model_table.pick`."""
        return pick(self.models, name, capability)


def serving_state(request: Request) -> ServingState:
    """The state of the app serving ``request`` (a FastAPI dependency)."""
    state = request.app.state.serving
    assert isinstance(state, ServingState)
    return state


def _recommend_many(
    e: ServedModel, metrics: ServiceMetrics
) -> Callable[[list[RecommendArgs]], list[Recommendation]]:
    def run(requests: list[RecommendArgs]) -> list[Recommendation]:
        obj = e.obj  # read once: a reload during this batch does not change the model that answers it
        if not isinstance(obj, RecommendsMany):  # the routes only batch for models that can recommend
            raise TypeError(f"model {e.name!r} cannot recommend")
        t0 = time.perf_counter()
        try:
            return obj.recommend_many(requests)
        finally:
            metrics.inferred(e.name, "/v1/recommend", time.perf_counter() - t0)

    return run


def _warm_up(rec: Recommender) -> None:
    """One request by user and one by history, so the first real request pays no lazy set-up."""
    assert rec.items_ is not None
    rec.recommend_many([{"user": rec.users_.to_list()[0] if rec.users_ else None, "k": 1}])
    rec.recommend_many([_one_event_history(rec)])


def _one_event_history(rec: Recommender) -> dict[str, object]:
    """A request with a one-event history: the first stored event with its per-event columns (a model trained
    with time or event inputs needs them), or the first item when nothing is stored."""
    assert rec.items_ is not None and rec.histories_ is not None
    stored = rec.histories_
    if not len(stored.items):
        return {"history": [str(rec.items_.external[0])], "k": 1}
    request: dict[str, object] = {"history": rec.items_.to_external(stored.items[:1]), "k": 1}
    for key, column in event_keys().items():
        if column in stored.columns:
            request[key] = request_values(column, stored.columns[column][:1], rec.events_, rec.vocabularies_)
    return request


def _versions(directory: Path | None) -> dict[str, object]:
    """The attnrec version that saved ``directory`` and its format (this process's version for objects)."""
    if directory is None:
        return {"attnrec": __version__, "format": None}
    try:
        meta = read_json(directory / "config.json")
    except CheckpointError:  # replaced since it was loaded: the versions are unknown, the model is not
        return {"attnrec": None, "format": None}
    return {"attnrec": meta.get("attnrec_version"), "format": meta.get("format_version")}


def prepare(
    given: Served | None, directory: Path | None, cfg: ServingConfig, given_seconds: float = 0.0
) -> Loaded:
    """Load (unless ``given``, loaded in ``given_seconds``), switch backend, warm up; runs off the event loop.

    A directory is opened under ``cfg``'s load policy (:meth:`ServingConfig.load_policy`); with
    ``gc_freeze`` what loading left behind is collected here, off the event loop."""
    t0 = time.perf_counter() - given_seconds
    if given is not None:
        obj = given
    elif directory is not None:
        policy = cfg.load_policy()
        obj = load(
            directory,
            cfg.device,
            allow_unsigned=policy.allow_unsigned,
            manifest_key=policy.manifest_key,
            limits=policy.limits,
        )
    else:
        raise ValueError("a served model needs an object or a directory")
    if cfg.backend == "onnx" and isinstance(obj, Recommender):
        use_onnx(obj)
    if cfg.store is not None:  # live histories (a reloaded version reads the same store)
        rec = obj.rec if isinstance(obj, ApproximateRecommender) else obj
        if isinstance(rec, Recommender):
            rec.use_store(cfg.store)
    if cfg.warmup and isinstance(obj, Recommender):
        _warm_up(obj)
    if cfg.gc_freeze:
        collect_unfrozen()
    return Loaded(
        obj,
        backend_of(obj),
        served_capabilities(obj),
        time.time(),
        time.perf_counter() - t0,
        _versions(directory),
    )


async def load_all(state: ServingState, todo: list[ServedModel]) -> None:
    """Prepare ``todo`` one by one, a failure recorded, not raised: objects passed in on the worker
    thread, directories each on a thread of its own given up after ``load_timeout_s``
    (:func:`~attnrec.serving.loading.run_abandonable`)."""
    loop = asyncio.get_running_loop()
    cfg = state.config
    for e in todo:
        try:
            if e.given is None:
                job = functools.partial(prepare, None, e.directory, cfg)
                e.loaded = await run_abandonable(
                    job, cfg.load_timeout_s, f"attnrec-load-{e.name}", state.reloads
                )
            else:
                e.loaded = await loop.run_in_executor(
                    state.worker(), prepare, e.given, e.directory, cfg, e.given_seconds
                )
            e.status, e.error = "ready", None
            state.metrics.model_loaded(e.name, e.loaded.load_seconds, e.loaded.loaded_at)
            log.info("model %s ready in %.1fs (%s)", e.name, e.loaded.load_seconds, e.source)
        except Exception as exc:  # noqa: BLE001 - reported by /readyz and /v1/models
            e.status, e.error = "failed", f"{type(exc).__name__}: {exc}"
            log.error("model %s failed to load: %s", e.name, e.error)
    if todo and state.config.gc_freeze:
        freeze_heap()  # the loaded models out of the cyclic collector's sight (see attnrec.serving.heap)


def _start_batchers(state: ServingState, executor: ThreadPoolExecutor) -> None:
    cfg = state.config
    for e in state.models.values():
        batcher: MicroBatcher[RecommendArgs, Recommendation] = MicroBatcher(
            _recommend_many(e, state.metrics),
            None if cfg.inline else executor,
            cfg.max_batch,
            cfg.max_wait_ms / 1000,
            on_batch=functools.partial(state.metrics.batch, e.name),
        )
        batcher.start()
        e.batcher = batcher


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Start the worker thread and batchers, load the models; stop them all on shutdown."""
    state = app.state.serving
    assert isinstance(state, ServingState)
    state.workers.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnrec-model"))
    state.reloading = asyncio.Lock()  # bound to this lifespan's event loop
    executor = state.workers[-1]
    _start_batchers(state, executor)
    # Objects passed in are prepared (backend, warm-up) before serving starts; directories load
    # in the background so that /healthz answers at once and /readyz says when they are ready.
    await load_all(state, [e for e in state.models.values() if e.given is not None])
    loader = asyncio.get_running_loop().create_task(
        load_all(state, [e for e in state.models.values() if e.given is None])
    )
    try:
        yield
    finally:
        loader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loader
        for e in state.models.values():
            if e.batcher is not None:
                await e.batcher.stop()
        executor.shutdown(wait=False, cancel_futures=True)
        state.workers.clear()


__all__ = ["ServingState", "lifespan", "load_all", "prepare", "serving_state"]
