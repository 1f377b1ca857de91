"""The table of served models: what each entry is, what it can do, and how it describes itself.

A served object declares what it can do by the methods it implements; the three protocols below
are the service's contract with it (a :class:`~attnrec.recommend.Recommender`, an
:class:`~attnrec.serving.ann.ApproximateRecommender`, an :class:`~attnrec.recommend.Explainer`,
or any object with the same methods). :data:`CAPABILITIES` maps each endpoint's capability name
to its protocol; it is the one place that decides which endpoint an object can answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from attnrec.checkpoint import LoadPolicy
from attnrec.config import config_to_dict
from attnrec.recommend import Explainer, Recommendation, Recommender, load
from attnrec.serving.api_errors import ApiError
from attnrec.serving.batcher import MicroBatcher
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

CAPABILITIES: dict[str, type] = {
    "recommend": RecommendsMany,
    "similar-items": FindsSimilar,
    "explain": Explains,
}


def served_capabilities(obj: object) -> list[str]:
    """The capability names (keys of :data:`CAPABILITIES`) that ``obj`` implements, in that order."""
    return [name for name, protocol in CAPABILITIES.items() if isinstance(obj, protocol)]


def backend_of(obj: object) -> str:
    """``onnx`` for a recommender switched to the ONNX backend, else ``torch``."""
    return "onnx" if isinstance(obj, Recommender) and isinstance(obj.core, OnnxCore) else "torch"


@dataclass(frozen=True)
class FromDirectory:
    """A model already loaded from ``directory`` (in ``load_seconds``): served at once, reloadable from
    there."""

    directory: Path
    obj: Served
    load_seconds: float = 0.0

    @classmethod
    def read(
        cls, directory: str | Path, device: str = "cpu", policy: LoadPolicy | None = None
    ) -> FromDirectory:
        """Load ``directory`` now under ``policy`` (errors raise here, before any server starts), timing it.

        Use the policy the app will reload it under (:meth:`ServingConfig.load_policy`)."""
        p = policy or LoadPolicy()
        t0 = time.perf_counter()
        obj = load(
            directory, device, allow_unsigned=p.allow_unsigned, manifest_key=p.manifest_key, limits=p.limits
        )
        return cls(Path(directory), obj, time.perf_counter() - t0)


@dataclass(frozen=True)
class Loaded:
    """One loaded version of a served model; a hot reload swaps the whole record at once."""

    obj: Served
    backend: str
    capabilities: list[str]
    loaded_at: float  # Unix time
    load_seconds: float
    versions: dict[str, object]  # attnrec version and model-directory format it was saved with


@dataclass
class ServedModel:
    """One row of the table: a name, where it comes from, and its state.

    ``loaded`` is replaced in one assignment by a reload, so a request (or a micro-batch) that read
    it keeps a consistent model, backend and capabilities until it is answered.
    """

    name: str
    directory: Path | None  # where it is (re)loaded from; None for an object passed in as such
    given: Served | None = None  # an object passed in, prepared at start-up
    given_seconds: float = 0.0  # how long loading ``given`` took before it was passed in
    loaded: Loaded | None = None  # None until loaded
    status: str = "loading"  # loading, ready or failed
    error: str | None = None
    batcher: MicroBatcher[RecommendArgs, Recommendation] | None = None

    @property
    def obj(self) -> Served | None:
        """The served object (None until loaded)."""
        return None if self.loaded is None else self.loaded.obj

    @property
    def capabilities(self) -> list[str]:
        """What the loaded object can do (none until loaded)."""
        return [] if self.loaded is None else self.loaded.capabilities

    @property
    def source(self) -> str:
        """Where it comes from, for log lines (never for answers: it may be a local path)."""
        return str(self.directory) if self.directory is not None else f"<{type(self.given).__name__} object>"

    def info(self) -> ModelInfo:
        """The public description of this entry (``GET /v1/models``): no local paths."""
        loaded = self.loaded
        info = ModelInfo(
            name=self.name,
            status=self.status,
            error=self.public_error(),
            backend=loaded.backend if loaded else None,
            capabilities=self.capabilities,
        )
        if loaded is not None:
            info.loaded_at = datetime.fromtimestamp(loaded.loaded_at, UTC).isoformat(timespec="seconds")
            info.versions = dict(loaded.versions)
            describe(info, loaded.obj)
        return info

    def public_error(self) -> str | None:
        """The load error with the model directory written as ``<model dir>``."""
        if self.error is None or self.directory is None:
            return self.error
        out = self.error
        for p in sorted({str(self.directory.resolve()), str(self.directory)}, key=len, reverse=True):
            out = out.replace(p, "<model dir>")
        return out


def pick(models: Mapping[str, ServedModel], name: str | None, capability: str) -> ServedModel:
    """The ready model ``name`` (default: the first that can, or might once loaded, do ``capability``).

    Raises :class:`ApiError` (404 unknown model, 503 loading or failed, 400 or 501 unable).
    """
    if name is not None:
        e = models.get(name)
        if e is None:
            raise ApiError(
                404, "unknown_model", f"unknown model {name!r}; loaded models: {', '.join(models)}"
            )
    else:
        able = [x for x in models.values() if capability in x.capabilities or x.status != "ready"]
        if not able:
            if capability == "explain":
                raise ApiError(
                    501,
                    "no_explainer",
                    "no explanation model is loaded; start the server with "
                    "an explanation model's checkpoint (e.g. PETER: --model NAME=DIR)",
                )
            raise ApiError(400, "unsupported", f"no loaded model supports {capability}")
        e = able[0]
    if e.status == "loading":
        raise ApiError(503, "model_loading", f"model {e.name!r} is still loading; retry shortly")
    if e.status == "failed":
        raise ApiError(
            503, "model_failed", f"model {e.name!r} failed to load: {e.public_error()}"
        )  # no local paths
    if capability not in e.capabilities:
        if capability == "explain":
            raise ApiError(
                501,
                "no_explainer",
                f"model {e.name!r} ({type(e.obj).__name__}) cannot explain; "
                "load an explanation model (e.g. PETER) to use /v1/explain",
            )
        raise ApiError(400, "unsupported", f"model {e.name!r} does not support {capability}")
    return e


def _training(obj: Recommender | Explainer) -> dict[str, Any] | None:
    """The training record without its per-epoch history (which can be long)."""
    tr = obj.train_result_
    return None if tr is None else {k: v for k, v in tr.to_dict().items() if k != "history"}


def _public_source(data: Mapping[str, Any]) -> dict[str, Any]:
    """A data source without its local ``path`` (name, format and sha256 stay)."""
    return {k: v for k, v in data.items() if k != "path"}


def _public_evaluations(evaluations: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    out = []
    for ev in evaluations or []:
        ev = dict(ev)
        if isinstance(ev.get("data"), Mapping):
            ev["data"] = _public_source(ev["data"])
        out.append(ev)
    return out


def describe(info: ModelInfo, obj: object) -> None:
    """Fill ``info`` from a recommender's ``meta`` or an explainer's attributes (other objects: nothing).

    Data sources are reported by name, format and sha256, never by their local path.
    """
    if isinstance(obj, Recommender):
        meta = obj.meta
        info.model, info.kind, info.task, info.preset = (
            meta["model"],
            obj.spec.kind,
            obj.spec.task,
            meta["preset"],
        )
        info.config, info.n_items, info.dataset = (
            meta["config"],
            meta["n_items"],
            _public_source(meta["data"]),
        )
        info.evaluations = _public_evaluations(meta["evaluations"])
        info.training = _training(obj)
    elif isinstance(obj, Explainer):
        info.model, info.kind, info.task, info.preset = (
            obj.spec.name,
            obj.spec.kind,
            obj.spec.task,
            obj.preset,
        )
        info.config = config_to_dict(obj.config)
        info.n_items = len(obj.items_) if obj.items_ is not None else None
        info.dataset = _public_source(asdict(obj.source_))
        info.evaluations = _public_evaluations(obj.evaluations_)
        info.training = _training(obj)


__all__ = [
    "CAPABILITIES",
    "Explains",
    "FindsSimilar",
    "FromDirectory",
    "Loaded",
    "RecommendArgs",
    "RecommendsMany",
    "Served",
    "ServedModel",
    "backend_of",
    "describe",
    "pick",
    "served_capabilities",
]
