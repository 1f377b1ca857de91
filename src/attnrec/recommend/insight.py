"""A recommendation with the attention behind it: which history items drove it (self-attention models).

The attention itself is computed from the model in :mod:`attnrec.evaluation.attention`; this
module pairs it with the :class:`~attnrec.recommend.Recommender`'s answer for the same request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any  # JSON-ready dicts

from attnrec.evaluation.attention import AttendedItem, history_attention
from attnrec.recommend.recommender import Recommender
from attnrec.recommend.requests import UNKNOWN_USER, prepare
from attnrec.recommend.topk import Recommendation


@dataclass
class RecExplanation:
    """A recommendation and the history items that drove it, most attended first."""

    model: str
    user: str | None
    recommendation: Recommendation
    predicting: str
    attended: list[AttendedItem]
    self_weight: float  # last-layer attention of the predicting [mask] on itself (0 for SASRec)
    history_length: int
    window: int  # history items the model saw (the most recent ones)

    def to_dict(self) -> dict[str, Any]:
        r = self.recommendation
        return {"model": self.model, "user": self.user, "predicting_position": self.predicting,
                "history_length": self.history_length, "items_seen_by_model": self.window,
                "recommended": [{"item": i, "title": t, "score": s} for i, t, s in zip(r.items, r.titles, r.scores, strict=True)],
                "attended": [a.__dict__ for a in self.attended], "self_weight": self.self_weight}


def explain_recommendation(
    rec: Recommender,
    user: object | None = None,
    history: list[object] | None = None,
    *,
    k: int = 10,
    top: int = 10,
) -> RecExplanation:
    """Recommend for ``user`` (or an ad-hoc ``history`` of external item IDs) and rank the history
    items by the attention the predicting position put on them.

    Attention belongs to the predicting position, so the ranking is shared by the whole top-``k``
    list (see :func:`~attnrec.evaluation.attention.history_attention` for the rollout).
    """
    assert rec.items_ is not None and rec.users_ is not None and rec.histories_ is not None
    # the request as recommend() resolves it (same user index and history), checked before any scoring
    p = prepare({"user": user, "history": history}, rec.users_, rec.items_, rec.histories_)
    if history is None and p.uid == UNKNOWN_USER:
        raise KeyError(f"unknown user {user!r}")
    r = rec.recommend(user=user, history=history, k=k)
    uid, hist = max(p.uid, 0), p.hist  # an ad-hoc history is fed as user 0 (the attention models ignore it)
    att = history_attention(rec.core, hist, rec.items_, rec.titles_, name=rec.name, user=uid, device=rec.device)
    return RecExplanation(rec.name, None if user is None else str(user), r, att.predicting, att.attended[:top],
                          att.self_weight, att.history_length, att.window)


__all__ = ["RecExplanation", "explain_recommendation"]
