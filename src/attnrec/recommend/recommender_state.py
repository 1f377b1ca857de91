"""What the parts of :class:`~attnrec.recommend.recommender.Recommender` share.

:class:`RecommenderState` declares, in one place, the settings, ID maps, histories and fitted core that
fitting, scoring, answering, similar items and saving read and write, and the views through which
they reach the core (its capabilities asked once: :class:`~attnrec.recommend.model_core.CoreView`).
The constructor and :meth:`~attnrec.recommend.recommender.Recommender.fit` set them.

:class:`Derived` holds what serving derives from a fitted recommender (the popularity tensor,
inverse vector norms, the item -> users inverted index), built on first use and dropped whenever
the core changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any  # settings dicts and evaluation records are JSON-like

import numpy as np
import torch

from attnrec.data.schema import DataSource, IdMap, Sequences
from attnrec.data.split import Split
from attnrec.models.contracts import Capabilities
from attnrec.models.item_context import ModelContext
from attnrec.models.registry import ModelSpec
from attnrec.recommend.model_core import CoreView, ModelCore
from attnrec.store import HistoryStore
from attnrec.training.auto import AutoSettings
from attnrec.training.loop import TrainResult
from attnrec.training.train_config import TrainConfig


@dataclass
class Derived:
    """Serving data derived from a fitted recommender, built lazily."""

    popularity: torch.Tensor | None = None  # (I + 1,) float32 training counts
    inv_norm: tuple[tuple[int, int, torch.Size], torch.Tensor] | None = None  # (key of the vectors, (I + 1,))
    inverted: tuple[np.ndarray, np.ndarray] | None = None  # item -> users: (offsets (I + 2,), owners)

    def clear(self) -> None:
        """Forget everything (the core or the data changed)."""
        self.popularity = self.inv_norm = self.inverted = None


def popularity_tensor(cache: Derived, popularity: np.ndarray) -> torch.Tensor:
    """``popularity`` as a float32 tensor ``(I + 1,)``, converted once."""
    if cache.popularity is None:
        cache.popularity = torch.as_tensor(np.asarray(popularity), dtype=torch.float32)
    return cache.popularity


class RecommenderState:
    """The state of a :class:`~attnrec.recommend.recommender.Recommender`, which its parts share."""

    # the settings (the constructor; auto settings and warm starts at fit)
    spec: ModelSpec
    config: object
    train_config: TrainConfig
    preset: str | None
    auto: bool
    auto_: AutoSettings | None
    _given_model: dict[str, Any]  # settings the caller gave, which the data-derived ones never replace
    _given_train: dict[str, Any]
    _chosen_for: Split | None  # the split auto_ was chosen from
    _max_len: int | None  # read once: scoring asks per request batch
    # what fit or load sets
    _view: CoreView | None
    context_: ModelContext | None  # the item features the model reads (attnrec.models.item_context)
    users_: IdMap | None
    items_: IdMap | None
    histories_: Sequences | None
    events_: IdMap | None  # the training log's event types (requests name events by them)
    popularity_: np.ndarray | None
    titles_: dict[str, str]
    source_: DataSource
    train_result_: TrainResult | None
    evaluations_: list[dict[str, Any]]
    device: torch.device
    _cache: Derived  # derived serving data (popularity tensor, norms, inverted index)
    store: HistoryStore | None  # events since training (use_store); None: histories as trained
    _store_margin: int

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def core(self) -> ModelCore:
        """The fitted model (raises :class:`RuntimeError` before :meth:`fit` or :meth:`load`)."""
        return self._fitted_view().core

    @core.setter
    def core(self, core: ModelCore) -> None:
        # The one place a core is set: its capabilities are asked here, once, and derived data dropped.
        self._view = CoreView.of(core)
        self._cache = Derived()

    @property
    def capabilities(self) -> Capabilities:
        """What the fitted model can do (see :mod:`attnrec.models.contracts`)."""
        return self._fitted_view().caps

    @property
    def max_len(self) -> int | None:
        """The longest history the model reads (its ``max_len`` setting), or ``None`` when it has none."""
        return self._max_len

    @property
    def vocabularies_(self) -> Mapping[str, IdMap]:
        """The vocabularies of the categorical signals the model reads (requests' values map through them)."""
        return self.context_.vocabularies if self.context_ is not None else {}

    def _fitted_view(self) -> CoreView:
        if self._view is None or self.items_ is None:
            raise RuntimeError(f"{self.name}: call fit() or Recommender.load() first")
        return self._view

    def _inference_view(self) -> CoreView:
        """The fitted core in inference mode (``eval()`` walks every submodule: called only when needed)."""
        view = self._fitted_view()
        if view.core.training:
            view.core.eval()
        return view

    def _require_fitted(self) -> None:
        self._fitted_view()


__all__ = ["Derived", "RecommenderState", "popularity_tensor"]
