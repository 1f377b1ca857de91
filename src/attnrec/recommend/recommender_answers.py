"""Answering recommendation requests of a :class:`~attnrec.recommend.recommender.Recommender` in external IDs.

:class:`Answering` resolves requests against the ID maps and each user's live history (the training
history, plus the events a store gathered since: :mod:`attnrec.recommend.live`), scores the rows with
a history with the model and the rest by popularity, and answers through the top-k engine
(:mod:`attnrec.recommend.topk`), with the reasons behind the items when asked
(:mod:`attnrec.recommend.reasons`).

Rows are scored in groups of similar length (powers of two, up to the model's ``max_len``), so that a
short ad-hoc history batched with long stored ones is not padded to their length, and of the same
per-event fields (the columns and the request time they carry), so that every row of a batch has what
the batch holds. Which of the fields a row sent the model's batch does not read is reported back
(the model ignores them: an ID-only model reads no time, no event type and no rating).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any  # request values are caller input

import numpy as np
import pandas as pd
import torch

from attnrec.data.boundary import Origin, id_column
from attnrec.data.schema import Sequences
from attnrec.recommend import reasons
from attnrec.recommend.answer_frames import recommendations_frame, seen_filter
from attnrec.recommend.event_requests import ignored_inputs, signals_read
from attnrec.recommend.live import LiveRow, live_rows, trained_row
from attnrec.recommend.model_core import CoreView
from attnrec.recommend.recommender_state import RecommenderState, popularity_tensor
from attnrec.recommend.requests import (
    Prepared,
    check_k,
    check_list,
    check_requests,
    prepare,
    stored_history,
)
from attnrec.recommend.topk import Recommendation, RowScores, answer


class Answering(RecommenderState):
    """:meth:`recommend` and its batched and DataFrame forms, over the users' live histories."""

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
            p, n = self._prepare(request), min(len(answer.items), check_k(explain_k, "explain_k", least=0))
            verb = reasons.check_verb(reason_verb)
            found = self._explain_items(p, answer.items[:n], method, verb, event_verbs)
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
                pop = popularity_tensor(self._cache, self.popularity_).unsqueeze(0).expand(len(rows), -1)
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
        listed = check_list("users", users, "user IDs")
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
        requests = check_requests(requests)
        wanted = (str(r["user"]) for r in requests if r.get("user") is not None and stored_history(r) is True)
        live = self.live_histories(list(dict.fromkeys(wanted)))
        reads = signals_read(self.config)
        return [
            prepare(r, self.users_, self.items_, live, self.events_, self.vocabularies_, reads)
            for r in requests
        ]

    def _explain_items(
        self,
        p: Prepared,
        items: Sequence[str],
        method: str,
        verb: str,
        event_verbs: Mapping[str, str] | None,
    ) -> list[reasons.ItemExplanation]:
        """Explanations of the external ``items`` for the prepared request ``p``: its history's events
        with their times, event types and signal values, worded by ``verb`` and ``event_verbs``
        (:func:`~attnrec.recommend.reasons.explain_items`)."""
        assert self.items_ is not None
        found, _ = reasons.explain_items(
            self._inference_view().core,
            p.hist,
            self.items_.to_internal(items),
            user=p.uid,
            items=self.items_,
            titles=self.titles_,
            method=method,
            verb=verb,
            device=self.device,
            columns=p.columns,
            events=self.events_,
            event_verbs=event_verbs,
            request_time=p.request_time,
            vocabularies=self.vocabularies_,
        )
        return found

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
        (:func:`model_scores`)."""
        assert self.items_ is not None
        return model_scores(self._inference_view(), rows, len(self.items_), self.max_len, self.device)


def _groups(rows: list[Prepared], lengths: np.ndarray, max_len: int | None) -> list[np.ndarray]:
    """Row indices by (length bucket, column names, has a request time), in a fixed (sorted) order."""
    bucket = np.ceil(np.log2(np.minimum(lengths, max_len or lengths.max()))).astype(np.int64)
    groups: dict[tuple[int, tuple[str, ...], bool], list[int]] = {}
    for i, (b, p) in enumerate(
        zip(bucket, rows, strict=True)
    ):  # one pass: batch scoring sends thousands of rows
        groups.setdefault((int(b), tuple(sorted(p.columns)), p.request_time is not None), []).append(i)
    return [np.array(groups[key], dtype=np.int64) for key in sorted(groups)]


def _sequences(rows: list[Prepared], g: np.ndarray, n_items: int) -> Sequences:
    """The histories of rows ``g`` with their per-event columns (every row of a group has the same ones)."""
    lengths = np.array([len(rows[i].hist) for i in g], dtype=np.int64)
    offsets = np.zeros(len(g) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    columns = {name: np.concatenate([rows[i].columns[name] for i in g]) for name in rows[g[0]].columns}
    return Sequences(offsets, np.concatenate([rows[i].hist for i in g]), n_items, columns)


def model_scores(
    view: CoreView, rows: list[Prepared], n_items: int, max_len: int | None, device: torch.device
) -> tuple[RowScores, list[list[str]]]:
    """Scores of ``rows`` (factorised: query and item vectors, when the model allows) and, per row, the
    per-event request fields its model batch did not read. Call under ``torch.inference_mode()``."""
    users = np.array([p.uid for p in rows], dtype=np.int64)
    lengths = np.array([len(p.hist) for p in rows], dtype=np.int64)
    groups = _groups(rows, lengths, max_len)
    ignored: list[list[str]] = [[] for _ in rows]
    parts = []
    for g in groups:
        when = None if rows[g[0]].request_time is None else np.array([rows[i].request_time for i in g])
        inputs = view.core.score_inputs(users[g], _sequences(rows, g, n_items), when)
        batch = {k: v.to(device) for k, v in inputs.items()}
        for i in g:
            ignored[i] = ignored_inputs(rows[i].sent, set(batch))
        parts.append(
            view.factorised.query_vectors(batch).float()
            if view.factorised is not None
            else view.core.score(batch)
        )  # (len(g), D) or (len(g), I + 1)
    out = parts[0]
    if len(groups) > 1:
        out = torch.empty(len(rows), parts[0].shape[1], dtype=parts[0].dtype, device=parts[0].device)
        for g, part in zip(groups, parts, strict=True):
            out[torch.as_tensor(g, device=part.device)] = part
    if view.factorised is None:
        return RowScores(full=out), ignored
    bias = view.item_bias.item_bias().float() if view.item_bias is not None else None
    return RowScores(query=out, vectors=view.factorised.item_vectors().float(), bias=bias), ignored


__all__ = ["Answering"]
