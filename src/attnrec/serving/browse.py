"""Browsing a served model: search its items, read a user's stored history, and recommendations with
the history items behind them (the endpoints the web page needs, public like the others).

* ``GET /v1/items``: items whose ID is the query, then items whose title contains it (case-insensitive),
  most popular first; without a query, the most popular items.
* ``GET /v1/users/{user}/history``: a user's stored history with titles, most recent last: the training
  history plus the events stored since when the server has a store (:mod:`attnrec.recommend.live`),
  each event with its values of the declared signals the model reads.
* ``POST /v1/explain-rec``: ``/v1/recommend`` plus, per recommended item, the history items that
  drove it and a reason (:func:`attnrec.recommend.explain_rec.explain_recommendation`): ``method``
  ``greedy`` (default), ``occlusion`` or ``integrated_gradients``, per item, or ``attention`` /
  ``rollout``, shared by every item (``shared: true``); ``item`` explains one item wherever it ranks.

Search tables are built once per served object (on its first search, on the model thread) and
dropped with it, so a reloaded model gets a fresh one.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from attnrec.data.schema import TIMESTAMP, IdMap
from attnrec.evaluation.attribution import SHARED_METHODS, AttributionError
from attnrec.recommend import Explainer, Recommendation, Recommender
from attnrec.recommend.event_requests import signals_read
from attnrec.recommend.explain_rec import RecExplanation, explain_recommendation
from attnrec.recommend.reasons import ItemExplanation, signal_values
from attnrec.recommend.structure import one_line
from attnrec.serving.ann import ApproximateRecommender
from attnrec.serving.api_errors import ApiError
from attnrec.serving.bodies import JsonRoute
from attnrec.serving.explanations import because, explaining
from attnrec.serving.lifecycle import ServingState, serving_state
from attnrec.serving.model_table import ServedModel
from attnrec.serving.routes import COMMON_RESPONSES, check_k, check_list, timed
from attnrec.serving.schemas import (
    MAX_HISTORY_ROWS,
    MAX_ID_CHARS,
    MAX_SEARCH,
    NO_CONTROL,
    Attribution,
    CatalogItem,
    ErrorResponse,
    ExplainedItem,
    ExplainRecRequest,
    ExplainRecResponse,
    HistoryItem,
    HistoryResponse,
    ItemsResponse,
)

router = APIRouter(route_class=JsonRoute, responses=COMMON_RESPONSES)
State = Annotated[ServingState, Depends(serving_state)]
_TEXT = {"type": "string", "maxLength": MAX_ID_CHARS, "pattern": NO_CONTROL}
QueryText = Annotated[str, Field(max_length=MAX_ID_CHARS, pattern=NO_CONTROL)]
ModelName = Annotated[QueryText | None, WithJsonSchema(_TEXT)]  # absent, not null: a query has no null


class ItemsQuery(BaseModel):
    """The query of ``GET /v1/items``; unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")
    model: ModelName = Field(None, description="Loaded model name (GET /v1/models); default: the first one.")
    q: QueryText = Field("", description="An item ID, or text that titles contain (case-insensitive).")
    limit: int = Field(20, ge=1, le=MAX_SEARCH, description="Most items to return.")


class HistoryQuery(BaseModel):
    """The query of ``GET /v1/users/{user}/history``; unknown parameters are refused."""

    model_config = ConfigDict(extra="forbid")
    model: ModelName = Field(None, description="Loaded model name (GET /v1/models); default: the first one.")
    limit: int = Field(50, ge=1, le=MAX_HISTORY_ROWS, description="Most recent items to return.")


def single_values(request: Request) -> None:
    """Refuse a repeated query parameter (``?q=a&q=b``): which one was meant is ambiguous."""
    keys = [k for k, _ in request.query_params.multi_items()]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ApiError(
            422,
            "invalid_request",
            f"invalid request: query parameter {repeated[0]!r} is given more than once",
            [{"loc": f"query.{k}", "message": "given more than once"} for k in repeated],
        )


# -- the catalog of a served object --------------------------------------------------------------
@dataclass(frozen=True)
class Catalog:
    """A model's items as the search sees them: by popularity, with case-folded titles."""

    items: IdMap
    titles: list[str | None]  # by internal index - 1
    by_popularity: np.ndarray  # (I,) positions (internal index - 1), most popular first
    folded: list[tuple[int, str]]  # (position, case-folded title) of titled items, by popularity

    def entry(self, pos: int) -> CatalogItem:
        return CatalogItem(item=str(self.items.external[pos]), title=self.titles[pos])

    def search(self, q: str, limit: int) -> tuple[list[CatalogItem], bool]:
        """The item whose ID is ``q``, then items whose title contains ``q`` (case-insensitive); and
        whether more than ``limit`` match. An empty ``q`` lists the most popular items."""
        if not q:
            return [self.entry(int(p)) for p in self.by_popularity[:limit]], len(self.items) > limit
        index = self.items.get(q)
        exact = None if index is None else index - self.items.offset
        found = [] if exact is None else [exact]
        needle = q.casefold()
        for (
            pos,
            title,
        ) in self.folded:  # stops at limit + 1 matches: a common word does not scan a big catalog
            if len(found) > limit:
                break
            if needle in title and pos != exact:
                found.append(pos)
        return [self.entry(p) for p in found[:limit]], len(found) > limit


_catalogs: weakref.WeakKeyDictionary[object, Catalog] = weakref.WeakKeyDictionary()


def catalog_of(name: str, obj: object) -> Catalog:
    """The search table of the served ``obj`` (built on first use; call it on the model thread)."""
    cached = _catalogs.get(obj)
    if cached is not None:
        return cached
    holder = obj.rec if isinstance(obj, ApproximateRecommender) else obj
    if isinstance(holder, Recommender):
        titles, popularity = holder.titles_, holder.popularity_
    elif isinstance(holder, Explainer):
        titles, popularity = {}, None
    else:
        raise ApiError(400, "unsupported", f"model {name!r} has no item catalog to search")
    if holder.items_ is None:
        raise ApiError(400, "unsupported", f"model {name!r} has no item catalog to search")
    items = holder.items_
    names = [titles.get(i) for i in items.to_list()]
    order = np.arange(len(items))
    if popularity is not None and len(popularity) == len(items) + 1:  # row 0 is padding
        order = np.argsort(-np.asarray(popularity[1:], dtype=np.float64), kind="stable")
    folded = [(int(p), t.casefold()) for p in order if (t := names[p]) is not None]
    cat = Catalog(items, names, order, folded)
    _catalogs[obj] = cat
    return cat


def _pick_any(state: ServingState, name: str | None) -> ServedModel:
    """The model ``name`` whatever it serves (default: the first recommender), ready."""
    known = state.models.get(name) if name is not None else None
    capability = known.capabilities[0] if known is not None and known.capabilities else "recommend"
    return state.pick(name, capability)


@router.get(
    "/v1/items",
    response_model=ItemsResponse,
    tags=["browse"],
    dependencies=[Depends(single_values)],
    responses={400: {"model": ErrorResponse, "description": "the model has no item catalog"}},
)
async def search_items(query: Annotated[ItemsQuery, Query()], state: State) -> Response:
    """Search a model's items: the item whose ID is `q`, then items whose title contains `q`
    (case-insensitive), most popular first; without `q`, the most popular items."""
    e = _pick_any(state, query.model)
    obj = e.obj  # read once: a reload during the search does not change the catalog it reads

    def run() -> ItemsResponse:
        items, more = catalog_of(e.name, obj).search(query.q, query.limit)
        return ItemsResponse(model=e.name, query=query.q, items=items, more=more)

    return _json(await state.on_worker(run))


@router.get(
    "/v1/users/{user:path}/history",
    response_model=HistoryResponse,
    tags=["browse"],
    dependencies=[Depends(single_values)],
    responses={
        404: {"model": ErrorResponse, "description": "unknown model or user"},
        400: {"model": ErrorResponse, "description": "the model stores no histories"},
    },
)
async def user_history(
    user: Annotated[str, Path(max_length=MAX_ID_CHARS, pattern=NO_CONTROL, description="External user ID.")],
    query: Annotated[HistoryQuery, Query()],
    state: State,
) -> Response:
    """A known user's stored history with titles, most recent last (its last `limit` items), each event
    with its values of the declared signals the model reads."""
    e = state.pick(query.model, "recommend")
    obj = e.obj.rec if isinstance(e.obj, ApproximateRecommender) else e.obj
    if not isinstance(obj, Recommender) or obj.users_ is None or obj.histories_ is None or obj.items_ is None:
        raise ApiError(400, "unsupported", f"model {e.name!r} stores no user histories")
    rec = obj
    row = (await state.on_worker(lambda: rec.live_histories([user])))[
        user
    ]  # training history + stored events
    if row.who is not None and not len(row.items):
        raise ApiError(
            404,
            "unknown_user",
            f"{row.who} user {user!r} in model {e.name!r}: it has no stored history",
            [{"loc": "user", "message": f"{row.who} user"}],
        )
    hist = row.items
    shown = np.arange(len(hist))[-query.limit :]
    ids = obj.items_.to_external(hist[shown])
    read = {name: row.columns[name] for name in signals_read(obj.config) if name in row.columns}
    values = signal_values(read, obj.vocabularies_, shown)
    stamps = row.columns.get(TIMESTAMP)  # the live history's: training events and stored ones
    last = float(stamps.max()) if stamps is not None and len(stamps) else None
    return _json(
        HistoryResponse(
            model=e.name,
            user=user,
            length=len(hist),
            items=[
                HistoryItem(item=i, title=obj.titles_.get(i), signals=v)
                for i, v in zip(ids, values, strict=True)
            ],
            last_event_at=last,
        )
    )


def _explained(
    name: str, rec: Recommendation, ex: RecExplanation | None, top: int, method: str
) -> ExplainRecResponse:
    """The answer: every recommended item with its history items (none without an explanation).

    The attention method lists the shared attention ranking exactly as before (``attended``)."""
    shared = (
        []
        if ex is None or method != "attention"
        else [Attribution(item=a.item, title=a.title, weight=a.weight, back=a.back) for a in ex.attended]
    )
    per_item: list[ItemExplanation | None] = [None] * len(rec.items) if ex is None else list(ex.explanations)
    items = [
        ExplainedItem(
            item=i,
            title=t,
            score=s,
            because=shared if method == "attention" or why is None else because(why, top),
            reason=None if why is None else why.reason,
            note=None if why is None else why.note,
        )
        for i, t, s, why in zip(rec.items, rec.titles, rec.scores, per_item, strict=True)
    ]
    return ExplainRecResponse(
        model=name,
        user=rec.user,
        method=method,
        shared=method in SHARED_METHODS,
        items=items,
        predicting=None if ex is None else ex.predicting,
        history_length=0 if ex is None else ex.history_length,
        window=0 if ex is None else ex.window,
        unknown_items=rec.unknown_items,
        fallback=rec.fallback,
        ignored_inputs=rec.ignored_inputs,
    )


@router.post(
    "/v1/explain-rec",
    response_model=ExplainRecResponse,
    tags=["explain"],
    responses={
        404: {
            "model": ErrorResponse,
            "description": "unknown model or item, or unknown user without a history",
        },
        501: {"model": ErrorResponse, "description": "the model cannot explain with this method"},
    },
)
async def explain_rec(req: ExplainRecRequest, state: State) -> Response:
    """Top-k items for a user or a history (or just `item`), each with the history items that drove it
    (`because`, strongest first) and a short `reason` ("Because you <verb> *A* and *B*").

    `method`: `greedy` (default, the most faithful in the faithfulness benchmark: history items chosen
    in rounds, each the one whose removal lowers the score most given those chosen before),
    `occlusion` (exact: the score drop without each history item) and `integrated_gradients` explain
    each item on its own
    (`shared: false`); `attention` (the last layer's attention of the position that predicts the
    next item, mean over heads) and `rollout` belong to that position, so every recommended item
    shares one list (`shared: true`). 501 when the model
    cannot (attention methods: self-attention models; integrated gradients: models that expose their
    input embeddings; none: POP). A history without any known item is answered as `/v1/recommend`
    answers it (`fallback`), with empty `because` lists."""
    e = state.pick(req.model, "recommend")
    check_k(req.k, state.config)
    check_list("history", len(req.history or ()), state.config.max_history)
    rec = explaining(e, req.method)
    assert rec.items_ is not None
    if req.item is not None and rec.items_.get(req.item) is None:
        raise ApiError(
            404,
            "unknown_item",
            f"unknown item {req.item!r} in model {e.name!r}",
            [{"loc": "item", "message": "unknown item"}],
        )
    history: list[object] | None = None if req.history is None else list(req.history)
    verb = state.config.reason_verb

    inputs = req.event_inputs()  # as /v1/recommend passes them

    def run() -> tuple[Recommendation, RecExplanation | None]:
        try:
            ex = explain_recommendation(
                rec,
                user=req.user,
                history=history,
                k=req.k,
                top=req.top,
                method=req.method,
                item=req.item,
                reason_verb=verb,
                event_verbs=state.config.event_verbs,
                **inputs,
            )
        except (
            AttributionError
        ):  # no known item in the history: nothing to attribute, answered as /v1/recommend is
            return rec.recommend(user=req.user, history=history, k=req.k, **inputs), None
        return ex.recommendation, ex

    try:
        answer, ex = await state.on_worker(timed(state, e.name, "/v1/explain-rec", run))
    except (
        ValueError
    ) as exc:  # per-event fields the model cannot use (an unknown event name, a missing column)
        raise ApiError(422, "invalid_request", one_line(exc)) from None
    except KeyError as exc:  # an unknown user without a history: nothing to explain
        raise ApiError(
            404,
            "unknown_user",
            f"{exc.args[0] if exc.args else 'unknown user'} in model {e.name!r}: "
            "send a `history` to explain recommendations for it",
            [{"loc": "user", "message": "unknown user"}],
        ) from None
    return _json(_explained(e.name, answer, ex, req.top, req.method))


def _json(model: BaseModel) -> Response:
    """A response from a pydantic model, serialised once (FastAPI would validate it again)."""
    return Response(model.model_dump_json(), media_type="application/json")


__all__ = ["Catalog", "HistoryQuery", "ItemsQuery", "catalog_of", "router"]
