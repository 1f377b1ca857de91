"""Per-item explanations of a recommendation, in external IDs and titles, with a human-readable reason.

:func:`~attnrec.evaluation.attribution.attribute` works on internal indices; this module runs it for
the recommended items of one request and maps the result to what a person reads: for each item, the
history events with their attribution (``back`` = 0 for the most recent), strongest first, and a
short reason built from the top positive attributions ("Because you watched *Toy Story* and
*Aladdin*"). The verb is a parameter: a model trained on a movie log does not know it is movies.

Where the history has event types and timestamps (the request's, or a known user's stored ones), each
event also carries its type name and time, and the reason says what was done and when: "Because you
added *Lego Set* to your cart yesterday and viewed *Puzzle* 3 days ago" (:func:`reason`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any  # JSON-ready dicts

import numpy as np
import torch

from attnrec.data.schema import EVENT, TIMESTAMP, IdMap, event_names
from attnrec.data.signals import declared
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
# default list show, the same first choices as the benchmark's deeper ranking; 2 passes (W rows, then W per
# item)
DEFAULT_VERB = "interacted with"
MAX_EXPLAIN_K = 20  # the default bound on how many recommended items get an explanation
REASON_ITEMS = 2  # history items named in a reason
ITEM = "{item}"  # where a verb template puts the item: "added {item} to your cart"
DEFAULT_EVENT_VERBS: Mapping[str, str] = MappingProxyType(
    {
        "pv": "viewed",
        "cart": "added {item} to your cart",
        "fav": "saved",
        "buy": "bought",  # Taobao
        "clicks": "clicked",
        "carts": "added {item} to your cart",
        "orders": "ordered",  # OTTO
    }
)
"""Event type name -> the verb (or ``{item}`` template) of a reason, for the public logs attnrec reads."""
DAY = 86_400.0


@dataclass(frozen=True)
class ExplainedEvent:
    """One history event and its attribution for one recommended item."""

    item: str
    title: str | None
    back: int  # 0 = the most recent event of the history
    value: float  # larger: raised the item's score more (attention methods: attended to more)
    event: str | None = None  # the event's type name (e.g. "cart"); None when the history has no event types
    timestamp: float | None = None  # when it happened (unix seconds); None when the history has no times
    signals: dict[str, str | float | None] | None = (
        None  # its declared signals' values (attnrec.data.signals)
    )


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
        return {
            "item": self.item,
            "method": self.method,
            "shared": self.shared,
            "reason": self.reason,
            "events": [e.__dict__ for e in self.events[:top]],
            "note": self.note,
        }


def check_method(method: str) -> str:
    """``method`` when it is an attribution method, else :class:`AttributionError` naming the known ones."""
    if method not in METHODS:
        raise AttributionError(f"unknown explanation method {method!r}; choose one of {', '.join(METHODS)}")
    return method


MAX_VERB = 60  # characters of a verb or event-verb template


def check_verb(verb: str, what: str = "reason verb") -> str:
    """``verb`` stripped; a one-line ``ValueError`` naming ``what`` when it is empty, has control
    characters or is over :data:`MAX_VERB` characters (it goes into every reason shown to users)."""
    v = verb.strip() if isinstance(verb, str) else ""  # str(None) once made the verb "None"
    if not v or not v.isprintable() or len(v) > MAX_VERB:
        raise ValueError(
            f"{what} must be printable words such as 'watched' (at most {MAX_VERB} characters), not {verb!r}"
        )
    return v


def check_event_verbs(event_verbs: Mapping[str, str]) -> dict[str, str]:
    """``event_verbs`` (event name -> verb or template) stripped; a one-line ``ValueError`` for an empty
    name or verb, control characters, a verb over 60 characters, or braces other than one ``{item}``."""
    out: dict[str, str] = {}
    for name, template in event_verbs.items():
        n, t = str(name).strip(), str(template).strip()
        rest = t.replace(ITEM, "", 1)
        if not n or not t or not (n + t).isprintable() or len(t) > MAX_VERB or "{" in rest or "}" in rest:
            raise ValueError(
                f"event verb {name!r}={template!r}: expected an event name and printable words such as "
                "'viewed' or 'added {item} to your cart' (at most 60 characters, one {item} at most)"
            )
        out[n] = t
    return out


def relative_time(seconds: float) -> str:
    """``seconds`` ago in words: "today" (under a day, or in the future), "yesterday" (1-2 days),
    "N days ago" (under 14), "N weeks ago" (under 60 days), "N months ago" (30-day months, under 2
    years), else "N years ago"."""
    days = max(seconds, 0.0) / DAY
    if days < 1:
        return "today"
    if days < 2:
        return "yesterday"
    if days < 14:
        return f"{int(days)} days ago"
    if days < 60:
        return f"{int(days // 7)} weeks ago"
    if days < 730:
        return f"{int(days // 30)} months ago"
    return f"{int(days // 365)} years ago"


def event_template(event: str | None, verb: str, event_verbs: Mapping[str, str] | None = None) -> str:
    """The template (with one ``{item}``) a reason uses for an event of type ``event``:
    ``event_verbs[event]``, else :data:`DEFAULT_EVENT_VERBS`, else "``verb`` {item} (``event``)" ("interacted
    with *A* (view)"); ``verb`` alone for an event without a type. A verb without ``{item}`` means "verb
    {item}"."""
    if event is None:
        t = verb
    elif event_verbs is not None and event in event_verbs:
        t = event_verbs[event]
    elif event in DEFAULT_EVENT_VERBS:
        t = DEFAULT_EVENT_VERBS[event]
    else:
        return f"{verb} {ITEM} ({event})"
    return t if ITEM in t else f"{t} {ITEM}"


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _when(phrase: str, when: str | None) -> str:
    return phrase if when is None else f"{phrase} {when}"


def reason(
    events: list[ExplainedEvent],
    verb: str = DEFAULT_VERB,
    n: int = REASON_ITEMS,
    event_verbs: Mapping[str, str] | None = None,
    now: float | None = None,
) -> str | None:
    """ "Because you {verb} *A* and *B*" from the ``n`` strongest positive ``events`` (strongest first);
    an untitled item is named by its ID. None when no event has a positive attribution.

    Events with a type get its verb (:func:`event_template`: ``event_verbs``, then
    :data:`DEFAULT_EVENT_VERBS`, then "``verb`` *A* (type)"); items with the same verb share it, in the
    order of their strongest item ("Because you viewed *A* and *C* and added *B* to your cart").
    Events with a timestamp get the time before ``now`` in words (:func:`relative_time`; ``now``
    defaults to the newest of ``events``' timestamps, so pass the request time or the history's newest
    event): after each item for a verb that ends with the item ("viewed *A* yesterday and *B* 3 days
    ago"), else after the whole phrase, which is repeated per time ("added *A* to your cart today").
    Without types and timestamps the reason is "Because you {verb} *A* and *B*".
    """
    top = [e for e in events if e.value > 0][:n]
    if not top:
        return None
    if now is None:
        now = max((e.timestamp for e in events if e.timestamp is not None), default=None)
    groups: dict[
        str, dict[str | None, list[str]]
    ] = {}  # template -> time in words -> names, first seen first
    for e in top:
        when = None if e.timestamp is None or now is None else relative_time(now - e.timestamp)
        name = f"*{e.title}*" if e.title else f"item {e.item}"
        groups.setdefault(event_template(e.event, verb, event_verbs), {}).setdefault(when, []).append(name)
    phrases: list[str] = []
    for template, by_when in groups.items():
        if template.endswith(ITEM):  # the verb once: "viewed *A* yesterday and *B* 3 days ago"
            phrases.append(
                template.replace(ITEM, _and([_when(_and(names), w) for w, names in by_when.items()]), 1)
            )
        else:
            phrases += [_when(template.replace(ITEM, _and(names), 1), w) for w, names in by_when.items()]
    return f"Because you {_and(phrases)}"


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
    events: IdMap | None = None,
    event_verbs: Mapping[str, str] | None = None,
    request_time: float | None = None,
    vocabularies: Mapping[str, IdMap] | None = None,
) -> tuple[list[ItemExplanation], np.ndarray]:
    """Explanations of the internal ``targets`` ``(K,)`` for the internal ``history`` of ``user``, and the
    targets' scores ``(K,)`` (NaN where nothing was scored).

    An empty history (a popularity answer) or a single event under occlusion or greedy (without it the model
    has no input to score) gives explanations without events and a ``note`` saying why. ``columns``: the
    history's per-event columns (:data:`~attnrec.data.schema.COLUMN_DTYPES`), occluded with their events;
    their timestamps and event types (codes of the vocabulary ``events``, named by it) are copied onto
    each :class:`ExplainedEvent` and the reason says them (:func:`reason`, with ``event_verbs`` and
    ``request_time``, else the history's newest timestamp, as "now"); the declared signals' values too
    (categorical ones named by their ``vocabularies``; None for a value the model never saw). Raises
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
    att = attribute(
        model,
        history,
        targets,
        n_items=len(items),
        method=method,
        user=user,
        device=device,
        columns=columns,
        depth=GREEDY_DEPTH,
    )  # the history's per-event columns, occluded with their events
    ext = items.to_external(np.asarray(history)[att.events])
    back = len(history) - 1 - att.events
    stamps, kinds = _event_context(columns or {}, events, att.events)
    values = signal_values(columns or {}, vocabularies or {}, att.events)
    ts = (columns or {}).get(TIMESTAMP)
    now = (
        request_time if request_time is not None else float(ts.max()) if ts is not None and len(ts) else None
    )
    out = []
    for k, target in enumerate(ext_targets):
        found = [
            ExplainedEvent(
                ext[j],
                titles.get(ext[j]),
                int(back[j]),
                float(att.values[k, j]),
                kinds[j],
                stamps[j],
                values[j],
            )
            for j in att.ranking(k)
        ]
        out.append(
            ItemExplanation(
                target, method, att.shared, reason(found, verb, event_verbs=event_verbs, now=now), found
            )
        )
    return out, att.scores


def _event_context(
    columns: Mapping[str, np.ndarray], events: IdMap | None, positions: np.ndarray
) -> tuple[list[float | None], list[str | None]]:
    """The timestamps and event type names of the history ``positions`` (None where the columns lack them)."""
    ts, codes = columns.get(TIMESTAMP), columns.get(EVENT)
    none: list[None] = [None] * len(positions)
    stamps: list[float | None] = [*none] if ts is None else [float(t) for t in ts[positions]]
    names = None if codes is None or events is None else event_names(events, codes[positions])
    kinds: list[str | None] = [*none] if names is None else [x or None for x in names]  # "": padding, no type
    return stamps, kinds


def signal_values(
    columns: Mapping[str, np.ndarray], vocabularies: Mapping[str, IdMap], positions: np.ndarray
) -> list[dict[str, str | float | None] | None]:
    """Per history position, the values of the declared signals among ``columns`` (None without any):
    categorical ones named by their ``vocabularies`` (None for padding, a value the model never saw or a
    signal without a vocabulary), numeric ones as floats (None: not known)."""
    kinds = {s.name: s.kind for s in declared() if s.name in columns}
    if not kinds:
        return [None] * len(positions)
    out: list[dict[str, str | float | None] | None] = []
    for j in positions:
        row: dict[str, str | float | None] = {}
        for name, kind in kinds.items():
            value, vocabulary = columns[name][j], vocabularies.get(name)
            if kind != "categorical":  # a number (NaN: not known)
                row[name] = None if np.isnan(value) else float(value)
            elif vocabulary is None:  # codes of a vocabulary the model does not hold
                row[name] = None
            elif value >= vocabulary.offset:  # a code of the vocabulary (below: padding, unknown)
                row[name] = str(vocabulary.external[int(value) - vocabulary.offset])
            else:
                row[name] = None
        out.append(row)
    return out


__all__ = [
    "DEFAULT_EVENT_VERBS",
    "DEFAULT_METHOD",
    "DEFAULT_VERB",
    "GREEDY_DEPTH",
    "MAX_EXPLAIN_K",
    "ExplainedEvent",
    "ItemExplanation",
    "check_event_verbs",
    "check_method",
    "event_template",
    "explain_items",
    "reason",
    "relative_time",
    "signal_values",
]
