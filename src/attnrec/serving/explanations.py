"""Explanations in the HTTP answers: which served models can explain with which method, and the JSON shapes.

Shared by ``POST /v1/recommend`` (its optional ``explain``) and ``POST /v1/explain-rec``. A model that
cannot explain with a method is answered 501 ``cannot_explain`` before any work; the reason per
item comes from :mod:`attnrec.recommend.reasons` with the server's ``reason_verb`` and ``event_verbs``.
"""

from __future__ import annotations

from dataclasses import asdict

from attnrec.evaluation.attribution import cannot_attribute
from attnrec.recommend import Recommender
from attnrec.recommend.reasons import ItemExplanation
from attnrec.serving.ann import ApproximateRecommender
from attnrec.serving.api_errors import ApiError
from attnrec.serving.model_table import ServedModel
from attnrec.serving.schemas import Attribution, Explanation


def explaining(e: ServedModel, method: str) -> Recommender:
    """The exact recommender ``e`` serves when it can explain with ``method``, else 501 ``cannot_explain``."""
    obj = e.obj
    if isinstance(obj, ApproximateRecommender):
        why = "is served with approximate retrieval; explanations need the exact recommender"
    elif not isinstance(obj, Recommender):
        why = f"({type(obj).__name__}) does not recommend from a history"
    elif e.loaded is not None and e.loaded.backend == "onnx":
        why = (
            f"({obj.name}) runs on the onnx backend, which does not expose attention weights or gradients; "
            "serve it with --backend torch to explain its recommendations"
        )
    else:
        found = cannot_attribute(obj.capabilities, method)
        if found is None:
            return obj
        why = f"({obj.name}) {found}"
    raise ApiError(
        501,
        "cannot_explain",
        f"model {e.name!r} {why} (method {method!r})",
        [{"loc": "method", "message": "not supported by this model"}],
    )


def because(ex: ItemExplanation, top: int) -> list[Attribution]:
    """The ``top`` strongest history events of ``ex`` as the response's ``because`` list (each event's fields
    under their names, its ``value`` as ``weight``)."""
    listed = []
    for event in ex.events[:top]:
        given = asdict(event)
        listed.append(Attribution(weight=given.pop("value"), **given))
    return listed


def explanation(ex: ItemExplanation | None, top: int) -> Explanation | None:
    """``ex`` as a recommended item's ``explanation`` (None past the explained items)."""
    if ex is None:
        return None
    return Explanation(
        method=ex.method, shared=ex.shared, reason=ex.reason, because=because(ex, top), note=ex.note
    )


__all__ = ["because", "explaining", "explanation"]
