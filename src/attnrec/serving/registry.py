"""The table of served models: what each entry is, what it can do, and how it describes itself.

A served object declares what it can do by the methods it implements; the three protocols below
are the service's contract with it (a :class:`~attnrec.recommend.Recommender`, an
:class:`~attnrec.serving.ann.ApproximateRecommender`, an :class:`~attnrec.recommend.Explainer`,
or any object with the same methods). :data:`CAPABILITIES` maps each endpoint's capability name
to its protocol; it is the one place that decides which endpoint an object can answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from attnrec.config import config_to_dict
from attnrec.recommend import Explainer, Recommendation, Recommender
from attnrec.serving.batcher import MicroBatcher
from attnrec.serving.errors import ApiError
from attnrec.serving.export import OnnxCore
from attnrec.serving.schemas import ModelInfo

RecommendArgs = dict[str, object]
"""The keyword arguments of one recommendation request (``RecommendRequest`` without ``model``)."""


@runtime_checkable
class RecommendsMany(Protocol):
    """Answers ``/v1/recommend``: a batch of recommendation requests at once."""

    def recommend_many(self, requests: Sequence[Mapping[str, object]]) -> list[Recommendation]: ...


@runtime_checkable
class FindsSimilar(Protocol):
    """Answers ``/v1/similar-items``; raises :class:`KeyError` for an unknown item."""

    def similar_items(self, item: object, k: int = 10) -> Recommendation: ...


@runtime_checkable
class Explains(Protocol):
    """Answers ``/v1/explain``; raises ``DataError("unknown ...")`` for IDs it has not seen."""

    def explain(self, user: object, item: object, feature: str | None = None) -> object: ...


Served = RecommendsMany | FindsSimilar | Explains
"""What the service can serve: an object with at least one of the capabilities."""

CAPABILITIES: dict[str, type] = {"recommend": RecommendsMany, "similar-items": FindsSimilar, "explain": Explains}


def served_capabilities(obj: object) -> list[str]:
    """The capability names (keys of :data:`CAPABILITIES`) that ``obj`` implements, in that order."""
    return [name for name, protocol in CAPABILITIES.items() if isinstance(obj, protocol)]


def backend_of(obj: object) -> str:
    """``onnx`` for a recommender switched to the ONNX backend, else ``torch``."""
    return "onnx" if isinstance(obj, Recommender) and isinstance(obj.core, OnnxCore) else "torch"


@dataclass
class ServedModel:
    """One row of the table: a name, where it comes from, and its state."""

    name: str
    source: str  # the checkpoint directory, or a description of the object passed in
    obj: Served | None = None  # None until loaded
    status: str = "loading"  # loading, ready or failed
    error: str | None = None
    backend: str = "torch"
    batcher: MicroBatcher[RecommendArgs, Recommendation] | None = None
    capabilities: list[str] = field(default_factory=list)

    def info(self) -> ModelInfo:
        """The public description of this entry (``GET /v1/models``)."""
        info = ModelInfo(name=self.name, status=self.status, error=self.error, backend=self.backend,
                         capabilities=self.capabilities)
        if self.status == "ready":
            describe(info, self.obj)
        return info


def pick(models: Mapping[str, ServedModel], name: str | None, capability: str) -> ServedModel:
    """The ready model ``name`` (default: the first that can, or might once loaded, do ``capability``).

    Raises :class:`ApiError` (404 unknown model, 503 loading or failed, 400 or 501 unable).
    """
    if name is not None:
        e = models.get(name)
        if e is None:
            raise ApiError(404, "unknown_model", f"unknown model {name!r}; loaded models: {', '.join(models)}")
    else:
        able = [x for x in models.values() if capability in x.capabilities or x.status != "ready"]
        if not able:
            if capability == "explain":
                raise ApiError(501, "no_explainer", "no explanation model is loaded; start the server with "
                               "an explanation model's checkpoint (e.g. PETER: --model NAME=DIR)")
            raise ApiError(400, "unsupported", f"no loaded model supports {capability}")
        e = able[0]
    if e.status == "loading":
        raise ApiError(503, "model_loading", f"model {e.name!r} is still loading; retry shortly")
    if e.status == "failed":
        raise ApiError(503, "model_failed", f"model {e.name!r} failed to load: {e.error}")
    if capability not in e.capabilities:
        if capability == "explain":
            raise ApiError(501, "no_explainer", f"model {e.name!r} ({type(e.obj).__name__}) cannot explain; "
                           "load an explanation model (e.g. PETER) to use /v1/explain")
        raise ApiError(400, "unsupported", f"model {e.name!r} does not support {capability}")
    return e


def _training(obj: Recommender | Explainer) -> dict[str, Any] | None:
    """The training record without its per-epoch history (which can be long)."""
    tr = obj.train_result_
    return None if tr is None else {k: v for k, v in tr.to_dict().items() if k != "history"}


def describe(info: ModelInfo, obj: object) -> None:
    """Fill ``info`` from a recommender's ``meta`` or an explainer's attributes (other objects: nothing)."""
    if isinstance(obj, Recommender):
        meta = obj.meta
        info.model, info.task, info.preset = meta["model"], obj.spec.task, meta["preset"]
        info.config, info.n_items, info.dataset = meta["config"], meta["n_items"], meta["data"]
        info.evaluations = list(meta["evaluations"] or [])
        info.training = _training(obj)
    elif isinstance(obj, Explainer):
        info.model, info.task, info.preset = obj.spec.name, obj.spec.task, obj.preset
        info.config = config_to_dict(obj.config)
        info.n_items = len(obj.items_) if obj.items_ is not None else None
        info.dataset = asdict(obj.source_)
        info.evaluations = list(obj.evaluations_ or [])
        info.training = _training(obj)


__all__ = ["CAPABILITIES", "Explains", "FindsSimilar", "RecommendArgs", "RecommendsMany", "Served", "ServedModel",
           "backend_of", "describe", "pick", "served_capabilities"]
