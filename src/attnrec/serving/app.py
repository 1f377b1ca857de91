"""The HTTP service: ``create_app({name: checkpoint_dir | Recommender}) -> FastAPI``.

This module only assembles the parts: the table of models (:mod:`~attnrec.serving.model_table`),
their life on a worker thread (:mod:`~attnrec.serving.lifecycle`), the micro-batcher
(:mod:`~attnrec.serving.batcher`), the error shape (:mod:`~attnrec.serving.api_errors`), the
endpoints (:mod:`~attnrec.serving.routes`, :mod:`~attnrec.serving.browse`) and the web page
(:mod:`~attnrec.serving.page`), plus the operator's parts: API keys
(:mod:`~attnrec.serving.auth`), CORS, ``/metrics`` (:mod:`~attnrec.serving.prometheus`) and hot reload
(:mod:`~attnrec.serving.reload`, :mod:`~attnrec.serving.admin`). Concurrent ``/v1/recommend`` requests for one
model are micro-batched: a queue gathers the requests that arrive while the worker is busy (and, with
``max_wait_ms > 0``, for up to that long) and scores them with one ``recommend_many`` call.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from fastapi import FastAPI

from attnrec import __version__
from attnrec.serving.admin import router as admin_router
from attnrec.serving.admin import status_router
from attnrec.serving.api_errors import install_error_handling
from attnrec.serving.auth import ApiKeyAuth, KeyRing
from attnrec.serving.bodies import Parsers
from attnrec.serving.browse import router as browse_router
from attnrec.serving.cors import Cors
from attnrec.serving.event_routes import install_store_errors
from attnrec.serving.event_routes import router as events_router
from attnrec.serving.lifecycle import ServingState, lifespan
from attnrec.serving.limits import InFlightLimit
from attnrec.serving.logs import RequestLog
from attnrec.serving.model_table import FromDirectory, Served, ServedModel
from attnrec.serving.page import PATHS as PAGE_PATHS
from attnrec.serving.page import page_router
from attnrec.serving.prometheus import RequestMetrics
from attnrec.serving.reload import sighup_reloads
from attnrec.serving.routes import document_limits, document_security, router
from attnrec.serving.schemas import ErrorResponse
from attnrec.serving.serving_config import ServingConfig

Model = str | Path | Served | FromDirectory
"""What ``create_app`` serves: a checkpoint directory, a loaded object, or an object loaded from a
directory."""


def _table(models: Mapping[str, Model]) -> dict[str, ServedModel]:
    """One entry per model: directories to load later, objects ready to prepare."""
    table: dict[str, ServedModel] = {}
    for name, m in models.items():
        if isinstance(m, (str, Path)):
            table[name] = ServedModel(name, Path(m))
        elif isinstance(m, FromDirectory):
            table[name] = ServedModel(name, Path(m.directory), m.obj, m.load_seconds)
        else:
            table[name] = ServedModel(name, None, m)
    return table


def _lifespan(app: FastAPI) -> contextlib.AbstractAsyncContextManager[None]:
    """The models' lifespan, with SIGHUP reloading while it runs when the config asks for it."""
    state = app.state.serving

    @contextlib.asynccontextmanager
    async def run() -> AsyncIterator[None]:
        app.state.parsers = Parsers(state.config.parse_slots)
        app.state.draining = False
        try:
            async with lifespan(app):
                if state.config.reload_on_sighup:
                    async with sighup_reloads(state):
                        yield
                else:
                    yield
                app.state.draining = True  # /readyz: 503 from here on
        finally:
            app.state.parsers.close()
            app.state.parsers = None

    return run()


def _install_operator_middleware(app: FastAPI, state: ServingState) -> None:
    """From the outside in: request IDs and access log, CORS (answers preflights), request metrics,
    the cap on requests in flight, API keys (then the body limit, installed before)."""
    cfg = state.config
    if cfg.api_keys or cfg.admin_keys:
        app.add_middleware(
            ApiKeyAuth,
            keys=KeyRing(cfg.api_keys),
            protect_metrics=cfg.protect_metrics,
            open_paths=PAGE_PATHS if cfg.ui else frozenset(),
            admin_keys=KeyRing(cfg.admin_keys),
        )
    app.add_middleware(InFlightLimit, max_in_flight=cfg.max_in_flight, retry_after_s=cfg.retry_after_s)
    routes = [
        *router.routes,
        *browse_router.routes,
        *admin_router.routes,
        *events_router.routes,
        *status_router.routes,
    ]
    app.add_middleware(RequestMetrics, metrics=state.metrics, routes=routes)
    if cfg.cors_origins:
        app.add_middleware(Cors, origins=cfg.cors_origins)
    app.add_middleware(RequestLog, access=cfg.access_log)


def create_app(models: Mapping[str, Model], config: ServingConfig | None = None) -> FastAPI:
    """A FastAPI app serving ``models`` (name -> checkpoint directory, loaded model object, or
    :class:`~attnrec.serving.model_table.FromDirectory`).

    Directories are loaded in the background when the app starts (``/readyz`` answers 503 until
    they are ready); loaded objects (a :class:`~attnrec.recommend.Recommender`, an explainer)
    are ready at once. Models with a directory can be hot-reloaded (``POST /v1/admin/reload``).
    """
    if not models:
        raise ValueError("create_app needs at least one model")
    table = _table(models)
    cfg = config or ServingConfig()
    if cfg.models_roots is None:  # reloads may load from the folders holding the served directories
        parents = {e.directory.resolve().parent for e in table.values() if e.directory is not None}
        cfg = dataclasses.replace(cfg, models_roots=tuple(sorted(parents)))
    state = ServingState(cfg, table)
    state.metrics.track(list(state.models))
    state.metrics.watch_reloading(lambda: state.reloading.locked())
    app = FastAPI(
        title="attnrec",
        version=__version__,
        description="Recommendations, similar items and explanations from attnrec models. "
        'Errors are JSON: `{"error": {status, code, message, details}}`.',
        lifespan=_lifespan,
        responses={
            400: {"model": ErrorResponse},
            401: {"model": ErrorResponse, "description": "the server needs an API key"},
            403: {"model": ErrorResponse, "description": "an admin endpoint called without an admin key"},
            404: {"model": ErrorResponse},
            422: {"model": ErrorResponse},
            503: {"model": ErrorResponse},
        },
    )
    app.state.serving = state
    app.state.entries = state.models  # the table, for inspection (tests read the batchers' counts)
    app.state.config = state.config
    install_error_handling(app, state.config.max_body_bytes, state.config.body_timeout_s)
    install_store_errors(app)
    _install_operator_middleware(app, state)
    app.include_router(router)
    app.include_router(browse_router)
    app.include_router(admin_router)
    if state.config.store is not None:  # POST /v1/events, DELETE /v1/users/{user}: only with a store
        app.include_router(events_router)
    app.include_router(status_router)
    if state.config.ui:
        app.include_router(page_router())
    spec = document_limits(app.openapi(), state.config)
    app.openapi_schema = document_security(spec, state.config)  # FastAPI serves this cached document
    return app


__all__ = ["FromDirectory", "Model", "ServingConfig", "create_app"]
