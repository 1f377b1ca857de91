"""The operator's endpoints: ``GET /metrics``, ``POST /v1/admin/reload`` and ``POST /v1/admin/items``.

``/metrics`` needs a key when keys are configured unless ``protect_metrics`` is off; the admin
endpoints need an admin key, and without configured admin keys they are refused (403) unless the
operator allowed unauthenticated admin (see :mod:`~attnrec.serving.auth`). A reload loads only from
inside the configured models roots (``models_roots``; by default the folders holding the served
model directories): any other path is refused with 403 ``path_not_allowed`` before it is touched.

``/v1/admin/items`` adds cold-start items with their features to a served recommender trained with
item features (:meth:`~attnrec.recommend.Recommender.add_items`), copy-on-write: a copy of the model
takes the items off the event loop and is swapped in with one assignment, like a reload, so requests
in flight finish on the old model. The items live in memory only: a reload from the model's
directory drops them (save the model with them to keep them).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import os
from pathlib import Path
from typing import Annotated

import pandas as pd
from fastapi import APIRouter, Depends
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from attnrec.recommend import Recommender
from attnrec.serving.api_errors import ApiError
from attnrec.serving.auth import ADMIN_PREFIX, admin_allowed
from attnrec.serving.bodies import JsonRoute
from attnrec.serving.lifecycle import ServingState, serving_state
from attnrec.serving.prometheus import CONTENT_TYPE
from attnrec.serving.reload import reload_model
from attnrec.serving.routes import COMMON_RESPONSES
from attnrec.serving.schemas import NO_CONTROL, ErrorResponse, ModelInfo

ADMIN_RESPONSES: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorResponse, "description": "no accepted API key"},
    403: {"model": ErrorResponse, "description": "a client key, not an admin key, or admin is disabled"},
}
# Every admin endpoint: tagged admin, behind an admin key, with the admin answers besides the common ones.
router = APIRouter(
    route_class=JsonRoute,
    tags=["admin"],
    dependencies=[Depends(admin_allowed)],
    responses={**COMMON_RESPONSES, **ADMIN_RESPONSES},
)
status_router = APIRouter()
State = Annotated[ServingState, Depends(serving_state)]


class ReloadRequest(BaseModel):
    """Which model to replace, and the directory of its new version."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"model": "sas", "path": "runs/sasrec-ml1m-v2"}, {"model": "sas"}]},
    )

    model: str = Field(description="Name of the served model to replace (GET /v1/models).")
    path: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        pattern=NO_CONTROL,
        description="Model directory on the server; default: the one it was loaded from.",
    )


class ReloadResponse(BaseModel):
    name: str
    load_seconds: float = Field(description="Time to load, switch backend and warm up the new version.")
    info: ModelInfo


@status_router.get(
    "/metrics",
    tags=["status"],
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
async def metrics(state: State) -> Response:
    """Request counts, latency and requests in flight by endpoint, inference latency and micro-batch sizes
    by model, model load times, reload counts and last outcome, and the process's CPU, memory and
    file descriptors."""
    return Response(state.metrics.text(), media_type=CONTENT_TYPE)


def check_reload_path(path: str, roots: tuple[Path, ...]) -> Path:
    """``path`` resolved (symbolic links followed) when it lies inside one of ``roots``, else 403."""
    try:
        resolved = Path(os.path.realpath(path))
    except (OSError, ValueError) as e:
        raise ApiError(
            422, "invalid_request", f"reload path {path!r}: {e}", [{"loc": "path", "message": str(e)}]
        ) from None
    if any(resolved.is_relative_to(root) for root in roots):
        return resolved
    allowed = ", ".join(str(r) for r in roots) or "none (the served models were passed in as objects)"
    raise ApiError(
        403,
        "path_not_allowed",
        f"reload path {path!r} is outside the models roots; allowed: {allowed} (see --models-root)",
        [{"loc": "path", "message": "outside the models roots"}],
    )


@router.post(
    ADMIN_PREFIX + "reload",
    response_model=ReloadResponse,
    responses={
        403: {
            "model": ErrorResponse,
            "description": "not an admin key, admin disabled, or a path outside the models roots",
        },
        409: {"model": ErrorResponse, "description": "the model is still loading or has no directory"},
        422: {
            "model": ErrorResponse,
            "description": "invalid body, or the new version did not load (`reload_failed`)",
        },
    },
)
async def reload(req: ReloadRequest, state: State) -> Response:
    """Replace a served model by a new directory with no failed requests. If the new version fails to
    load (422 `reload_failed`), the old one keeps serving. `path` must lie inside the server's
    models roots (403 `path_not_allowed` otherwise)."""
    roots = state.config.models_roots or ()
    path = None if req.path is None else check_reload_path(req.path, roots)
    e = await reload_model(state, req.model, path)
    assert e.loaded is not None  # reload_model succeeded
    body = ReloadResponse(name=e.name, load_seconds=e.loaded.load_seconds, info=e.info())
    return Response(body.model_dump_json(), media_type="application/json")


FeatureValue = str | float | list[str] | None


class AddItemsRequest(BaseModel):
    """New items of a served model, each with its ID and feature values."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"model": "sas", "items": [{"item_id": "sku9", "category": "shoes", "tags": ["running"]}]}
            ]
        },
    )

    model: str = Field(
        description="Name of the served model (GET /v1/models); it must be trained with item features."
    )
    items: list[dict[str, FeatureValue]] = Field(
        min_length=1,
        max_length=10_000,
        description="One object per new item: its ID under `id_column` and values of the model's feature "
        "fields (lists for multi-value fields); values the model never saw count as missing.",
    )
    id_column: str = Field(
        "item_id", min_length=1, max_length=200, description="The key holding each item's ID."
    )


class AddItemsResponse(BaseModel):
    name: str
    added: list[str] = Field(description="The new item IDs, recommendable at once.")
    n_items: int = Field(description="Items in the catalog now.")


async def add_served_items(state: ServingState, req: AddItemsRequest) -> AddItemsResponse:
    """Add ``req.items`` to model ``req.model`` (see the module docstring); 404/409/422 :class:`ApiError`."""
    e = state.models.get(req.model)
    if e is None:
        raise ApiError(
            404, "unknown_model", f"unknown model {req.model!r}; loaded models: {', '.join(state.models)}"
        )
    async with state.reloading:  # one change at a time, reloads included
        loaded = e.loaded
        if e.status != "ready" or loaded is None:
            raise ApiError(
                409, "model_loading", f"model {req.model!r} is {e.status}; add items once it is ready"
            )
        old = loaded.obj
        if not isinstance(old, Recommender) or loaded.backend != "torch":
            raise ApiError(
                409,
                "not_extensible",
                f"model {req.model!r} cannot take new items (a torch recommender "
                "trained with item features can)",
            )

        def grow() -> tuple[Recommender, list[str]]:
            new = copy.deepcopy(old)  # requests in flight keep reading the old model
            return new, new.add_items(pd.DataFrame(req.items), req.id_column)

        try:
            new, added = await asyncio.get_running_loop().run_in_executor(None, grow)
        except (ValueError, TypeError, KeyError) as exc:  # ConfigError and DataError included
            raise ApiError(422, "items_rejected", f"items not added to model {req.model!r}: {exc}") from None
        e.loaded = dataclasses.replace(loaded, obj=new)  # the swap: one assignment
        if e.given is old:  # a model passed in as an object is re-prepared from it by a reload
            e.given = new
    return AddItemsResponse(name=e.name, added=added, n_items=len(new.items_ or ()))


@router.post(
    ADMIN_PREFIX + "items",
    response_model=AddItemsResponse,
    responses={
        409: {"model": ErrorResponse, "description": "the model is loading or cannot take items"},
        422: {"model": ErrorResponse, "description": "the items were refused (e.g. IDs already known)"},
    },
)
async def add_items(req: AddItemsRequest, state: State) -> Response:
    """Add cold-start items with their features to a model trained with item features; they are
    recommendable at once, without retraining (in memory: a reload from its directory drops them)."""
    body = await add_served_items(state, req)
    return Response(body.model_dump_json(), media_type="application/json")


__all__ = [
    "AddItemsRequest",
    "AddItemsResponse",
    "ReloadRequest",
    "ReloadResponse",
    "add_served_items",
    "check_reload_path",
    "router",
    "status_router",
]
