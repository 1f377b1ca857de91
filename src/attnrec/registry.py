"""The explicit model registry that feeds the CLI, benchmarks, serving and tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


def factorised(core: Any) -> bool:
    """Whether a model scores as ``query_vectors(batch) @ item_vectors().T`` (+ ``item_bias()``),
    the contract that serving's top-k, ANN export and candidate-only evaluation build on."""
    return hasattr(core, "query_vectors") and hasattr(core, "item_vectors")


@dataclass(frozen=True)
class ModelSpec:
    """What attnrec needs to know about a model.

    ``kind`` is ``"torch"`` for neural models (an ``nn.Module`` built as ``cls(config, n_users,
    n_items)`` with ``train_batches``, ``loss``, ``score_inputs`` and ``score``) or ``"estimator"``
    for models that fit themselves (``fit``/``score``/``state``). ``presets`` maps a preset name to
    ``{"model": {...}, "train": {...}}`` overrides of the defaults.
    """

    name: str
    cls: type
    config_cls: type
    kind: str
    task: str = "sequential"
    description: str = ""
    presets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)


MODELS: dict[str, ModelSpec] = {}


def register(
    name: str,
    *,
    config: type,
    kind: str,
    task: str = "sequential",
    presets: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> Callable[[type[T]], type[T]]:
    """Class decorator adding a model to :data:`MODELS` under ``name``."""

    def deco(cls: type[T]) -> type[T]:
        if name in MODELS:
            raise ValueError(f"model {name!r} registered twice")
        doc = (cls.__doc__ or "").strip().splitlines()
        MODELS[name] = ModelSpec(name, cls, config, kind, task, doc[0] if doc else "", presets or {})
        return cls

    return deco


def get_spec(name: str) -> ModelSpec:
    """The spec of a registered model; a clear error lists the known names."""
    import attnrec.models  # noqa: F401  (registration happens on import)

    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}") from None


def list_models(task: str | None = None) -> list[str]:
    """Names of registered models, optionally only those of one task (``sequential``/``explain``)."""
    import attnrec.models  # noqa: F401

    return sorted(n for n, s in MODELS.items() if task is None or s.task == task)
