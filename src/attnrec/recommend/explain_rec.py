"""A recommendation with what drove it: the history items behind each recommended item.

``method="greedy"`` (the default: the most faithful method of ``benchmarks/results/faithfulness.md``)
``occlusion`` and ``integrated_gradients`` explain each recommended item on its own
(:mod:`attnrec.recommend.reasons`); ``attention`` ranks the history by the attention of the predicting
position (:mod:`attnrec.evaluation.attention`) and, like ``rollout``, gives one list shared by the whole
top-k. This module pairs them with the
:class:`~attnrec.recommend.Recommender`'s answer for the same request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any  # JSON-ready dicts

from attnrec.evaluation.attention import AttendedItem, history_attention
from attnrec.evaluation.attribution import SHARED_METHODS, AttributionError
from attnrec.recommend.reasons import (
    DEFAULT_METHOD,
    DEFAULT_VERB,
    ItemExplanation,
    check_method,
)
from attnrec.recommend.recommender import Recommender
from attnrec.recommend.requests import UNKNOWN_USER, check_id
from attnrec.recommend.topk import Recommendation


@dataclass
class RecExplanation:
    """A recommendation and the history items that drove it.

    ``attended``/``predicting``/``self_weight``: the attention method's shared list, most attended
    first (empty/None/0 for the other methods); ``explanations``: one per recommended item, aligned
    with ``recommendation.items`` (for the attention methods they all hold the same events).
    """

    model: str
    user: str | None
    recommendation: Recommendation
    predicting: str | None
    attended: list[AttendedItem]
    self_weight: float  # last-layer attention of the predicting [mask] on itself (0 for SASRec)
    history_length: int
    window: int  # history items the model saw (the most recent ones)
    method: str = DEFAULT_METHOD
    explanations: list[ItemExplanation] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        """Whether every recommended item has the same events (the attention methods)."""
        return self.method in SHARED_METHODS

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """JSON-ready form; ``top`` caps the events listed per item (all when None)."""
        r = self.recommendation
        return {
            "model": self.model,
            "user": self.user,
            "method": self.method,
            "shared": self.shared,
            "predicting_position": self.predicting,
            "history_length": self.history_length,
            "items_seen_by_model": self.window,
            "recommended": [
                {"item": i, "title": t, "score": s}
                for i, t, s in zip(r.items, r.titles, r.scores, strict=True)
            ],
            "attended": [a.__dict__ for a in self.attended],
            "self_weight": self.self_weight,
            "explanations": [e.to_dict(top) for e in self.explanations],
        }


def explain_recommendation(
    rec: Recommender,
    user: object | None = None,
    history: list[object] | None = None,
    *,
    k: int = 10,
    top: int = 10,
    method: str = DEFAULT_METHOD,
    item: object | None = None,
    reason_verb: str = DEFAULT_VERB,
    event_verbs: Mapping[str, str] | None = None,
    timestamps: list[float] | None = None,
    events: list[str] | None = None,
    ratings: list[float] | None = None,
    request_time: float | None = None,
) -> RecExplanation:
    """Recommend for ``user`` (or an ad-hoc ``history`` of external item IDs) and explain each item.

    ``method="attention"`` also ranks the history by the attention the predicting position put on
    it (``attended``, the first ``top``), shared by the whole top-``k`` list (see
    :func:`~attnrec.evaluation.attention.history_attention` for the rollout). Every method fills
    ``explanations`` with the ``top`` strongest events per item and a reason "Because you
    {reason_verb} ..." (the event types and times of a stored history, or of ``history``'s own ``timestamps``
    and ``events``, in each event and in the reason, worded by ``event_verbs``:
    :func:`~attnrec.recommend.reasons.reason`). ``timestamps``, ``events``, ``ratings`` and
    ``request_time`` are :meth:`~attnrec.recommend.Recommender.recommend`'s: they feed models trained
    with such inputs, and every re-scored variant keeps them aligned with its events. ``item``: explain that
    one item instead of the top-``k`` (it may rank anywhere; its score is the model's). Raises
    :class:`KeyError` for an unknown user without a history or an unknown ``item``, :class:`ValueError`
    (``AttributionError``) for an unknown method, a history without known items, or a method the model cannot
    support.
    """
    assert rec.items_ is not None and rec.users_ is not None and rec.histories_ is not None
    check_method(method)
    # the request as recommend() resolves it (same user index and history), checked before any scoring
    inputs = {"timestamps": timestamps, "events": events, "ratings": ratings, "request_time": request_time}
    p = rec._prepare({"user": user, "history": history} | inputs)
    if history is None and p.uid == UNKNOWN_USER and not len(p.hist):  # no events stored for it either
        raise KeyError(f"unknown user {user!r}")
    target = None if item is None else rec.items_.get(check_id("item", item))
    if item is not None and target is None:
        raise KeyError(f"unknown item {str(item)!r}")
    if len(p.hist) == 0:
        raise AttributionError("the history has no known items; there is nothing to explain")
    # the answer as recommend() gives it (with its ignored_inputs); ``item``: that one item, wherever it ranks
    r = rec.recommend(
        user=user,
        history=history,
        k=1 if item is not None else k,
        exclude_seen=item is None,
        include=None if item is None else [item],
        timestamps=timestamps,
        events=events,
        ratings=ratings,
        request_time=request_time,
    )
    found = rec._explain_items(p, r.items, method, reason_verb, event_verbs)  # as recommend(explain=...)
    window = max((len(e.events) for e in found), default=0) or min(len(p.hist), 1)  # events the model read
    found = [dataclasses.replace(e, events=e.events[:top]) for e in found]
    if method != "attention":
        return RecExplanation(rec.name, r.user, r, None, [], 0.0, len(p.hist), window, method, found)
    uid = max(p.uid, 0)  # an ad-hoc history is fed as user 0 (the attention models ignore it)
    att = history_attention(
        rec.core, p.hist, rec.items_, rec.titles_, name=rec.name, user=uid, device=rec.device
    )
    return RecExplanation(
        rec.name,
        None if user is None else str(user),
        r,
        att.predicting,
        att.attended[:top],
        att.self_weight,
        att.history_length,
        att.window,
        method,
        found,
    )


__all__ = ["RecExplanation", "explain_recommendation"]
