"""Turning a recommendation request (external IDs, options) into internal indices.

A request is a mapping of :meth:`~attnrec.recommend.Recommender.recommend`'s keyword arguments.
:func:`prepare` resolves it against the model's ID maps and stored histories once, so that the
scoring and top-k code works on integer arrays only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any  # request values are caller input of any type

import numpy as np

from attnrec.data.boundary import is_count, is_id
from attnrec.data.schema import IdMap
from attnrec.recommend.event_requests import (
    REQUEST_TIME,
    event_keys,
    request_columns,
    request_time_of,
    unsent_signals,
)
from attnrec.recommend.live import EMPTY, UNKNOWN_USER, LiveRow, merge

STORED_HISTORY = "stored_history"
#: The request keys besides the per-event fields (:func:`recommend_keys` adds those).
OPTION_KEYS = frozenset({"user", "history", "k", "exclude_seen", "include", "exclude", STORED_HISTORY})


def check_k(k: object, name: str = "k", least: int = 1) -> int:
    """``k`` as a number of items (of an answer; ``name`` another count, e.g. ``explain_k``): a whole number
    (a numpy integer too), at least ``least``; a one-line ``ValueError`` otherwise (``k=2.5`` or ``"3"``
    once became 2 and 3 without a word, ``explain_k=-1`` no explanation)."""
    if not is_count(k, least):
        raise ValueError(f"{name} must be a whole number of items, at least {least}, not {k!r}")
    return int(k)


def check_id(name: str, value: object) -> object:
    """``value`` when it can be an external ID by the rule of the training log's columns
    (:func:`attnrec.data.boundary.is_id`: text or a number); a one-line ``ValueError`` naming ``name``
    for a missing ID (None, NaN, empty text), a boolean, or a container (``user=[1]`` was the unknown
    user "[1]" and got the most popular items, and ``history=[1, None]`` scored the history [1],
    without a word)."""
    if is_id(value):
        return value
    raise ValueError(f"{name} must be an ID (text or a number), not {type(value).__name__} {value!r:.60}")


def check_list(name: str, value: object, what: str = "item IDs", *, ordered: bool = False) -> list[object]:
    """``value`` as a list: a list, tuple, array, Series or other iterable. A one-line ``ValueError``
    naming ``name`` and ``what`` it lists for a string (``history="1,2"`` was read as the three items
    ``"1"``, ``","`` and ``"2"``), a dict (its keys were the items) or, when the list is ``ordered`` (a
    history), a set (its order was the history's)."""
    unordered = isinstance(value, Mapping) or (ordered and isinstance(value, Set))
    if unordered or isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(f"{name} is a list of {what}, not {type(value).__name__} {value!r:.60}")
    return list(value)


def check_ids(name: str, value: object, *, ordered: bool = False) -> list[object] | None:
    """``value`` of the request key ``name`` (``history``: ``ordered``, ``include``, ``exclude``) as a list
    of item IDs (:func:`check_list`, :func:`check_id` each), or None."""
    if value is None:
        return None
    return [check_id(f"each of {name}", v) for v in check_list(name, value, ordered=ordered)]


def check_requests(requests: object) -> list[Mapping[str, Any]]:
    """``requests`` of :meth:`~attnrec.recommend.Recommender.recommend_many` as a list of mappings, each
    ``user`` an ID (:func:`check_id`); a one-line ``ValueError`` otherwise (a list of user IDs ended in an
    ``AttributeError``)."""
    if isinstance(requests, str | bytes | Mapping) or not isinstance(requests, Iterable):
        raise ValueError(
            f"requests is a list of dicts of recommend's arguments, not {type(requests).__name__}"
        )
    listed = list(requests)
    for i, request in enumerate(listed):
        if not isinstance(request, Mapping):
            kind = type(request).__name__
            raise ValueError(f"requests[{i}] is a dict of recommend's arguments, not {kind} {request!r:.60}")
        if request.get("user") is not None:
            check_id("user", request["user"])
    return listed


def recommend_keys() -> frozenset[str]:
    """Every key a recommendation request may have: the options, each signal's field, ``request_time``."""
    return OPTION_KEYS | set(event_keys()) | {REQUEST_TIME}


@dataclass
class Prepared:
    """One recommendation request resolved to internal indices."""

    uid: int  # internal user index, or UNKNOWN_USER
    hist: np.ndarray  # (T,) internal item indices, oldest first; empty: answered by popularity
    k: int
    banned: np.ndarray  # sorted unique internal indices never to return
    allowed: np.ndarray | None  # the only candidates (``include``), or None for the whole catalog
    user: str | None
    unknown: list[str]  # history items the model does not know
    fallback: str | None  # why the answer is not fully personalised, when it is not
    columns: dict[str, np.ndarray] = field(default_factory=dict)  # per-event columns aligned with ``hist``
    request_time: int | None = None  # when the request is made (seconds), if it says
    sent: frozenset[str] = (
        frozenset()
    )  # the per-event request fields it sent (to report those a model ignores)


def prepare(
    request: Mapping[str, Any],
    users: IdMap,
    items: IdMap,
    live: Mapping[str, LiveRow],
    events: IdMap | None = None,
    vocabularies: Mapping[str, IdMap] | None = None,
    reads: Sequence[str] = (),
) -> Prepared:
    """Resolve ``request`` against the ID maps, the users' stored histories ``live`` (by external user ID,
    with the per-event columns the model stored: :mod:`attnrec.recommend.live`; every user of a request
    that reads its stored history must be in it), the model's event vocabulary ``events``, its
    categorical signals' ``vocabularies`` and the declared signals it ``reads`` (one the history does
    not carry is "not known").

    A ``history`` sent with a ``user`` is appended to the user's stored history (in time order when both
    carry timestamps; only the per-event columns both carry are kept); ``stored_history=False`` scores the
    sent history alone (the user contributes only its index).

    Raises :class:`TypeError` for unknown keys and :class:`ValueError` for a ``k`` that is not a whole
    number of at least 1, a ``history``, ``include`` or ``exclude`` that is not a list of IDs
    (:func:`check_ids`), an ``exclude_seen`` or ``stored_history`` that is not a bool, a request with
    neither a user nor a history, or per-event fields that do not fit the history
    (:func:`~attnrec.recommend.event_requests.request_columns`).
    """
    known = recommend_keys()
    bad = set(request) - known
    if bad:
        raise TypeError(f"unknown recommend arguments: {sorted(bad)}; known: {sorted(known)}")
    user, history = request.get("user"), check_ids("history", request.get("history"), ordered=True)
    k = check_k(request.get("k", 10))
    uid, base, fallback = _who(user, history, users, live, stored_history(request))
    if history is not None:  # the request's own columns, of the known items, after the stored history
        given, unknown = items.split_known(history)
        keep = np.fromiter((items.get(x) is not None for x in history), dtype=bool, count=len(history))
        given_columns = unsent_signals(
            request_columns(request, history, keep, events, vocabularies), len(given), reads
        )
        hist, columns = merge([base.items, given], [base.columns, given_columns])
    else:  # the stored history and its columns; per-event fields without a history are refused
        request_columns(request, None, np.zeros(0, dtype=bool), events, vocabularies)
        hist, columns, unknown = base.items, base.columns, []
    columns = unsent_signals(columns, len(hist), reads)
    when = request_time_of(request, columns)
    sent = frozenset(k for k in (*event_keys(), REQUEST_TIME) if request.get(k) is not None)
    if len(hist) == 0 and (fallback is None or history is not None):
        fallback = "no known items in the history: most popular items"
    banned = [hist] if check_flag("exclude_seen", request.get("exclude_seen", True)) else []
    exclude, include = (
        check_ids("exclude", request.get("exclude")),
        check_ids("include", request.get("include")),
    )
    if exclude:
        banned.append(items.split_known(exclude)[0])
    allowed = None
    if include is not None:
        allowed = np.unique(items.split_known(include)[0])
    ban = np.unique(np.concatenate(banned)) if banned else np.zeros(0, dtype=np.int64)
    return Prepared(
        uid,
        hist,
        k,
        ban,
        allowed,
        None if user is None else str(user),
        unknown,
        fallback,
        columns,
        when,
        sent,
    )


def check_flag(name: str, value: object) -> bool:
    """``value`` of the switch ``name`` as a bool (numpy's too); a one-line ``ValueError`` otherwise
    (``exclude_seen="no"`` was true)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return bool(value)


def stored_history(request: Mapping[str, Any]) -> bool:
    """Whether ``request`` reads its user's stored history (``stored_history``, default true)."""
    return check_flag(STORED_HISTORY, request.get(STORED_HISTORY, True))


def _who(
    user: object, history: list[object] | None, users: IdMap, live: Mapping[str, LiveRow], stored: bool
) -> tuple[int, LiveRow, str | None]:
    """``(user index, stored history, fallback note)`` of a request's user.

    Without a user the history alone is scored. A known user contributes its index and (unless
    ``stored`` is false) its stored history, to which a given history is appended; an unknown user
    has the events stored for it, if any.
    """
    if user is None:
        if history is None:
            raise ValueError("give a user or a history")
        return UNKNOWN_USER, EMPTY, None
    if not stored:
        if history is None:
            raise ValueError("stored_history=false scores the given history alone: send a history")
        known = users.get(user)
        if known is None:
            return UNKNOWN_USER, EMPTY, f"unknown user {str(user)!r}: scored from the given history"
        return int(known), EMPTY, None
    row = live[str(user)]
    return row.uid, row, row.note(user, history is not None)


__all__ = [
    "OPTION_KEYS",
    "check_flag",
    "check_id",
    "check_ids",
    "check_list",
    "check_requests",
    "check_k",
    "Prepared",
    "STORED_HISTORY",
    "recommend_keys",
    "UNKNOWN_USER",
    "prepare",
    "stored_history",
]
