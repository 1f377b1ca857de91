"""The operator's endpoints: ``GET /metrics`` and ``POST /v1/admin/reload``.

``/metrics`` needs no key unless the server protects it (``protect_metrics``); the admin endpoints
need an API key, and without configured keys they are refused (403) unless the operator allowed
unauthenticated admin (see :mod:`~attnrec.serving.auth`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from attnrec.serving.auth import admin_allowed
from attnrec.serving.lifecycle import ServingState, serving_state
from attnrec.serving.metrics import CONTENT_TYPE
from attnrec.serving.reload import reload_model
from attnrec.serving.schemas import ErrorResponse, ModelInfo

router = APIRouter()
State = Annotated[ServingState, Depends(serving_state)]


class ReloadRequest(BaseModel):
    """Which model to replace, and the directory of its new version."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"model": "sas", "path": "runs/sasrec-ml1m-v2"}, {"model": "sas"}]})

    model: str = Field(description="Name of the served model to replace (GET /v1/models).")
    path: str | None = Field(None, min_length=1, max_length=4096,
                             description="Model directory on the server; default: the one it was loaded from.")


class ReloadResponse(BaseModel):
    name: str
    load_seconds: float = Field(description="Time to load, switch backend and warm up the new version.")
    info: ModelInfo


@router.get("/metrics", tags=["status"], response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
async def metrics(state: State) -> Response:
    """Request counts and latency by endpoint, micro-batch sizes, model load times and reloads."""
    return Response(state.metrics.text(), media_type=CONTENT_TYPE)


@router.post("/v1/admin/reload", response_model=ReloadResponse, tags=["admin"],
             dependencies=[Depends(admin_allowed)],
             responses={403: {"model": ErrorResponse, "description": "admin endpoints are disabled (no API keys)"},
                        409: {"model": ErrorResponse, "description": "the model is still loading or has no directory"}})
async def reload(req: ReloadRequest, state: State) -> Response:
    """Replace a served model by a new directory with no failed requests. If the new version fails to
    load (422 `reload_failed`), the old one keeps serving."""
    e = await reload_model(state, req.model, req.path)
    assert e.loaded is not None  # reload_model succeeded
    body = ReloadResponse(name=e.name, load_seconds=e.loaded.load_seconds, info=e.info())
    return Response(body.model_dump_json(), media_type="application/json")


__all__ = ["ReloadRequest", "ReloadResponse", "router"]
