"""The endpoints: recommend, similar items, explain, and the status pages.

Each endpoint gets its app's :class:`~attnrec.serving.lifecycle.ServingState` as a dependency,
picks a model that can answer, checks the server's limits and answers in the schemas of
:mod:`attnrec.serving.schemas`; every failure is an :class:`~attnrec.serving.api_errors.ApiError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from attnrec.data.schema import DataError
from attnrec.recommend import Recommendation
from attnrec.recommend.structure import one_line
from attnrec.serving.api_errors import ApiError
from attnrec.serving.auth import ADMIN_PREFIX, OPEN_PATHS, has_key
from attnrec.serving.bodies import JsonRoute
from attnrec.serving.explanations import explaining, explanation
from attnrec.serving.lifecycle import ServingState, serving_state
from attnrec.serving.model_table import Explains, FindsSimilar
from attnrec.serving.schemas import (
    EVENT_FIELDS,
    MAX_EXPLAINED,
    ErrorResponse,
    ExplainOptions,
    ExplainRequest,
    ExplainResponse,
    ModelsResponse,
    RecommendedItem,
    RecommendRequest,
    RecommendResponse,
    ScoredItem,
    SimilarItemsRequest,
    SimilarItemsResponse,
    Status,
)
from attnrec.serving.serving_config import ServingConfig

Responses = dict[int | str, dict[str, Any]]  # a route's answers besides its own, for the OpenAPI document
# Every route parses JSON strictly (422 for any malformed body) and may answer with these errors.
COMMON_RESPONSES: Responses = {
    405: {"model": ErrorResponse, "description": "wrong HTTP method"},
    408: {"model": ErrorResponse, "description": "the request body did not arrive in time"},
    413: {"model": ErrorResponse, "description": "the request body is over the server's limit"},
    422: {"model": ErrorResponse, "description": "malformed JSON, wrong types, bad IDs, limits exceeded"},
    500: {"model": ErrorResponse, "description": "a failure of the service itself"},
}
# ... and these routes' own.
CANNOT_EXPLAIN: Responses = {
    501: {"model": ErrorResponse, "description": "`explain`: the model cannot explain with this method"}
}
NO_EXPLAINER: Responses = {501: {"model": ErrorResponse, "description": "no explanation model is loaded"}}
NOT_READY: Responses = {
    503: {"model": Status, "description": "a model is loading or failed, or the server is shutting down"}
}
router = APIRouter(route_class=JsonRoute, responses=COMMON_RESPONSES)
State = Annotated[ServingState, Depends(serving_state)]
R = TypeVar("R")


def timed(state: ServingState, model: str, endpoint: str, fn: Callable[[], R]) -> Callable[[], R]:
    """``fn`` recording its own duration (on the thread that runs it) as ``model``'s inference time."""

    def run() -> R:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            state.metrics.inferred(model, endpoint, time.perf_counter() - t0)

    return run


def _json(model: BaseModel) -> Response:
    """A response from a pydantic model, serialised once (FastAPI would validate it again)."""
    return Response(model.model_dump_json(), media_type="application/json")


def _items(rec: Recommendation) -> list[ScoredItem]:
    titles = rec.titles or [None] * len(rec.items)
    return [
        ScoredItem(item=i, score=s, title=t) for i, s, t in zip(rec.items, rec.scores, titles, strict=True)
    ]


def _recommended(rec: Recommendation, top: int = 0) -> list[RecommendedItem]:
    """The items of ``rec`` with their explanations (``top`` history items each), when it has them."""
    titles = rec.titles or [None] * len(rec.items)
    why = rec.explanations or [None] * len(rec.items)
    return [
        RecommendedItem(item=i, score=s, title=t, explanation=explanation(x, top))
        for i, s, t, x in zip(rec.items, rec.scores, titles, why, strict=True)
    ]


def _jsonable(x: object) -> object:
    """An explanation as JSON: dataclasses and pydantic models as dicts, text as ``{"text": ...}``."""
    if is_dataclass(x) and not isinstance(x, type):
        return asdict(x)
    if isinstance(x, BaseModel):
        return x.model_dump()
    if isinstance(x, str):
        return {"text": x}
    return x


def check_k(k: int, cfg: ServingConfig) -> None:
    """422 ``limit_exceeded`` when ``k`` is over the server's ``max_k``."""
    if k > cfg.max_k:
        raise ApiError(
            422,
            "limit_exceeded",
            f"k={k} exceeds this server's max_k={cfg.max_k}",
            [{"loc": "k", "message": f"must be at most {cfg.max_k}"}],
        )


def check_list(key: str, n: int, limit: int) -> None:
    """422 ``limit_exceeded`` when the list ``key`` has more than ``limit`` (``n``) items."""
    if n > limit:
        raise ApiError(
            422,
            "limit_exceeded",
            f"{key} has {n} items; this server accepts at most {limit}",
            [{"loc": key, "message": f"at most {limit} items"}],
        )


def _check_lists(req: RecommendRequest, cfg: ServingConfig) -> None:
    lists = (
        ("history", req.history, cfg.max_history),
        ("include", req.include, cfg.max_list),
        ("exclude", req.exclude, cfg.max_list),
    )
    for key, values, limit in lists:
        check_list(key, len(values or ()), limit)


def document_limits(spec: dict[str, Any], cfg: ServingConfig) -> dict[str, Any]:
    """``spec`` (the app's OpenAPI document) stating this server's limits on ``k`` and the ID lists."""
    bodies = spec.get("components", {}).get("schemas", {})
    limits = {
        "RecommendRequest": {
            "k": ("maximum", cfg.max_k),
            "history": ("maxItems", cfg.max_history),
            **{f: ("maxItems", cfg.max_history) for f in EVENT_FIELDS},
            "include": ("maxItems", cfg.max_list),
            "exclude": ("maxItems", cfg.max_list),
        },
        "SimilarItemsRequest": {"k": ("maximum", cfg.max_k)},
        "ExplainRecRequest": {
            "k": ("maximum", cfg.max_k),
            "history": ("maxItems", cfg.max_history),
            **{f: ("maxItems", cfg.max_history) for f in EVENT_FIELDS},
        },
    }
    for body, fields in limits.items():
        for name, (key, value) in fields.items():
            prop = bodies[body]["properties"][name]
            for branch in prop.get("anyOf", [prop]):  # Optional lists: [list, null]
                if branch.get("type") in ("integer", "array"):
                    branch[key] = value
    return spec


SECURITY_SCHEMES = {
    "ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "An API key."},
    "Bearer": {"type": "http", "scheme": "bearer", "description": "An API key as a bearer token."},
}
KEY: list[dict[str, list[str]]] = [{"ApiKey": []}, {"Bearer": []}]


def document_security(spec: dict[str, Any], cfg: ServingConfig) -> dict[str, Any]:
    """``spec`` declaring the API-key schemes (``/docs`` gets its Authorize button, generated clients send
    the key) and, per operation, whether it needs a key on this server: admin operations always (an
    admin key), the public API when client keys are set (else a key is optional: ``{}``), the health
    probes never, ``/metrics`` when keys are set and it is protected."""
    spec.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    keys = bool(cfg.api_keys or cfg.admin_keys)
    for path, operations in spec.get("paths", {}).items():
        if path.startswith(ADMIN_PREFIX):
            security = KEY
        elif path in OPEN_PATHS or (path == "/metrics" and not (keys and cfg.protect_metrics)):
            security = []
        else:
            security = KEY if cfg.api_keys else [*KEY, {}]
        for op in operations.values():
            op["security"] = security
    return spec


@router.post("/v1/recommend", response_model=RecommendResponse, tags=["recommend"], responses=CANNOT_EXPLAIN)
async def recommend(req: RecommendRequest, state: State) -> Response:
    """Top-k items for a user or a history. Unknown history items are reported in `unknown_items`;
    an unknown user is answered from the history or by popularity, and `fallback` says so.

    `explain` (off by default) adds to each of the first 20 items an `explanation`: the history
    items that raised its score and a short `reason`. Bounded cost: an explained request skips
    micro-batching and costs two batched forward passes (greedy, the default): one copy of the
    history per history item the model reads, then that again per explained item (occlusion: only
    the first); 501 when the model cannot explain with the method."""
    e = state.pick(req.model, "recommend")
    check_k(req.k, state.config)
    _check_lists(req, state.config)
    kwargs = req.model_dump(exclude={"model", "explain"}) | req.event_inputs()
    top = 0  # history items listed per explained item (none without explain)
    try:  # per-event fields the model cannot use (an unknown event name, a missing column): 422
        if req.explain is False:  # the common case: micro-batched with other requests
            assert e.batcher is not None  # every model has one while the app runs
            rec = await e.batcher.submit(kwargs)
        else:
            opts = (
                ExplainOptions.model_validate({}) if req.explain is True else req.explain
            )  # true: the defaults
            model, top, verb = (
                explaining(e, opts.method),
                opts.top,
                state.config.reason_verb,
            )  # 501 before any work
            explained = timed(
                state,
                e.name,
                "/v1/recommend",
                lambda: model.recommend(
                    **kwargs,
                    explain=opts.method,
                    explain_k=MAX_EXPLAINED,
                    reason_verb=verb,
                    event_verbs=state.config.event_verbs,
                ),
            )
            rec = await state.on_worker(explained)
    except ValueError as exc:
        raise ApiError(422, "invalid_request", one_line(exc)) from None
    return _json(
        RecommendResponse(
            model=e.name,
            user=rec.user,
            items=_recommended(rec, top),
            unknown_items=rec.unknown_items,
            fallback=rec.fallback,
            method=rec.method,
            ignored_inputs=rec.ignored_inputs,
        )
    )


@router.post("/v1/similar-items", response_model=SimilarItemsResponse, tags=["recommend"])
async def similar_items(req: SimilarItemsRequest, state: State) -> Response:
    """Items most similar to `item`: cosine of the model's item vectors, else of co-occurrence."""
    e = state.pick(req.model, "similar-items")
    check_k(req.k, state.config)
    model = e.obj
    assert isinstance(model, FindsSimilar)  # pick() checked the capability
    try:
        rec = await state.on_worker(
            timed(state, e.name, "/v1/similar-items", lambda: model.similar_items(req.item, req.k))
        )
    except KeyError as exc:
        raise ApiError(
            404,
            "unknown_item",
            f"unknown item {req.item!r} in model {e.name!r}",
            [{"loc": "item", "message": str(exc.args[0]) if exc.args else "unknown"}],
        ) from None
    except ValueError as exc:
        raise ApiError(422, "invalid_request", one_line(exc)) from None
    return _json(SimilarItemsResponse(model=e.name, item=req.item, items=_items(rec), method=rec.method))


@router.post(
    "/v1/explain",
    response_model=ExplainResponse,
    tags=["explain"],
    responses=NO_EXPLAINER,
)
async def explain(req: ExplainRequest, state: State) -> ExplainResponse:
    """Why `user` might like `item`, from an explanation model (PETER)."""
    e = state.pick(req.model, "explain")
    model = e.obj
    assert isinstance(model, Explains)  # pick() checked the capability
    try:
        out = await state.on_worker(
            timed(
                state, e.name, "/v1/explain", lambda: model.explain(req.user, req.item, feature=req.feature)
            )
        )
    except KeyError as exc:
        raise ApiError(404, "unknown_id", str(exc.args[0]) if exc.args else "unknown user or item") from None
    except ValueError as exc:  # DataError included: unknown IDs are 404, anything else 422
        if isinstance(exc, DataError) and str(exc).startswith("unknown"):
            raise ApiError(404, "unknown_id", str(exc)) from None
        raise ApiError(422, "invalid_request", str(exc)) from None
    return ExplainResponse(model=e.name, user=req.user, item=req.item, explanation=_jsonable(out))


@router.get("/v1/models", response_model=ModelsResponse, tags=["status"])
async def list_loaded(state: State) -> ModelsResponse:
    """What is loaded: model, dataset, and the protocols and metrics it was evaluated with."""
    return ModelsResponse(models=[e.info() for e in state.models.values()], limits=state.config.limits())


@router.get("/healthz", response_model=Status, tags=["status"])
async def healthz() -> Status:
    """The process is up (it may still be loading models)."""
    return Status(status="ok")


def draining(request: Request) -> bool:
    """Whether the server serving ``request`` is shutting down (set by ``attnrec serve`` on SIGTERM)."""
    return bool(getattr(request.app.state, "draining", False))


def readiness(request: Request, state: ServingState) -> tuple[int, Status]:
    """``/readyz``'s status code and answer: 503 while shutting down or while a model is not ready.

    The per-model states are listed to a caller with a key, or to anyone when the server has no
    key or does not protect its status (``protect_metrics`` off); else only the overall status."""
    cfg = state.config
    states = {e.name: e.status for e in state.models.values()}
    shown = (
        states if has_key(request) or not (cfg.api_keys or cfg.admin_keys) or not cfg.protect_metrics else {}
    )
    reloading = state.reloading.locked()
    if draining(request):
        return 503, Status(status="shutting down", models=shown, reloading=reloading)
    if all(s == "ready" for s in states.values()):
        return 200, Status(status="ready", models=shown, reloading=reloading)
    return 503, Status(status="not ready", models=shown, reloading=reloading)


@router.get("/readyz", response_model=Status, tags=["status"], responses=NOT_READY)
async def readyz(request: Request, state: State) -> Status | JSONResponse:
    """Every model is loaded and warmed up, and the server is not shutting down; `reloading` is true while
    a hot reload (or an item addition) runs, the previous version serving meanwhile. Model names
    and states are listed to callers with a key (or to anyone when the server does not protect its
    status)."""
    code, status = readiness(request, state)
    return status if code == 200 else JSONResponse(status.model_dump(), status_code=code)


@router.head("/healthz", tags=["status"], response_class=Response, responses={200: {"description": "up"}})
async def healthz_head() -> Response:
    """`GET /healthz` without a body (for load balancers that probe with HEAD)."""
    return Response(status_code=200)


@router.head(
    "/readyz",
    tags=["status"],
    response_class=Response,
    responses={200: {"description": "ready"}, 503: {"description": "a model is loading or failed"}},
)
async def readyz_head(request: Request, state: State) -> Response:
    """`GET /readyz` without a body: 200 when every model is ready, else 503."""
    return Response(status_code=readiness(request, state)[0])


__all__ = [
    "COMMON_RESPONSES",
    "check_k",
    "check_list",
    "document_limits",
    "document_security",
    "readiness",
    "router",
    "timed",
]
