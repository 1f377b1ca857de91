"""Per-item explanations of a recommendation, in external IDs and titles, with a human-readable reason.

:func:`~attnrec.evaluation.attribution.attribute` works on internal indices; this module runs it for
the recommended items of one request and maps the result to what a person reads: for each item, the
history events with their attribution (``back`` = 0 for the most recent), strongest first, and a
short reason built from the top positive attributions ("Because you watched *Toy Story* and
*Aladdin*"). The verb is a parameter: a model trained on a movie log does not know it is movies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any  # JSON-ready dicts

import numpy as np
import torch

from attnrec.data.schema import IdMap
from attnrec.evaluation.attribution import (
    METHODS,
    SHARED_METHODS,
    AttributableModel,
    AttributionError,
    attribute,
    cannot_attribute,
)
from attnrec.models.contracts import capabilities

DEFAULT_METHOD = "greedy"  # the most faithful in benchmarks/results/faithfulness.md (deletion and insertion)
GREEDY_DEPTH = 3  # events greedy chooses in rounds for a served explanation: the top 3 a reason and the
# default list show, the same first choices as the benchmark's deeper ranking; 2 passes (W rows, then W per item)
DEFAULT_VERB = "interacted with"
MAX_EXPLAIN_K = 20  # the default bound on how many recommended items get an explanation
REASON_ITEMS = 2  # history items named in a reason


@dataclass(frozen=True)
class ExplainedEvent:
    """One history event and its attribution for one recommended item."""

    item: str
    title: str | None
    back: int  # 0 = the most recent event of the history
    value: float  # larger: raised the item's score more (attention methods: attended to more)


@dataclass(frozen=True)
class ItemExplanation:
    """Why one item was recommended: the history events behind it, strongest first, and a reason."""

    item: str
    method: str
    shared: bool  # the same events for every recommended item (the attention methods)
    reason: str | None  # None when no event raised the item's score
    events: list[ExplainedEvent] = field(default_factory=list)
    note: str | None = None  # why there are no events, when there are none

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        """JSON-ready form with the ``top`` strongest events (all when None)."""
        return {"item": self.item, "method": self.method, "shared": self.shared, "reason": self.reason,
                "events": [e.__dict__ for e in self.events[:top]], "note": self.note}


def check_method(method: str) -> str:
    """``method`` when it is an attribution method, else :class:`AttributionError` naming the known ones."""
    if method not in METHODS:
        raise AttributionError(f"unknown explanation method {method!r}; choose one of {', '.join(METHODS)}")
    return method


def reason(events: list[ExplainedEvent], verb: str = DEFAULT_VERB, n: int = REASON_ITEMS) -> str | None:
    """"Because you {verb} *A* and *B*" from the ``n`` strongest positive ``events`` (strongest first);
    an untitled item is named by its ID. None when no event has a positive attribution."""
    names = [f"*{e.title}*" if e.title else f"item {e.item}" for e in events if e.value > 0][:n]
    if not names:
        return None
    joined = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"Because you {verb} {joined}"


def explain_items(
    model: AttributableModel,
    history: np.ndarray,
    targets: np.ndarray,
    *,
    user: int,
    items: IdMap,
    titles: Mapping[str, str],
    method: str = DEFAULT_METHOD,
    verb: str = DEFAULT_VERB,
    device: torch.device | None = None,
    columns: Mapping[str, np.ndarray] | None = None,
) -> tuple[list[ItemExplanation], np.ndarray]:
    """Explanations of the internal ``targets`` ``(K,)`` for the internal ``history`` of ``user``, and the
    targets' scores ``(K,)`` (NaN where nothing was scored).

    An empty history (a popularity answer) or a single event under occlusion or greedy (without it the model
    has no input to score) gives explanations without events and a ``note`` saying why. Raises
    :class:`AttributionError` for an unknown method or one the model cannot support.
    """
    check_method(method)
    why = cannot_attribute(capabilities(model), method)  # before the notes below: POP gets no empty answer
    if why is not None:
        raise AttributionError(f"this model {why}")
    targets = np.asarray(targets, dtype=np.int64)
    ext_targets = items.to_external(targets)
    note = None
    if len(history) == 0:
        note = "no known history items: nothing to attribute"
    elif method in ("occlusion", "greedy") and len(history) == 1:
        note = f"{method} needs at least two history events: without the only one the model has no input"
    if note is not None:
        empty = [ItemExplanation(t, method, method in SHARED_METHODS, None, [], note) for t in ext_targets]
        return empty, np.full(len(targets), np.nan)
    att = attribute(model, history, targets, n_items=len(items), method=method, user=user, device=device,
                    columns=columns, depth=GREEDY_DEPTH)  # the history's per-event columns, occluded with their events
    ext = items.to_external(np.asarray(history)[att.events])
    back = len(history) - 1 - att.events
    out = []
    for k, target in enumerate(ext_targets):
        events = [ExplainedEvent(ext[j], titles.get(ext[j]), int(back[j]), float(att.values[k, j]))
                  for j in att.ranking(k)]
        out.append(ItemExplanation(target, method, att.shared, reason(events, verb), events))
    return out, att.scores


__all__ = [
    "DEFAULT_METHOD", "DEFAULT_VERB", "GREEDY_DEPTH", "MAX_EXPLAIN_K", "ExplainedEvent", "ItemExplanation",
    "check_method", "explain_items", "reason",
]
