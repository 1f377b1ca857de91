"""The user-level contract: fit on an interaction log, recommend with external IDs, save and load.

Every registered sequential model is driven through :class:`Recommender`; the CLI, the HTTP
service and the benchmarks depend only on this class. This module holds its settings (the
constructor, settings chosen from the data, warm starts), fitting, the catalog's growth
(:meth:`Recommender.add_items`) and the serving store. Its other jobs are parts it is composed of,
one module each, sharing the state declared in :mod:`attnrec.recommend.recommender_state` (where
what the model can do is asked once, when its core is set:
:class:`~attnrec.recommend.model_core.CoreView`):

* :mod:`attnrec.recommend.recommender_scoring`: scores of internal-index histories and evaluation;
* :mod:`attnrec.recommend.recommender_answers`: recommendation requests in external IDs, their live
  histories, the rows' scoring and the reasons behind the answers;
* :mod:`attnrec.recommend.recommender_similar`: similar items;
* :mod:`attnrec.recommend.recommender_saving`: its model directory (the format shared with the
  explainer is :mod:`attnrec.recommend.persistence`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any  # settings dicts are caller input

import numpy as np
import torch

from attnrec.config import ConfigError, config_from_dict, config_to_dict
from attnrec.data.frames import FrameLike, as_interactions
from attnrec.data.schema import DataSource, Interactions
from attnrec.data.split import (
    DEFAULT_SPLIT,
    FINAL,
    Split,
    final_split,
    leave_last_new_out,
    leave_one_out,
    make_split,
)
from attnrec.evaluation.protocol import FULL, Protocol, check_protocol, evaluate
from attnrec.models.registry import get_spec
from attnrec.recommend import cold_items, warm
from attnrec.recommend.event_requests import VOCABULARIES, signals_from_json
from attnrec.recommend.live import DEFAULT_MARGIN
from attnrec.recommend.model_core import build_core, fit_core, log, warn_if_noisy
from attnrec.recommend.persistence import SEQUENTIAL, LoadsModelDir, SavedModel
from attnrec.recommend.recommender_answers import Answering
from attnrec.recommend.recommender_saving import Saving
from attnrec.recommend.recommender_scoring import Scoring
from attnrec.recommend.recommender_similar import SimilarItems
from attnrec.recommend.recommender_state import Derived
from attnrec.recommend.requests import check_flag
from attnrec.recommend.settings import resolve_settings
from attnrec.recommend.topk import Recommendation
from attnrec.store import HistoryStore
from attnrec.training import auto as auto_settings
from attnrec.training.auto import AutoSettings
from attnrec.training.callbacks import EpochCallback, check_callbacks
from attnrec.training.loop import resolve_device
from attnrec.training.train_config import TrainConfig


class Recommender(Answering, Scoring, SimilarItems, Saving, LoadsModelDir):
    """A registered model plus its ID maps, item metadata and training record.

    ``model``: a registered name (:func:`attnrec.list_models`); ``config``: model settings (dict or
    dataclass) over the defaults or over ``preset`` (a named preset, e.g. ``"paper"``), unknown keys
    are errors; ``train``: training-loop settings (dict or :class:`TrainConfig`).

    ``auto``: choose the settings nobody gave from the training data at :meth:`fit`
    (:mod:`attnrec.training.auto`; the choices and their reasons are in ``auto_``). By default it
    is on when neither a preset nor model settings are given, so ``Recommender("sasrec").fit(data)``
    fits the data's regime; ``auto=True`` also fills around given settings, ``auto=False`` keeps the
    library's defaults. A preset is a complete recipe and excludes it.
    """

    TASK = SEQUENTIAL

    def __init__(
        self,
        model: str,
        config: Mapping[str, Any] | object | None = None,
        train: Mapping[str, Any] | TrainConfig | None = None,
        preset: str | None = None,
        auto: bool | None = None,
    ) -> None:
        self.spec = get_spec(model)
        if auto and preset is not None:
            raise ConfigError(f"{model}: a preset ({preset!r}) is a complete recipe; it cannot be auto")
        if self.spec.task != SEQUENTIAL:
            raise ConfigError(f"{model} is a {self.spec.task}-task model; use attnrec.recommend.Explainer")
        settings = resolve_settings(self.spec, config, train, preset)
        self.config, self.train_config = settings.config, settings.train
        self.preset = preset
        self._given_model, self._given_train = settings.given_model, settings.given_train
        self.auto = (preset is None and config is None) if auto is None else check_flag("auto", auto)
        self.auto_ = None
        self._chosen_for = None
        # read once: the settings never change after construction, and scoring asks per request batch
        max_len = config_to_dict(self.config).get("max_len")
        self._max_len = None if max_len is None else int(max_len)
        # nothing fitted yet (the attributes are declared in RecommenderState)
        self._view = None
        self.context_ = None
        self.users_ = None
        self.items_ = None
        self.histories_ = None
        self.events_ = None
        self.popularity_ = None
        self.titles_ = {}
        self.source_ = DataSource("unnamed")
        self.train_result_ = None
        self.evaluations_ = []
        self.device = torch.device("cpu")
        self._cache = Derived()
        self.store = None
        self._store_margin = DEFAULT_MARGIN

    # -- fitting ---------------------------------------------------------------------------------
    def fit(
        self,
        data: Interactions | FrameLike,
        split: Split | str | None = None,
        *,
        valid_protocol: Protocol = FULL,
        state_dir: str | Path | None = None,
        progress: bool = True,
        callbacks: Sequence[EpochCallback] = (),
        init_from: Recommender | str | Path | warm.WarmSource | None = None,
        new_since: float | None = None,
        new_item_rows: str = "initial",
    ) -> Recommender:
        """Train on ``split.train`` (leave-one-out by default), selecting on ``split.valid``.

        ``data`` is an :class:`~attnrec.data.schema.Interactions` log or a DataFrame (pandas,
        pyarrow, polars) whose columns are guessed by name (``userId``, ``item_id``, ``timestamp``
        ...; name them with :meth:`Interactions.from_frame` instead). ``split``: a
        :class:`~attnrec.data.split.Split`, a split's name (``"leave-one-out"``, ``"temporal"``,
        ``"last-qualifying"``), or ``"none"`` (:data:`~attnrec.data.split.FINAL`): the final fit, which
        trains on every event for ``max_epochs`` epochs without validation; ``None`` is leave-one-out.
        ``callbacks`` see every epoch's record (:mod:`attnrec.training.callbacks`: tracking, pruning).

        ``init_from`` (a fitted :class:`Recommender` of the same model, or its saved directory): a warm
        start (:mod:`attnrec.recommend.warm`). The old model's settings (under the ones given here) and
        every weight are copied; its users and items keep their internal indices and the log's new ones
        are appended, their rows from item features or the model's seeded initialisation; then it trains
        as usual. A :class:`Split` must then be made on the extended log (:meth:`warm_source` and
        :func:`~attnrec.recommend.warm.extend_log`); a split's name is made on it here.

        ``new_since`` (Unix seconds; with ``init_from``): fine-tune on the new events only. The users with
        an event at or after it train, each on those events with the history before them as the input;
        only events at or after it are targets (:func:`~attnrec.recommend.warm.new_events`). With split
        ``"none"`` it trains ``max_epochs`` epochs; with ``"leave-one-out"`` (or ``None``) each of those
        users' last event is held out (:func:`~attnrec.data.split.leave_last_new_out`), only they are
        validated, and training stops early and keeps the best validated weights, whose epoch
        (``train_result_.best_epoch``) a final fit on every event can then train for; its patience,
        ``min_epochs`` and ``smooth`` are the library's defaults unless given here
        (:func:`~attnrec.recommend.warm.fine_tune_stopping`).

        ``new_item_rows`` (with ``init_from``): where a new item's row starts when the model has no item
        features to build it from. ``"initial"`` (the default): as a fresh model's initialisation draws it;
        ``"histories"``: the mean of the model's query vectors over the histories the item followed in the
        training log, at the size of a trained row (:func:`~attnrec.recommend.warm.seed_new_items`;
        factorised models whose item table is a weight). An initialised row is near zero, so a short
        fine-tune leaves a new item below the trained ones; a seeded one competes at once, which pays where
        new items are most of what users take next (a shop's fresh catalog) and costs where they are few
        and followed once or twice (``benchmarks/results/replay-notes.md``).
        """
        data = as_interactions(data)
        watchers = _fit_options(valid_protocol, callbacks, new_item_rows, warm_start=init_from is not None)
        progress = check_flag("progress", progress)
        source = None if init_from is None else self.warm_source(init_from)
        renumbered = False
        if source is not None:
            data, renumbered = warm.extend_log(data, source), not warm.indexed_like(data, source)
        since = None
        if new_since is not None:
            since = warm.check_new_since(new_since, data, source is not None, split)
            if split is None or split == DEFAULT_SPLIT:  # validated on the new users' last events
                split, renumbered = leave_last_new_out(data, since), False  # made on the extended log
        split = self._split_of(data, split, renumbered=renumbered)
        self._set_data(data)
        cfg = self.train_config
        if source is None:
            self.choose_settings(data, split)
            cfg = self.train_config
            self.config, self.context_ = cold_items.feature_context(self.name, self.config, data)
            self.core = build_core(
                self.spec, self.config, data.n_users, data.n_items, seed=cfg.seed, context=self.context_
            )
        else:
            self._warm_settings(source)
            cfg = self.train_config
            context = None
            if source.context is None or source.context.item_features is None:
                self.config, context = cold_items.feature_context(self.name, self.config, data)
            warm.check_events(source, self.config, data.events)
            self.core, self.context_ = warm.grown_core(
                self.spec, self.config, source, data, cfg.seed, context
            )
        if since is not None and split.name != FINAL:  # a validated fine-tune stops as a fine-tune
            self.train_config = cfg = warm.fine_tune_stopping(cfg, self._given_train)
        popularity = self.popularity_

        checked: list[bool] = []

        def validate() -> dict[str, float]:
            res = evaluate(
                self.score_histories,
                split.valid,
                valid_protocol,
                popularity=popularity,
                split=split.describe(),
                target="valid",
                batch_size=512,
                candidate_scorer=self.score_candidates,
            )
            if not checked and not self.capabilities.closed_form:  # how noisy is the stopping signal?
                checked.append(True)
                warn_if_noisy(res, cfg)
            return res.metrics

        self.device = resolve_device(cfg.device)
        sd = Path(state_dir) if state_dir is not None else None
        train = split.train if since is None else warm.new_events(split.train, since, self._max_len)
        featured = self.context_ is not None and self.context_.item_features is not None
        if source is not None and new_item_rows == "histories" and not featured:  # else rows from features
            warm.seed_new_items(self.core, train, len(source.items), getattr(self.config, "max_len", None))
        with warm.only_new_targets(self.core, since):
            self.train_result_ = fit_core(
                self.core,
                train,
                None if split.name == FINAL else validate,
                cfg,
                self.device,
                state_dir=sd,
                progress=progress,
                callbacks=watchers,
            )
        self._cache.clear()  # the weights changed
        return self

    @staticmethod
    def _split_of(data: Interactions, split: Split | str | None, *, renumbered: bool) -> Split:
        """``split`` as a :class:`Split` of ``data`` (a name is made here; ``None`` is leave-one-out)."""
        if split is None:
            return leave_one_out(data)
        if isinstance(split, str):
            return final_split(data) if split == FINAL else make_split(data, split)
        if not isinstance(split, Split):
            raise ConfigError(f"split is a Split or a split's name, not {type(split).__name__} {split!r:.40}")
        if renumbered:
            raise ConfigError(
                "a warm start (init_from) extends the ID maps: give the split by name (e.g. 'leave-one-out' "
                "or 'none') or make it on warm.extend_log(data, rec.warm_source(init_from))"
            )
        return split

    def warm_source(self, init_from: Recommender | str | Path | warm.WarmSource) -> warm.WarmSource:
        """What a warm start copies from ``init_from`` (a fitted recommender, or a model directory)."""
        if isinstance(init_from, warm.WarmSource):
            return init_from
        if isinstance(init_from, Recommender):
            old, where = init_from, "init_from"
        elif isinstance(init_from, str | Path):
            old, where = Recommender.load(init_from, device="cpu"), str(init_from)
        else:
            raise ConfigError(
                f"init_from must be a Recommender or a model directory, not {type(init_from).__name__}"
            )
        view = old._fitted_view()
        assert old.users_ is not None and old.items_ is not None
        return warm.WarmSource(
            old.name,
            old.config,
            config_to_dict(old.train_config),
            old.users_,
            old.items_,
            old.events_,
            view.core,
            old.context_,
            where,
        )

    def _warm_settings(self, source: warm.WarmSource) -> None:
        """The old model's settings under the given ones (nothing is chosen from the data)."""
        self.config = config_from_dict(
            self.spec.config_cls, warm.settings(source, self.name, self._given_model, self.spec.config_cls)
        )
        if self.preset is None:
            self.train_config = config_from_dict(TrainConfig, dict(source.train) | self._given_train)
        max_len = config_to_dict(self.config).get("max_len")
        self._max_len = None if max_len is None else int(max_len)

    def choose_settings(self, data: Interactions, split: Split) -> AutoSettings | None:
        """With ``auto``, fill the settings nobody gave from ``split`` (:mod:`attnrec.training.auto`).

        :meth:`fit` calls it; call it first to see (or log) the settings before training. Closed-form
        models have nothing to choose. Returns the choices (also in ``auto_``), or ``None``.
        """
        if not self.auto or self.spec.kind != "torch":
            return None
        if self.auto_ is not None and self._chosen_for is split:
            return self.auto_
        n_items = data.n_items
        self._chosen_for = split
        self.auto_ = auto_settings.choose(
            self.spec,
            auto_settings.DataShape.of(split, n_items),
            self._given_model,
            self._given_train,
        )
        self.config = config_from_dict(self.spec.config_cls, self.auto_.model | self._given_model)
        self.train_config = config_from_dict(TrainConfig, self.auto_.train | self._given_train)
        max_len = config_to_dict(self.config).get("max_len")
        self._max_len = None if max_len is None else int(max_len)
        for reason in self.auto_.reasons:
            log.info("chosen from the data: %s", reason)
        return self.auto_

    def _set_data(self, data: Interactions) -> None:
        self.users_, self.items_ = data.users, data.items
        self.histories_ = data.sequences()  # with the log's per-event columns, saved with the model
        self.events_ = data.events
        self.popularity_ = data.item_popularity()
        self.titles_ = dict(data.item_titles or {})
        self.source_ = data.source
        self._cache.clear()

    # -- a fitted recommender: its history store, new items; loading one -------------------------
    def use_store(self, store: HistoryStore | None, margin: int = DEFAULT_MARGIN) -> Recommender:
        """Answer every user from its training history plus the events ``store`` gathered since
        (:mod:`attnrec.recommend.live`); ``None`` goes back to the histories as trained.

        Reads are bounded: the newest ``max_len + margin`` stored events of a user (the store's
        ``retention`` for a model without ``max_len``).
        """
        if margin < 0:
            raise ConfigError(f"margin must be >= 0, not {margin}")
        if store is not None and not isinstance(store, HistoryStore):
            raise ConfigError(
                f"store is a HistoryStore (attnrec.store.open_store(...) opens one from a path or a URL), "
                f"not {type(store).__name__} {store!r:.60}"
            )
        self.store, self._store_margin = store, margin
        return self

    def add_items(self, features: cold_items.ItemFeatureInput, id_column: str | None = None) -> list[str]:
        """Add cold items with their features (a model trained with item_features sum/concat/gate, best with
        id_dropout; values it never saw count as missing): recommendable at once, saved; returns their IDs."""
        assert self.items_ is not None and self.histories_ is not None and self.popularity_ is not None
        self.items_, added = cold_items.extend_items(
            self.core, self.context_, self.items_, features, id_column
        )
        self.popularity_ = np.concatenate(
            [self.popularity_, np.zeros(len(added), dtype=self.popularity_.dtype)]
        )
        self.histories_ = dataclasses.replace(self.histories_, n_items=len(self.items_))
        self.core = self.core  # capabilities asked again, derived data (norms, popularity) dropped
        return added

    @classmethod
    def from_saved(cls, saved: SavedModel, device: str = "auto") -> Recommender:
        """The recommender of an opened model directory (see :func:`~attnrec.recommend.load`)."""
        record = saved.record
        # the model's declarations first: its config names the signals it reads
        vocabularies = signals_from_json(saved.json(VOCABULARIES, default={}), saved.path / "signals.json")
        rec = cls(record.model, record.model_config, record.train_config, auto=False)
        rec._restore(saved, vocabularies, device)
        return rec


def _fit_options(
    valid_protocol: object, callbacks: object, new_item_rows: str, *, warm_start: bool
) -> tuple[EpochCallback, ...]:
    """:meth:`Recommender.fit`'s options checked before anything is built or trained (its protocol,
    new item rows and callbacks); returns the callbacks as a tuple."""
    check_protocol(valid_protocol, "valid_protocol")
    if new_item_rows not in warm.NEW_ITEM_ROWS:
        raise ConfigError(f"new_item_rows={new_item_rows!r}: use one of {', '.join(warm.NEW_ITEM_ROWS)}")
    if new_item_rows != "initial" and not warm_start:
        raise ConfigError(
            f"new_item_rows={new_item_rows!r} seeds the new items of a warm start: give init_from too"
        )
    return check_callbacks(callbacks)


__all__ = ["Recommendation", "Recommender"]
