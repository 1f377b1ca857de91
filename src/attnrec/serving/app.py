"""The HTTP service: ``create_app({name: checkpoint_dir | Recommender}) -> FastAPI``.

This module only assembles the parts: the table of models (:mod:`~attnrec.serving.registry`),
their life on a worker thread (:mod:`~attnrec.serving.lifecycle`), the micro-batcher
(:mod:`~attnrec.serving.batcher`), the error shape (:mod:`~attnrec.serving.errors`) and the
endpoints (:mod:`~attnrec.serving.routes`). Concurrent ``/v1/recommend`` requests for one model
are micro-batched: a queue gathers the requests that arrive while the worker is busy (and, with
``max_wait_ms > 0``, for up to that long) and scores them with one ``recommend_many`` call.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fastapi import FastAPI

from attnrec import __version__
from attnrec.serving.config import ServingConfig
from attnrec.serving.errors import install_error_handling
from attnrec.serving.lifecycle import ServingState, lifespan
from attnrec.serving.registry import Served, ServedModel
from attnrec.serving.routes import document_limits, router
from attnrec.serving.schemas import ErrorResponse


def _table(models: Mapping[str, str | Path | Served]) -> dict[str, ServedModel]:
    """One entry per model: directories to load later, objects ready to prepare."""
    table: dict[str, ServedModel] = {}
    for name, m in models.items():
        if isinstance(m, (str, Path)):
            table[name] = ServedModel(name, str(m))
        else:
            table[name] = ServedModel(name, f"<{type(m).__name__} object>", m)
    return table


def create_app(models: Mapping[str, str | Path | Served], config: ServingConfig | None = None) -> FastAPI:
    """A FastAPI app serving ``models`` (name -> checkpoint directory or loaded model object).

    Directories are loaded in the background when the app starts (``/readyz`` answers 503 until
    they are ready); loaded objects (a :class:`~attnrec.recommend.Recommender`, an explainer)
    are ready at once.
    """
    if not models:
        raise ValueError("create_app needs at least one model")
    state = ServingState(config or ServingConfig(), _table(models))
    app = FastAPI(
        title="attnrec",
        version=__version__,
        description="Recommendations, similar items and explanations from attnrec models. "
                    "Errors are JSON: `{\"error\": {status, code, message, details}}`.",
        lifespan=lifespan,
        responses={400: {"model": ErrorResponse}, 404: {"model": ErrorResponse}, 422: {"model": ErrorResponse},
                   503: {"model": ErrorResponse}},
    )
    app.state.serving = state
    app.state.entries = state.models  # the table, for inspection (tests read the batchers' counts)
    app.state.config = state.config
    install_error_handling(app, state.config.max_body_bytes, state.config.body_timeout_s)
    app.include_router(router)
    app.openapi_schema = document_limits(app.openapi(), state.config)  # FastAPI serves this cached document
    return app


__all__ = ["ServingConfig", "create_app"]
