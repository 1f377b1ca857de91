"""Request and response bodies of the HTTP service (pydantic v2); they make the OpenAPI page.

Item and user IDs are external IDs: JSON strings or integers (``42`` and ``"42"`` are the same ID).
Requests are validated strictly: unknown fields are rejected (a misspelt option is an error rather
than silently ignored), every field has exactly its JSON type (``"k": true``, ``"k": "3"`` and
``"k": 3.0`` are not integers: a count is written as one), and IDs, model names and features are text of at
most :data:`MAX_ID_CHARS` characters without control characters or lone UTF-16 surrogates; ID lists hold at
most
:data:`MAX_IDS` items. The server's own, lower limits (``max_k``, ``max_history``, ``max_list``)
are checked by the routes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from attnrec.data.signals import EVENT, RATING, REQUEST_TIME, TIMESTAMP, Signal, by_key, declared, signals

MAX_ID_CHARS = 256  # longest ID, model name or feature a request may send
MAX_IDS = 10_000  # longest history / include / exclude list a request may send (before the server's limits)
MAX_BECAUSE = 50  # most history items listed per explained recommendation
MAX_EXPLAINED = 20  # most items of one /v1/recommend answer that get an explanation (the first ones)
MAX_SEARCH = 100  # most items one item search returns
MAX_HISTORY_ROWS = 1000  # most stored-history items one history request returns
NO_CONTROL = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$"  # JSON Schema (ECMA 262) and Rust regex alike

# An ID as text: no control character and not blank (one character that Python's str.strip keeps: the
# library's one ID rule, attnrec.data.boundary.is_id)
_ALLOWED = "[^\\u0000-\\u001f\\u007f-\\u009f]"
_VISIBLE = "[^\\u0000-\\u0020\\u007f-\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
NOT_BLANK = f"^{_ALLOWED}*{_VISIBLE}{_ALLOWED}*$"

_TEXT_SCHEMA: dict[str, Any] = {"type": "string", "maxLength": MAX_ID_CHARS, "pattern": NO_CONTROL}
_ID_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_ID_CHARS,
    "pattern": NOT_BLANK,
}
Text = Annotated[str, StringConstraints(max_length=MAX_ID_CHARS, pattern=NO_CONTROL)]
Id = Annotated[
    str,
    StringConstraints(max_length=MAX_ID_CHARS, pattern=NOT_BLANK),
    WithJsonSchema({"anyOf": [_ID_SCHEMA, {"type": "integer"}]}),
]
Seconds = Annotated[int, Field(ge=-(2**53), le=2**53)]  # unix seconds, exact in a JSON number
Rating = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# per-event lists aligned with `history`: the built-in signals' fields (a declared signal's is validated
# by _SignalFields, by its kind)
EVENT_FIELDS = tuple(s.batch_key for s in signals() if s.builtin)
_IGNORED = (
    "Per-event request fields (`timestamps`, `events`, `ratings`, `request_time`) this model does not read "
    "(it was trained without them): the answer is the same without them."
)


def _as_str(v: Any) -> Any:
    if isinstance(v, bool):  # JSON true/false are not IDs
        raise ValueError("an ID must be a string or an integer, not a boolean")
    if isinstance(v, str) and not v.strip():  # the library's one ID rule (attnrec.data.boundary.is_id)
        raise ValueError("an ID must not be empty")
    return str(v) if isinstance(v, int) else v


def _as_str_list(v: Any) -> Any:
    if isinstance(v, list):
        if len(v) > MAX_IDS:  # before converting: no work for oversized lists
            raise ValueError(f"at most {MAX_IDS} items")
        return [x if type(x) is str else _as_str(x) for x in v]
    return v


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


ExplainMethod = Literal["attention", "rollout", "occlusion", "greedy", "integrated_gradients"]
_METHODS_DOC = (
    "`greedy` (the default: history items chosen in rounds, each the one whose removal lowers the item's "
    "score most given those chosen before; the top 3 chosen so, two batched forward passes), "
    "`occlusion` (exact: how much the item's score drops without each history item; one batched "
    "forward pass), `integrated_gradients` (self-attention models that expose their input embeddings), "
    "`attention` or `rollout` (the predicting position's attention, shared by every item)"
)


class ExplainOptions(_Strict):
    """How to explain each recommended item (``/v1/recommend``'s ``explain``)."""

    method: ExplainMethod = Field("greedy", description=f"One of {_METHODS_DOC}.")
    top: int = Field(
        3, ge=1, le=MAX_BECAUSE, description="How many history items to list per recommended item."
    )


def _per_event(signal: Signal, note: str = "") -> str:
    """The description of a signal's per-event request list: its declaration's help, then ``note``."""
    return f"Per history item: {signal.summary} {note}Same length as `history`."


def _optional_list(description: str) -> Any:
    """An optional list field of at most :data:`MAX_IDS` values."""
    return Field(None, max_length=MAX_IDS, description=description)


def _builtin(signal: Signal, note: str) -> Any:
    return _optional_list(_per_event(signal, note))


def _timestamps() -> Any:
    return _builtin(TIMESTAMP, "For models trained with time inputs; dropped with the unknown items. ")


def _events() -> Any:
    return _builtin(EVENT, "For models trained with event-type inputs. ")


def _ratings() -> Any:
    return _builtin(RATING, "For models trained with rating inputs. ")


def _request_time() -> Any:
    return Field(
        None,
        description=(
            "When the request is made (unix seconds, not before the last of `timestamps`): the time of the "
            "predicted event, for models trained with `request_time` (SASRec) or time inputs (BERT4Rec's "
            "[mask]). Without it the newest event's time stands in. Models without time inputs ignore it "
            "(see `ignored_inputs`)."
        ),
    )


def _history_rules(fields: list[str] | tuple[str, ...] = EVENT_FIELDS) -> dict[str, Any]:
    """The cross-field rules of a history request that JSON Schema can state: a `user` or a `history`
    (not null), and each per-event list only with a `history` (their equal lengths it cannot state)."""
    not_null = {"not": {"type": "null"}}
    return {
        "anyOf": [{"required": [key], "properties": {key: not_null}} for key in ("user", "history")],
        "allOf": [
            {
                "if": {"required": [name], "properties": {name: not_null}},
                "then": {"required": ["history"], "properties": {"history": not_null}},
            }
            for name in fields
        ],
    }


def _check_history_request(req: Any) -> None:
    """A request needs a user or a history; per-event lists need the history they describe, item by item."""
    if req.user is None and req.history is None:
        raise ValueError("give a `user` or a `history` (or both)")
    for name in EVENT_FIELDS:
        values = getattr(req, name)
        if values is not None and req.history is None:
            raise ValueError(f"`{name}` describes the events of `history`: send it with a history")
        if values is not None and req.history is not None and len(values) != len(req.history):
            raise ValueError(f"`{name}` has {len(values)} values for a history of {len(req.history)} items")


def _signal_list(signal: Signal) -> TypeAdapter[list[Any]]:
    """The JSON type of a declared signal's per-event list: IDs-like text, or finite numbers."""
    if signal.kind == "categorical":
        return TypeAdapter(list[Text], config=ConfigDict(strict=True))
    number = Annotated[float, Field(ge=signal.minimum, allow_inf_nan=False)]
    return TypeAdapter(list[number], config=ConfigDict(strict=True))


def _signal_schema(signal: Signal) -> dict[str, Any]:
    items = _TEXT_SCHEMA if signal.kind == "categorical" else {"type": "number"}
    return {
        "anyOf": [{"type": "array", "items": items, "maxItems": MAX_IDS}, {"type": "null"}],
        "description": _per_event(signal),
    }


def _with_signals(extra: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """A ``json_schema_extra`` that adds ``extra`` and, when the schema is made, every declared signal's
    field (with its history rule) to a history request's schema."""

    def add(schema: dict[str, Any]) -> None:
        schema.update(extra)
        schema["properties"] |= {s.batch_key: _signal_schema(s) for s in declared()}
        rules = _history_rules([s.batch_key for s in declared()])
        schema["allOf"] = [*schema.get("allOf", []), *rules["allOf"]]

    return add


#: The history with times in the examples of the history requests.
_TIMED_EXAMPLE = {"history": ["5", "9"], "timestamps": [1700000000, 1700003600]}


def _history_request_config(examples: list[dict[str, Any]]) -> ConfigDict:
    """The settings of a history request: strict, and its schema with the history rules, the declared
    signals' fields and ``examples``."""
    return ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra=_with_signals({**_history_rules(), "examples": examples}),
    )


class _SignalFields(_Strict):
    """A history request to a loaded ``model`` that takes the declared signals' per-event lists
    (:mod:`attnrec.data.signals`) as top-level fields, each checked by its signal's kind; any other
    unknown field stays an error."""

    model: Text | None = Field(
        None, description="Loaded model name (GET /v1/models); default: the first one."
    )

    _signals: dict[str, list[Any]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _declared(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        sent = {}
        if isinstance(data, dict):
            sent = {k: v for k, v in data.items() if _is_declared(k) and v is not None}
            data = {k: v for k, v in data.items() if not _is_declared(k)}
        req = handler(data)
        history = getattr(req, "history", None)
        for key, values in sent.items():
            signal = by_key(key)
            assert signal is not None  # _is_declared
            if history is None:
                raise ValueError(f"`{key}` describes the events of `history`: send it with a history")
            try:
                req._signals[key] = _signal_list(signal).validate_python(values)
            except ValidationError as e:
                raise ValueError(f"`{key}`: {e.errors()[0]['msg']}") from None
            if len(values) != len(history):
                raise ValueError(f"`{key}` has {len(values)} values for a history of {len(history)} items")
        return req

    @model_validator(mode="after")
    def _user_or_history(self) -> Self:
        _check_history_request(self)
        return self

    def event_inputs(self) -> dict[str, Any]:
        """The per-event fields as :meth:`~attnrec.recommend.Recommender.recommend` takes them: the
        built-in ones, ``request_time`` and the declared signals sent."""
        return self.model_dump(include={*EVENT_FIELDS, REQUEST_TIME}) | self._signals


def _is_declared(key: object) -> bool:
    signal = by_key(str(key))
    return signal is not None and not signal.builtin


class RecommendRequest(_SignalFields):
    """Top-k items for a known user, or for an ad-hoc history of item IDs (oldest first)."""

    user: Id | None = Field(None, description="External user ID. Unknown users fall back (see `fallback`).")
    history: list[Id] | None = _optional_list(
        "External item IDs, oldest first. Appended to the stored history of `user` (the training "
        "history plus the events sent since, see `stored_history`); unknown items are ignored and returned "
        "in `unknown_items`."
    )
    k: int = Field(10, ge=1, description="How many items to return (at most the server's max_k).")
    exclude_seen: bool = Field(True, description="Leave out items of the history.")
    include: list[Id] | None = _optional_list("Only recommend among these items.")
    exclude: list[Id] | None = _optional_list("Never recommend these items.")
    stored_history: bool = Field(
        True,
        description="Read `user`'s stored history (and append `history` to it); false: score `history` "
        "alone, the user contributing only its identity to models with user embeddings.",
    )
    timestamps: list[Seconds] | None = _timestamps()
    events: list[Text] | None = _events()
    ratings: list[Rating] | None = _ratings()
    request_time: Seconds | None = _request_time()
    explain: bool | ExplainOptions = Field(
        False,
        description=(
            f"Explain each of the first {MAX_EXPLAINED} items (`explanation`): `true` (greedy, top 3) or "
            "options. Off by default: an explained request is scored on its own (not micro-batched) and "
            "costs one extra forward pass per history item the model reads for occlusion, and that again "
            "per explained item for greedy's second round (integrated gradients cost more)."
        ),
    )

    _ids = field_validator("user", mode="before")(_as_str)
    _lists = field_validator("history", "include", "exclude", mode="before")(_as_str_list)

    model_config = _history_request_config(
        [
            {"user": "42", "k": 10},
            {"history": ["1193", "661", "914"], "k": 5, "exclude": ["2355"]},
            {"user": "42", "k": 5, "explain": {"method": "greedy", "top": 3}},
            {**_TIMED_EXAMPLE, "events": ["view", "buy"], "request_time": 1700007200, "k": 5},
        ]
    )


class ScoredItem(BaseModel):
    item: str
    score: float
    title: str | None = None


class Attribution(BaseModel):
    item: str
    title: str | None = None
    weight: float = Field(
        description="How much this history item counted for the recommendation: for `attention` "
        "the last layer's weight from the predicting position (mean over heads), for "
        "`occlusion` how much the item's score drops without it, for `greedy` "
        "that drop given the items listed before it, for "
        "`integrated_gradients` its integrated gradient."
    )
    back: int | None = Field(
        None, description="Position in the history counted from the most recent item (0)."
    )
    event: str | None = Field(
        default=None,
        description="The history event's type (e.g. `cart`), from the "
        "request's `events` or the user's stored history; null without event types.",
    )
    timestamp: float | None = Field(
        default=None,
        description="When the history event happened (unix seconds), "
        "from the request's `timestamps` or the user's stored history; null "
        "without times.",
    )
    signals: dict[str, str | float | None] | None = Field(
        default=None,
        description='The history event\'s declared signals (e.g. `{"device": "phone"}`), from the '
        "request or the user's stored history; null without declared signals.",
    )


# The why of one recommended item, in /v1/recommend's `explanation` and /v1/explain-rec's items.
def _because() -> Any:
    return Field(description="History items behind this recommendation, strongest first.")


def _reason() -> Any:
    return Field(
        None,
        description='"Because you <verb> *A* and *B*" from the strongest positive '
        "history items, with each event's type and time where the "
        'history has them ("added *A* to your cart yesterday"); '
        "null when none raised the item's score.",
    )


def _because_note() -> Any:
    return Field(None, description="Why `because` is empty, when it is (e.g. a one-item history).")


class Explanation(BaseModel):
    method: str
    shared: bool = Field(description="`true` when every recommended item has the same `because` list.")
    reason: str | None = _reason()
    because: list[Attribution] = _because()
    note: str | None = _because_note()


class RecommendedItem(ScoredItem):
    explanation: Explanation | None = Field(
        None, description=f"With `explain`: why this item (first {MAX_EXPLAINED} items only)."
    )


class RecommendResponse(BaseModel):
    model: str
    user: str | None = None
    items: list[RecommendedItem]
    unknown_items: list[str] = Field(
        default_factory=list, description="History items the model does not know."
    )
    fallback: str | None = Field(
        None, description="Why the answer is not fully personalised, when it is not."
    )
    method: str | None = Field(None, description="`model` or `popularity`.")
    ignored_inputs: list[str] = Field(default_factory=list, description=_IGNORED)


class SimilarItemsRequest(_Strict):
    """Items most similar to one item."""

    model: Text | None = None
    item: Id
    k: int = Field(10, ge=1)

    _ids = field_validator("item", mode="before")(_as_str)


class SimilarItemsResponse(BaseModel):
    model: str
    item: str
    items: list[ScoredItem]
    method: str | None = Field(None, description="`embedding-cosine` or `co-occurrence`.")


class ExplainRequest(_Strict):
    """A natural-language explanation of why ``user`` might like ``item`` (explanation models only)."""

    model: Text | None = None
    user: Id
    item: Id
    feature: Text | None = Field(None, description="Optional feature word the explanation should be about.")

    _ids = field_validator("user", "item", mode="before")(_as_str)


class ExplainResponse(BaseModel):
    model: str
    user: str
    item: str
    explanation: Any = Field(
        description="What the explanation model returned (text and, when it has them, "
        "predicted rating and features)."
    )


class ExplainRecRequest(_SignalFields):
    """Top-k items for a user or a history, each with the history items that drove it."""

    user: Id | None = Field(None, description="External user ID; without `history`, it must be a known user.")
    history: list[Id] | None = _optional_list(
        "External item IDs, oldest first (overrides the stored history of "
        "`user`); unknown items are ignored and returned in `unknown_items`."
    )
    k: int = Field(10, ge=1, description="How many items to recommend (at most the server's max_k).")
    top: int = Field(
        10, ge=1, le=MAX_BECAUSE, description="How many history items to list per recommendation."
    )
    method: ExplainMethod = Field(
        "greedy",
        description=f"One of {_METHODS_DOC}; greedy, the default, was the most "
        "faithful in benchmarks/results/faithfulness.md.",
    )
    item: Id | None = Field(
        None, description="Explain this item's score instead of the top-k (it may rank anywhere)."
    )
    timestamps: list[Seconds] | None = _timestamps()
    events: list[Text] | None = _events()
    ratings: list[Rating] | None = _ratings()
    request_time: Seconds | None = _request_time()

    _ids = field_validator("user", "item", mode="before")(_as_str)
    _lists = field_validator("history", mode="before")(_as_str_list)

    model_config = _history_request_config(
        [
            {"user": "42", "k": 5},
            {"history": ["1193", "661", "914"], "k": 5, "top": 3, "method": "greedy"},
            {"user": "42", "method": "occlusion", "item": "2355"},
            {**_TIMED_EXAMPLE, "events": ["view", "cart"], "k": 3, "top": 2},
        ]
    )


class ExplainedItem(BaseModel):
    item: str
    title: str | None = None
    score: float
    because: list[Attribution] = _because()
    reason: str | None = _reason()
    note: str | None = _because_note()


class ExplainRecResponse(BaseModel):
    model: str
    user: str | None = None
    method: str = Field(description=f"How `because` was computed: {_METHODS_DOC}.")
    shared: bool = Field(
        description="`true` when every recommended item has the same `because` list (attention "
        "belongs to the predicting position, not to one recommended item); `false` "
        "for greedy, occlusion and integrated gradients."
    )
    items: list[ExplainedItem]
    predicting: str | None = Field(
        None,
        description="What the predicting position is (SASRec: the most recent "
        "history item; BERT4Rec: a [mask] after the history); null without known items and for the "
        "per-item methods.",
    )
    history_length: int = Field(description="Known items in the history.")
    window: int = Field(description="The most recent history items the model read (its max_len).")
    unknown_items: list[str] = Field(
        default_factory=list, description="History items the model does not know."
    )
    fallback: str | None = Field(
        None, description="Why the answer is not fully personalised, when it is not."
    )
    ignored_inputs: list[str] = Field(default_factory=list, description=_IGNORED)


class CatalogItem(BaseModel):
    item: str
    title: str | None = None


class HistoryItem(CatalogItem):
    signals: dict[str, str | float | None] | None = Field(
        default=None,
        description='The event\'s values of the declared signals the model reads (e.g. `{"device": '
        '"phone"}`; null for a value not known or never trained on); null when the model reads none.',
    )


class ItemsResponse(BaseModel):
    model: str
    query: str
    items: list[CatalogItem] = Field(
        description="The item whose ID is the query first, then items whose title "
        "contains it, most popular first (no query: the most popular)."
    )
    more: bool = Field(description="`true` when more items match than `limit`.")


class HistoryResponse(BaseModel):
    model: str
    user: str
    length: int = Field(description="Items in the stored history.")
    items: list[HistoryItem] = Field(
        description="The most recent `limit` items of the stored history, most recent last."
    )
    last_event_at: float | None = Field(
        default=None,
        description="When the history's last event happened (unix seconds; null without times): "
        "the day reasons count from ('today', '3 days ago').",
    )


class ModelInfo(BaseModel):
    name: str
    status: str = Field(description="`ready`, `loading` or `failed`.")
    error: str | None = None
    model: str | None = None
    kind: str | None = Field(
        default=None, description="`torch` (trained by the training loop) or `estimator` (closed form)."
    )
    task: str | None = None
    preset: str | None = None
    backend: str | None = None
    loaded_at: str | None = Field(
        default=None, description="When the served version was loaded (ISO 8601, UTC)."
    )
    versions: dict[str, Any] | None = Field(
        default=None,
        description="`attnrec`: the version that saved the model directory; `format`: its format version.",
    )
    capabilities: list[str] = Field(default_factory=list)
    n_items: int | None = None
    dataset: dict[str, Any] | None = Field(
        default=None, description="Name, format and sha256 of the training data (never its local path)."
    )
    config: dict[str, Any] | None = None
    evaluations: list[dict[str, Any]] = Field(
        default_factory=list, description="Every evaluation stored with the model: protocol, split, metrics."
    )
    training: dict[str, Any] | None = None


class ModelsResponse(BaseModel):
    models: list[ModelInfo]
    limits: dict[str, Any]


class Status(BaseModel):
    status: str = Field(description="`ok` (/healthz), `ready`, `not ready` or `shutting down`.")
    models: dict[str, str] = Field(
        default_factory=dict,
        description="Each model's state (listed to callers with a key when keys are set).",
    )
    reloading: bool = Field(default=False, description="A hot reload or item addition is running.")


class ErrorDetail(BaseModel):
    loc: str
    message: str


class Error(BaseModel):
    status: int
    code: str
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class ErrorResponse(BaseModel):
    error: Error
