"""Events in and users out: ``POST /v1/events`` and ``DELETE /v1/users/{user}``.

A server started with a history store (``attnrec serve --store events.db``, or
``ServingConfig(store=...)``) takes the events of its users in batches and answers every later
request from the training history plus those events (:mod:`attnrec.recommend.live`). An event may
carry a value of each declared signal (:mod:`attnrec.data.signals`: the served models declare theirs)
as a top-level field, e.g. ``"device": "phone"``, checked by the signal's kind. Each event is
checked on its own: a bad one is reported by its index and the others are stored (one transaction,
durable before the answer: see :mod:`attnrec.store`). Events for items the model does not know are
stored for the next retrain and reported as ``ignored`` (not scored). Both routes need an API key
when the server has keys; ``DELETE /v1/users/{user}`` is an admin route (a privacy request: it
deletes the user's stored events and stops using its training history until the next retrain).
An app without a store does not serve them (404, and its API page does not list them).
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, ValidationError, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnrec.data.schema import DataError, IdMap
from attnrec.data.signals import Signal, by_key, declared
from attnrec.recommend import Recommender
from attnrec.serving.ann import ApproximateRecommender
from attnrec.serving.api_errors import ApiError, error_json
from attnrec.serving.auth import admin_allowed
from attnrec.serving.bodies import JsonRoute
from attnrec.serving.lifecycle import ServingState, serving_state
from attnrec.serving.routes import COMMON_RESPONSES
from attnrec.serving.schemas import MAX_ID_CHARS, NO_CONTROL, ErrorResponse, Id, Rating, Seconds, Text
from attnrec.store import Event, HistoryStore, StoreUnavailable

MAX_EVENTS = 10_000  # events one request may send (the body size limit usually binds first)
router = APIRouter(route_class=JsonRoute, responses=COMMON_RESPONSES)
State = Annotated[ServingState, Depends(serving_state)]
NO_STORE: dict[int | str, dict[str, Any]] = {
    501: {"model": ErrorResponse, "description": "the server keeps no events (start it with --store)"}
}
UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorResponse, "description": "the event store cannot be reached"}
}


def _as_str(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("an ID must be a string or an integer, not a boolean")
    return str(v) if isinstance(v, int) else v


class EventIn(BaseModel):
    """One event: `user` did something with `item` (at `timestamp`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    user: Id = Field(description="External user ID (a new user is fine).")
    item: Id = Field(description="External item ID; an item the model does not know is stored, not scored.")
    timestamp: Seconds | None = Field(
        None, description="When it happened (unix seconds); default: when the server receives it."
    )
    event: Text | None = Field(
        None,
        min_length=1,
        description="Its event type (e.g. `view`, `cart`, `buy`), for models trained with event types; a "
        "type the model never saw is stored and scored as the item without its type.",
    )
    rating: Rating | None = Field(None, description="Its rating (>= 0), for models trained with ratings.")

    _ids = field_validator("user", "item", mode="before")(_as_str)
    _ts = field_validator("timestamp", mode="before")(
        lambda v: int(v) if type(v) is float and v.is_integer() else v
    )


def _signal_field(signal: Signal) -> dict[str, Any]:
    """The JSON schema of one event's value of a declared signal."""
    if signal.kind == "categorical":
        kind: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS}
    else:
        kind = {"type": "number"} | ({} if signal.minimum is None else {"minimum": signal.minimum})
    return {"anyOf": [kind, {"type": "null"}], "description": signal.summary}


class _EventSchema:
    """The schema of an event object, made when the API page is: :class:`EventIn`'s fields and a field
    for each signal declared by then (the models loaded declare theirs)."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        schema = EventIn.model_json_schema()
        schema["properties"] |= {s.batch_key: _signal_field(s) for s in declared()}
        return schema


EventObject = Annotated[dict[str, Any], _EventSchema]


def _signal_values(obj: object) -> tuple[object, dict[str, Any]]:
    """``obj`` without its declared signals' fields, and their values by signal name (``null``: not sent),
    each checked by its signal's kind as a recommend request's are (a one-line ``ValueError``)."""
    if not isinstance(obj, dict):
        return obj, {}
    fields = {k: s for k in obj if (s := by_key(str(k))) is not None and not s.builtin}
    values = {s.name: s.request_values([obj[k]])[0] for k, s in fields.items() if obj[k] is not None}
    return {k: v for k, v in obj.items() if k not in fields}, values


class EventsRequest(BaseModel):
    """A batch of events, oldest first within a user (order across users does not matter)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {
                    "events": [
                        {"user": "42", "item": "1193", "timestamp": 1767225600, "event": "view"},
                        {"user": "42", "item": "661", "event": "cart"},
                    ]
                }
            ]
        },
    )

    model: Text | None = Field(
        None, description="The model whose catalog `ignored` refers to (GET /v1/models); default: the first."
    )
    events: list[EventObject] = Field(
        max_length=MAX_EVENTS, description="The events, each checked on its own."
    )


class EventError(BaseModel):
    index: int = Field(description="Position of the event in `events`.")
    message: str


class IgnoredEvent(BaseModel):
    index: int = Field(description="Position of the event in `events`.")
    item: str
    reason: str


class EventsResponse(BaseModel):
    accepted: int = Field(description="Events stored (durably, before this answer).")
    errors: list[EventError] = Field(description="Events refused, with why; the others were stored.")
    ignored: list[IgnoredEvent] = Field(
        description="Stored events the model does not score (unknown items): kept for the next retrain."
    )
    model: str | None = Field(description="The model `ignored` refers to (null while none is loaded).")


class ForgetResponse(BaseModel):
    user: str
    deleted_events: int = Field(description="Stored events of the user that were deleted.")
    note: str


def _store(state: ServingState) -> HistoryStore:
    store = state.config.store
    if store is None:
        raise ApiError(
            501, "no_store", "this server keeps no events: start it with --store FILE (or a redis:// URL)"
        )
    return store


def _catalog(state: ServingState, name: str | None) -> tuple[str | None, IdMap | None]:
    """The model ``ignored`` is checked against and its items (none while no such model is ready)."""
    if name is not None:
        e = state.models.get(name)
        if e is None:
            raise ApiError(
                404, "unknown_model", f"unknown model {name!r}; loaded models: {', '.join(state.models)}"
            )
    else:
        e = next((x for x in state.models.values() if "recommend" in x.capabilities), None)
    obj = None if e is None else e.obj
    rec = obj.rec if isinstance(obj, ApproximateRecommender) else obj
    if e is None or not isinstance(rec, Recommender) or rec.items_ is None:
        return None, None  # nothing loaded to check against yet: the events are stored all the same
    return e.name, rec.items_


def _message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return f"{where}: {first['msg']}" if where else str(first["msg"])


def check_events(raw: list[dict[str, Any]], now: int) -> tuple[list[tuple[int, Event]], list[EventError]]:
    """The valid events of ``raw`` with their indices (no timestamp: ``now``), and the errors of the
    others."""
    good: list[tuple[int, Event]] = []
    errors: list[EventError] = []
    for i, obj in enumerate(raw):
        try:
            fields, signals = _signal_values(obj)
            e = EventIn.model_validate(fields)
            when = now if e.timestamp is None else e.timestamp
            good.append((i, Event(e.user, e.item, when, e.event, e.rating, signals)))
        except ValidationError as exc:
            errors.append(EventError(index=i, message=_message(exc)))
        except (DataError, ValueError) as exc:  # a signal's value of the wrong kind
            errors.append(EventError(index=i, message=str(exc)))
    return good, errors


@router.post(
    "/v1/events", response_model=EventsResponse, tags=["events"], responses={**NO_STORE, **UNAVAILABLE}
)
async def post_events(req: EventsRequest, state: State) -> Response:
    """Store a batch of events; later answers for these users read them (no retrain needed).

    Each event is checked on its own: bad ones are listed in `errors` (by index) and the rest are
    stored, durably, before the answer. Events for items the model does not know are stored for the
    next retrain and listed in `ignored`."""
    store = _store(state)
    name, items = _catalog(state, req.model)
    good, errors = check_events(req.events, int(time.time()))
    accepted = await asyncio.to_thread(store.append, [e for _, e in good]) if good else 0
    ignored = (
        []
        if items is None
        else [
            IgnoredEvent(index=i, item=e.item, reason="unknown item: stored for the next retrain, not scored")
            for i, e in good
            if e.item not in items
        ]
    )
    body = EventsResponse(accepted=accepted, errors=errors, ignored=ignored, model=name)
    return Response(body.model_dump_json(), media_type="application/json")


def not_a_user_page(user: str) -> None:
    """``DELETE /v1/users/{user}/history`` is the history page's path with a method it does not allow: 405
    (``{user:path}`` takes IDs with ``/`` as the page does, so it would otherwise match here)."""
    if user.endswith("/history"):
        raise StarletteHTTPException(405, "Method Not Allowed", headers={"Allow": "GET"})


@router.delete(
    "/v1/users/{user:path}",
    response_model=ForgetResponse,
    tags=["admin"],
    dependencies=[Depends(not_a_user_page), Depends(admin_allowed)],
    responses={**NO_STORE, **UNAVAILABLE, 403: {"model": ErrorResponse, "description": "admin is disabled"}},
)
async def forget_user(
    user: Annotated[str, Path(max_length=MAX_ID_CHARS, pattern=NO_CONTROL, description="External user ID.")],
    state: State,
) -> ForgetResponse:
    """Forget a user (a privacy request): delete its stored events and stop using the history the
    model was trained with. An admin route. The model's weights keep what they learned from the
    user until the next retrain, which drops the user's old events (see the store's `forgotten`)."""
    store = _store(state)
    deleted = await asyncio.to_thread(store.forget, user)
    return ForgetResponse(
        user=user,
        deleted_events=deleted,
        note="stored events deleted; the training history is no longer used; retrain to remove the user "
        "from the model's weights",
    )


async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    return error_json(503, "store_unavailable", f"the event store cannot be reached: {exc}")


def install_store_errors(app: FastAPI) -> None:
    """Answer a store that cannot be reached (on any route that reads or writes it) with 503."""
    app.add_exception_handler(StoreUnavailable, _unavailable)


__all__ = [
    "MAX_EVENTS",
    "EventIn",
    "EventsRequest",
    "EventsResponse",
    "check_events",
    "install_store_errors",
    "router",
]
