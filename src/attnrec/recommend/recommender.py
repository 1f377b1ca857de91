"""The user-level contract: fit on an interaction log, recommend with external IDs, save and load.

Every registered sequential model is driven through :class:`Recommender`; the CLI, the HTTP
service and the benchmarks depend only on this class. What the model can do (factorised
scoring, an item bias, candidate scoring) is asked once, when its core is set
(:class:`~attnrec.recommend.model_core.CoreView`); request parsing, the top-k engine, similar items and
the directory format live in the sibling modules.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any  # settings dicts and request values are caller input

import numpy as np
import pandas as pd
import torch

from attnrec.config import ConfigError, config_from_dict, config_to_dict
from attnrec.data.boundary import Origin, id_column
from attnrec.data.frames import FrameLike, as_interactions
from attnrec.data.schema import DataSource, IdMap, Interactions, Sequences
from attnrec.data.split import FINAL, EvalSet, Split, final_split, leave_one_out, make_split
from attnrec.evaluation.protocol import FULL, EvalResult, Protocol, evaluate
from attnrec.models.contracts import Capabilities
from attnrec.models.item_context import ModelContext
from attnrec.models.registry import ModelSpec, get_spec
from attnrec.recommend import cold_items, reasons, similar, warm
from attnrec.recommend.answer_frames import recommendations_frame, seen_filter
from attnrec.recommend.event_requests import (
    VOCABULARIES,
    histories_from_arrays,
    history_arrays,
    signal_files,
    signals_from_json,
    signals_read,
)
from attnrec.recommend.live import DEFAULT_MARGIN, LiveRow, live_rows, trained_row
from attnrec.recommend.model_core import CoreView, ModelCore, build_core, fit_core, log, warn_if_noisy
from attnrec.recommend.persistence import (
    SEQUENTIAL,
    LoadsModelDir,
    ModelRecord,
    SavedModel,
    load_policy,
    save_model_dir,
)
from attnrec.recommend.requests import Prepared, prepare, stored_history
from attnrec.recommend.row_scoring import model_scores
from attnrec.recommend.structure import check_arrays, check_events, check_titles
from attnrec.recommend.topk import Recommendation, RowScores, answer
from attnrec.store import HistoryStore
from attnrec.training import auto as auto_settings
from attnrec.training.auto import AutoSettings
from attnrec.training.callbacks import EpochCallback
from attnrec.training.loop import TrainResult, resolve_device
from attnrec.training.train_config import TrainConfig


class Recommender(LoadsModelDir):
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
        self.spec: ModelSpec = get_spec(model)
        if auto and preset is not None:
            raise ConfigError(f"{model}: a preset ({preset!r}) is a complete recipe; it cannot be auto")
        if self.spec.task != SEQUENTIAL:
            raise ConfigError(f"{model} is a {self.spec.task}-task model; use attnrec.recommend.Explainer")
        model_over: dict[str, Any] = {}
        train_over: dict[str, Any] = {}
        if preset is not None:
            if preset not in self.spec.presets:
                raise ConfigError(
                    f"{model}: unknown preset {preset!r}; known: {', '.join(self.spec.presets) or 'none'}"
                )
            model_over = dict(self.spec.presets[preset].get("model", {}))
            train_over = dict(self.spec.presets[preset].get("train", {}))
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            self.config: object = config
        elif config is None or isinstance(config, Mapping):
            self.config = config_from_dict(self.spec.config_cls, model_over | dict(config or {}))
        else:
            raise ConfigError(
                f"{model}: config must be a dict or a settings dataclass, not {type(config).__name__}"
            )
        if isinstance(train, TrainConfig):
            self.train_config = train
        else:
            self.train_config = config_from_dict(TrainConfig, train_over | dict(train or {}))
        self.preset = preset
        # settings the caller gave, which the data-derived ones never replace
        self._given_model = dict(config) if isinstance(config, Mapping) else {}
        self._given_train = dict(train) if isinstance(train, Mapping) else {}
        self.auto = (preset is None and config is None) if auto is None else auto
        self.auto_: AutoSettings | None = None
        self._chosen_for: Split | None = None  # the split auto_ was chosen from
        # read once: the settings never change after construction, and scoring asks per request batch
        max_len = config_to_dict(self.config).get("max_len")
        self._max_len = None if max_len is None else int(max_len)
        self._view: CoreView | None = None
        # the item features the model reads (attnrec.models.item_context)
        self.context_: ModelContext | None = None
        self.users_: IdMap | None = None
        self.items_: IdMap | None = None
        self.histories_: Sequences | None = None
        self.events_: IdMap | None = None  # the training log's event types (requests name events by them)
        self.popularity_: np.ndarray | None = None
        self.titles_: dict[str, str] = {}
        self.source_: DataSource = DataSource("unnamed")
        self.train_result_: TrainResult | None = None
        self.evaluations_: list[dict[str, Any]] = []
        self.device = torch.device("cpu")
        self._cache = similar.Derived()  # derived serving data (popularity tensor, norms, inverted index)
        self.store: HistoryStore | None = (
            None  # events since training (use_store); None: histories as trained
        )
        self._store_margin = DEFAULT_MARGIN

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
        self._cache = similar.Derived()

    @property
    def capabilities(self) -> Capabilities:
        """What the fitted model can do (see :mod:`attnrec.models.contracts`)."""
        return self._fitted_view().caps

    @property
    def max_len(self) -> int | None:
        """The longest history the model reads (its ``max_len`` setting), or ``None`` when it has none."""
        return self._max_len

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

        ``new_since`` (Unix seconds; with ``init_from`` and split ``"none"``): fine-tune on the new events
        only. The users with an event at or after it train, each on those events with the history before
        them as the input; only events at or after it are targets
        (:func:`~attnrec.recommend.warm.new_events`).
        """
        data = as_interactions(data)
        source = None if init_from is None else self.warm_source(init_from)
        renumbered = False
        if source is not None:
            data, renumbered = warm.extend_log(data, source), not warm.indexed_like(data, source)
        split = self._split_of(data, split, renumbered=renumbered)
        since = None
        if new_since is not None:
            since = warm.check_new_since(new_since, data, source is not None, split.name == FINAL)
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
        with warm.only_new_targets(self.core, since):
            self.train_result_ = fit_core(
                self.core,
                train,
                None if split.name == FINAL else validate,
                cfg,
                self.device,
                state_dir=sd,
                progress=progress,
                callbacks=tuple(callbacks),
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
            self.name,
            self.spec.config_cls,
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

    # -- scoring ---------------------------------------------------------------------------------
    def _batch(
        self, users: np.ndarray, histories: Sequences, when: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in self.core.score_inputs(users, histories, when).items()}

    def score_histories(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` of internal-index histories (column 0 is padding) at ``request_time``
        ``(B,)``."""
        core = self._inference_view().core
        batch = self._batch(users, histories, request_time)
        with torch.no_grad():
            return core.score(batch)

    def score_candidates(
        self,
        users: np.ndarray,
        histories: Sequences,
        items: torch.Tensor,
        request_time: np.ndarray | None = None,
    ) -> torch.Tensor:
        """Scores ``(B, C)`` of the internal ``items`` ``(B, C)`` only, equal to the matching columns
        of :meth:`score_histories`. Factorised models and candidate scorers score just those items,
        so sampled-negative evaluation over a large catalog costs ``C`` scores per case, not the
        whole catalog."""
        view = self._inference_view()
        if view.factorised is None and view.candidates is None:
            return self.score_histories(users, histories, request_time).gather(1, items.to(self.device))
        batch = self._batch(users, histories, request_time)
        with torch.no_grad():
            if view.factorised is None:  # the model scores (user, item) pairs itself, e.g. NCF's MLP
                assert view.candidates is not None
                return view.candidates.score_items(batch, items.to(self.device))
            query = view.factorised.query_vectors(batch)  # (B, D)
            idx = items.to(query.device)  # (B, C)
            scores = (view.factorised.item_vectors()[idx] @ query[:, :, None]).squeeze(-1)  # (B, C)
            if view.item_bias is not None:
                scores = scores + view.item_bias.item_bias()[idx]  # (B, C)
        return scores

    def evaluate(
        self, cases: EvalSet, protocol: Protocol = FULL, *, split: str = "leave-one-out", target: str = "test"
    ) -> EvalResult:
        """Evaluate on ``cases`` under ``protocol``; the result is also kept with the model."""
        self._require_fitted()
        res = evaluate(
            self.score_histories,
            cases,
            protocol,
            popularity=self.popularity_,
            data=self.source_,
            split=split,
            target=target,
            candidate_scorer=self.score_candidates,
        )
        self.evaluations_.append(res.to_dict())
        return res

    # -- recommending ----------------------------------------------------------------------------
    def recommend(
        self,
        user: object | None = None,
        history: list[object] | None = None,
        k: int = 10,
        exclude_seen: bool | None = None,
        include: list[object] | None = None,
        exclude: list[object] | None = None,
        explain: bool | str = False,
        explain_k: int = reasons.MAX_EXPLAIN_K,
        reason_verb: str = reasons.DEFAULT_VERB,
        timestamps: list[float] | None = None,
        events: list[str] | None = None,
        ratings: list[float] | None = None,
        request_time: float | None = None,
        event_verbs: Mapping[str, str] | None = None,
        filter_viewed: bool | None = None,
        stored_history: bool = True,
        **signals: list[Any],
    ) -> Recommendation:
        """Top-``k`` items for a known ``user`` or an ad-hoc ``history`` of external item IDs.

        A known user is scored from its stored history (the training history, plus the events stored
        since when the recommender has a store: :meth:`use_store`); a ``history`` sent with a ``user``
        is appended to it (``stored_history=False``: the history alone is scored, the user contributes
        only its index), and every item of both is left out of the answer (``exclude_seen``).
        Unknown items in ``history`` are ignored and listed in ``unknown_items``. An unknown user
        with a history is scored from the history; an unknown user without one, or a history of
        only unknown items, gets the most popular items (``fallback`` says so in both cases).
        ``include`` restricts the candidates; ``exclude`` removes items; the items of the history are
        left out unless ``exclude_seen=False`` (or ``filter_viewed=False``, RecTools' name for it).

        ``explain``: ``True`` (greedy) or a method of :mod:`attnrec.evaluation.attribution` fills
        ``explanations`` (aligned with ``items``) for the first ``explain_k`` items, each with a reason
        "Because you {reason_verb} ..." (:mod:`attnrec.recommend.reasons`); the rest stay None. With event
        types and timestamps each event says its type and time, and the reason what was done when
        ("added *A* to your cart yesterday"; ``event_verbs``: event name -> verb or "{item}" template).

        ``timestamps`` (seconds, not decreasing), ``events`` (names of the training log's event types) and
        ``ratings``, each aligned with ``history``, and ``request_time`` (seconds) feed models trained with
        time, event or rating inputs (a known user without a ``history`` has its stored ones); a model that
        reads none ignores them and ``ignored_inputs`` lists them (:mod:`attnrec.recommend.event_requests`).
        A declared signal (:mod:`attnrec.data.signals`) is sent the same way, as a keyword named by its key
        (``device=["phone", "tv"]``); any other keyword is a ``TypeError``.
        """
        request = {
            "user": user,
            "history": history,
            "k": k,
            "exclude_seen": seen_filter(exclude_seen, filter_viewed),
            "include": include,
            "exclude": exclude,
            "timestamps": timestamps,
            "events": events,
            "ratings": ratings,
            "request_time": request_time,
            "stored_history": stored_history,
            **signals,
        }
        method = (
            reasons.DEFAULT_METHOD if explain is True else reasons.check_method(explain) if explain else None
        )
        answer = self.recommend_many([request])[0]
        if method is not None and self.items_ is not None:
            p, n = self._prepare(request), min(len(answer.items), max(explain_k, 0))
            found, _ = reasons.explain_items(
                self._inference_view().core,
                p.hist,
                self.items_.to_internal(answer.items[:n]),
                user=p.uid,
                items=self.items_,
                titles=self.titles_,
                method=method,
                verb=reason_verb,
                device=self.device,
                columns=p.columns,
                events=self.events_,
                event_verbs=event_verbs,
                request_time=p.request_time,
                vocabularies=self.vocabularies_,
            )
            answer.explanations = [*found, *[None] * (len(answer.items) - n)]
        return answer

    def recommend_many(self, requests: Sequence[Mapping[str, Any]]) -> list[Recommendation]:
        """Answer several :meth:`recommend` requests (dicts of its keyword arguments) in one batch.

        The histories are encoded together and the catalog is scored in chunks with a running
        top-k, so a batch costs one forward pass and no per-item Python work; the answers equal
        those of :meth:`recommend` one by one (up to float rounding of the batched matrix product).
        """
        self._require_fitted()
        assert self.items_ is not None and self.popularity_ is not None
        prepared = self._prepare_many(requests)
        out: list[Recommendation | None] = [None] * len(prepared)
        model_rows = [i for i, p in enumerate(prepared) if len(p.hist)]
        pop_rows = [i for i, p in enumerate(prepared) if not len(p.hist)]
        with torch.inference_mode():
            if model_rows:
                rows = [prepared[i] for i in model_rows]
                scores, ignored = self._model_scores(rows)
                answers = answer(rows, scores, "model", self.items_, self.titles_)
                for i, rec, unread in zip(model_rows, answers, ignored, strict=True):
                    out[i] = dataclasses.replace(rec, ignored_inputs=unread)
            if pop_rows:
                rows = [prepared[i] for i in pop_rows]
                pop = (
                    similar.popularity_tensor(self._cache, self.popularity_)
                    .unsqueeze(0)
                    .expand(len(rows), -1)
                )
                for i, rec in zip(
                    pop_rows,
                    answer(rows, RowScores(full=pop), "popularity", self.items_, self.titles_),
                    strict=True,
                ):
                    out[i] = rec
        return [r for r in out if r is not None]

    def recommend_frame(
        self,
        users: Iterable[object],
        k: int = 10,
        *,
        filter_viewed: bool | None = None,
        exclude_seen: bool | None = None,
        include: list[object] | None = None,
        exclude: list[object] | None = None,
    ) -> pd.DataFrame:
        """Top-``k`` items of each known user as one DataFrame: columns ``user`` (as given), ``rank``
        (1 = best), ``item``, ``score`` and ``title`` (when the model has titles), users in the order
        given (:mod:`attnrec.recommend.answer_frames`). Seen items are dropped unless ``filter_viewed=False``
        (or ``exclude_seen=False``); a user the model does not know gets the most popular items, as in
        :meth:`recommend`. ``include``/``exclude`` apply to every user."""
        listed = list(users)
        id_column(listed, "user", "users", Origin("recommend_frame"))  # None, NaN or "" is a DataError
        seen = seen_filter(exclude_seen, filter_viewed)
        requests = [
            {"user": u, "k": k, "exclude_seen": seen, "include": include, "exclude": exclude} for u in listed
        ]
        return recommendations_frame(listed, self.recommend_many(requests), with_titles=bool(self.titles_))

    def _prepare(self, request: Mapping[str, Any]) -> Prepared:
        """``request`` resolved against this model's ID maps and its user's live history."""
        return self._prepare_many([request])[0]

    def _prepare_many(self, requests: Sequence[Mapping[str, Any]]) -> list[Prepared]:
        """``requests`` resolved against this model's ID maps and live histories (one store read for all)."""
        assert self.items_ is not None and self.users_ is not None
        wanted = (str(r["user"]) for r in requests if r.get("user") is not None and stored_history(r) is True)
        live = self.live_histories(list(dict.fromkeys(wanted)))
        reads = signals_read(self.config)
        return [
            prepare(r, self.users_, self.items_, live, self.events_, self.vocabularies_, reads)
            for r in requests
        ]

    # -- live histories --------------------------------------------------------------------------
    def use_store(self, store: HistoryStore | None, margin: int = DEFAULT_MARGIN) -> Recommender:
        """Answer every user from its training history plus the events ``store`` gathered since
        (:mod:`attnrec.recommend.live`); ``None`` goes back to the histories as trained.

        Reads are bounded: the newest ``max_len + margin`` stored events of a user (the store's
        ``retention`` for a model without ``max_len``).
        """
        if margin < 0:
            raise ConfigError(f"margin must be >= 0, not {margin}")
        self.store, self._store_margin = store, margin
        return self

    def live_histories(self, users: Sequence[str]) -> dict[str, LiveRow]:
        """Each of ``users``'s history as the model scores it now (external user IDs; see
        :meth:`use_store`)."""
        assert self.items_ is not None and self.users_ is not None and self.histories_ is not None
        if self.store is None:
            return {u: trained_row(self.users_, self.histories_, u) for u in users}
        limit = self.store.retention if self.max_len is None else self.max_len + self._store_margin
        return live_rows(
            users,
            self.users_,
            self.items_,
            self.events_,
            self.histories_,
            self.store,
            limit,
            self.vocabularies_,
        )

    def _model_scores(self, rows: list[Prepared]) -> tuple[RowScores, list[list[str]]]:
        """Scores of non-empty histories and the per-event fields each row's model batch ignored
        (:func:`~attnrec.recommend.row_scoring.model_scores`)."""
        assert self.items_ is not None
        return model_scores(self._inference_view(), rows, len(self.items_), self.max_len, self.device)

    # -- item-to-item ----------------------------------------------------------------------------
    def similar_items(self, item: object, k: int = 10) -> Recommendation:
        """The ``k`` items most similar to ``item`` (an external ID), most similar first.

        Cosine similarity of the model's item vectors when it is factorised
        (``method="embedding-cosine"``), otherwise cosine of co-occurrence in the stored user
        histories (``method="co-occurrence"``: items never seen with ``item`` are not returned).
        Raises :class:`KeyError` for an unknown item.
        """
        view = self._fitted_view()
        assert self.items_ is not None and self.histories_ is not None and self.popularity_ is not None
        return similar.similar_items(
            view.factorised,
            self.histories_,
            self.popularity_,
            self.items_,
            self.titles_,
            self._cache,
            item,
            k,
        )

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

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | Path, *, manifest_key: str | bytes | None = None) -> Path:
        """Write a self-contained model directory (no training data needed to load it); with
        ``manifest_key``, its manifest is signed (see :func:`~attnrec.recommend.load`)."""
        core = self.core
        assert self.items_ is not None and self.users_ is not None and self.histories_ is not None
        record = ModelRecord(
            self.name,
            self.preset,
            config_to_dict(self.config),
            config_to_dict(self.train_config),
            self.users_,
            self.items_,
            self.source_,
            self.train_result_,
            self.evaluations_,
        )
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

    @classmethod
    def from_saved(cls, saved: SavedModel, device: str = "auto") -> Recommender:
        """The recommender of an opened model directory (see :func:`~attnrec.recommend.load`)."""
        record = saved.record
        # the model's declarations first: its config names the signals it reads
        vocabularies = signals_from_json(saved.json(VOCABULARIES, default={}), saved.path / "signals.json")
        rec = cls(record.model, record.model_config, record.train_config, auto=False)
        rec.preset = record.preset
        rec.users_, rec.items_ = record.users, record.items
        rec.titles_ = check_titles(saved.json("titles", default={}), saved.path / "titles.json")
        arrays = saved.tensors("arrays")
        check_arrays(arrays, len(rec.users_), len(rec.items_), saved.path / "arrays.safetensors")
        rec.popularity_ = arrays["popularity"].numpy()
        rec.histories_ = histories_from_arrays(arrays, len(rec.items_), saved.path / "arrays.safetensors")
        rec.events_ = check_events(saved.json("events", default=[]), saved.path / "events.json")
        rec.source_, rec.evaluations_, rec.train_result_ = (
            record.source,
            record.evaluations,
            record.train_result,
        )
        rec.context_ = cold_items.load_context(saved)
        if vocabularies:  # the categorical signals the model reads
            rec.context_ = dataclasses.replace(rec.context_ or ModelContext(), vocabularies=vocabularies)
        core = saved.build(
            lambda: build_core(
                rec.spec, rec.config, saved.meta["n_users"], saved.meta["n_items"], context=rec.context_
            )
        )
        rec.device = resolve_device(device)
        core.to(rec.device)
        core.eval()
        rec.core = core
        return rec

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


__all__ = ["Recommendation", "Recommender"]
