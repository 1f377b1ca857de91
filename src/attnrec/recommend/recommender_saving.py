"""A :class:`~attnrec.recommend.recommender.Recommender`'s model directory: what it writes and reads.

:class:`Saving` writes the directory (:func:`~attnrec.recommend.persistence.save_model_dir`: the
record every model directory holds, the weights, the popularity and histories arrays, the titles,
event types, item features and signal vocabularies) and restores a recommender from an opened one
(:meth:`~attnrec.recommend.recommender.Recommender.from_saved` builds it and calls :meth:`_restore`),
each file checked for structure (:mod:`attnrec.recommend.structure`) before it is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any  # JSON values

import torch

from attnrec.config import config_to_dict
from attnrec.data.schema import IdMap
from attnrec.models.item_context import ModelContext
from attnrec.recommend import cold_items
from attnrec.recommend.event_requests import histories_from_arrays, history_arrays, signal_files
from attnrec.recommend.model_core import build_core
from attnrec.recommend.persistence import ModelRecord, SavedModel, load_policy, save_model_dir
from attnrec.recommend.recommender_state import RecommenderState
from attnrec.recommend.structure import check_arrays, check_events, check_titles
from attnrec.training.loop import resolve_device


class Saving(RecommenderState):
    """:meth:`save`, :attr:`meta` and the restoring half of ``from_saved``."""

    def save(self, path: str | Path, *, manifest_key: str | bytes | None = None) -> Path:
        """Write a self-contained model directory (no training data needed to load it); with
        ``manifest_key``, its manifest is signed (see :func:`~attnrec.recommend.load`)."""
        core = self.core
        assert self.items_ is not None and self.users_ is not None and self.histories_ is not None
        record = ModelRecord.of(self)
        arrays = {"popularity": torch.as_tensor(self.popularity_)} | history_arrays(self.histories_)
        events = {"events": self.events_.to_list()} if self.events_ is not None else {}
        return save_model_dir(
            path,
            record,
            {"weights": core.state_dict(), "arrays": arrays},
            {"titles": self.titles_}
            | events
            | cold_items.context_files(self.context_)
            | signal_files(self.config, self.vocabularies_),
            {},
            manifest_key=load_policy(manifest_key=manifest_key).manifest_key,
        )

    def _restore(self, saved: SavedModel, vocabularies: Mapping[str, IdMap], device: str) -> None:
        """Fill a recommender built from ``saved``'s settings with its ID maps, data and weights;
        ``vocabularies``: the categorical signals the model reads (read before its settings)."""
        record = saved.record
        self.preset = record.preset
        self.users_, self.items_ = record.users, record.items
        self.titles_ = check_titles(saved.json("titles", default={}), saved.path / "titles.json")
        arrays = saved.tensors("arrays")
        check_arrays(arrays, len(self.users_), len(self.items_), saved.path / "arrays.safetensors")
        self.popularity_ = arrays["popularity"].numpy()
        self.histories_ = histories_from_arrays(arrays, len(self.items_), saved.path / "arrays.safetensors")
        self.events_ = check_events(saved.json("events", default=[]), saved.path / "events.json")
        self.source_, self.evaluations_, self.train_result_ = (
            record.source,
            record.evaluations,
            record.train_result,
        )
        self.context_ = cold_items.load_context(saved)
        if vocabularies:  # the categorical signals the model reads
            self.context_ = dataclasses.replace(self.context_ or ModelContext(), vocabularies=vocabularies)
        core = saved.build(
            lambda: build_core(
                self.spec, self.config, saved.meta["n_users"], saved.meta["n_items"], context=self.context_
            )
        )
        self.device = resolve_device(device)
        core.to(self.device)
        core.eval()
        self.core = core

    @property
    def meta(self) -> dict[str, Any]:
        """A JSON-ready description: model, config, data and the evaluations it carries."""
        return {
            "model": self.name,
            "preset": self.preset,
            "config": config_to_dict(self.config),
            "data": dataclasses.asdict(self.source_),
            "evaluations": self.evaluations_,
            "n_items": len(self.items_) if self.items_ else 0,
        }


__all__ = ["Saving"]
