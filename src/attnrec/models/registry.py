"""The explicit model registry that feeds the CLI, benchmarks, serving and tests.

Each model file registers its class with :func:`register`; importing :mod:`attnrec.models`
registers them all. What a model can *do* is not recorded here: it follows from the contracts its
class implements (:mod:`attnrec.models.contracts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from attnrec.models.contracts import ClosedForm
from attnrec.models.promises import promise
from attnrec.search_space import SearchSpace

T = TypeVar("T")


@dataclass(frozen=True)
class ModelSpec:
    """What attnrec needs to know about a model.

    ``cls`` is built as ``cls(config, n_users, n_items)`` and implements the required contract of
    its ``task`` (:class:`~attnrec.models.contracts.SequentialModel`, or
    :class:`~attnrec.models.contracts.ClosedForm` for models fitted by counting; ``Trainable`` on
    reviews for the ``explain`` task). ``presets`` maps a preset name to
    ``{"model": {...}, "train": {...}}`` overrides of the defaults. ``search_space`` is what
    ``attnrec tune`` searches by default (:mod:`attnrec.search_space`), or ``None`` when the model
    declares none.
    """

    name: str
    cls: type
    config_cls: type
    task: str = "sequential"
    description: str = ""
    presets: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    search_space: SearchSpace | None = None
    needs_item_features: bool = False  # reads nothing but an item feature table (the content baseline)

    def promise(self, preset: str) -> str:
        """What ``preset`` promises, and what was measured with it (:mod:`attnrec.models.promises`)."""
        return promise(self.name, preset)

    @property
    def kind(self) -> str:
        """``"estimator"`` for closed-form models, ``"torch"`` for models trained by the training loop."""
        return "estimator" if issubclass(self.cls, ClosedForm) else "torch"


MODELS: dict[str, ModelSpec] = {}


def register(
    name: str,
    *,
    config: type,
    task: str = "sequential",
    presets: dict[str, dict[str, dict[str, Any]]] | None = None,
    search_space: SearchSpace | None = None,
    needs_item_features: bool = False,
) -> Callable[[type[T]], type[T]]:
    """Class decorator adding a model to :data:`MODELS` under ``name`` (``needs_item_features``: it cannot
    be fitted on a log without an item feature table)."""

    def deco(cls: type[T]) -> type[T]:
        if name in MODELS:
            raise ValueError(f"model {name!r} registered twice")
        doc = (cls.__doc__ or "").strip().splitlines()
        MODELS[name] = ModelSpec(
            name, cls, config, task, doc[0] if doc else "", presets or {}, search_space, needs_item_features
        )
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
