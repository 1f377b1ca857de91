"""Turning a recommendation request (external IDs, options) into internal indices.

A request is a mapping of :meth:`~attnrec.recommend.Recommender.recommend`'s keyword arguments.
:func:`prepare` resolves it against the model's ID maps and stored histories once, so that the
scoring and top-k code works on integer arrays only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any  # request values are caller input of any type

import numpy as np

from attnrec.data.schema import IdMap, Sequences
from attnrec.recommend.event_requests import (
    EVENT_KEYS,
    REQUEST_TIME,
    request_columns,
    request_time_of,
    stored_columns,
)

RECOMMEND_KEYS = frozenset(
    {"user", "history", "k", "exclude_seen", "include", "exclude", *EVENT_KEYS, REQUEST_TIME}
)
UNKNOWN_USER = -1  # no known user: models with user embeddings fold the history in (models/_baselines.py)


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
    request: Mapping[str, Any], users: IdMap, items: IdMap, histories: Sequences, events: IdMap | None = None
) -> Prepared:
    """Resolve ``request`` against the ID maps, the stored ``histories`` (one row per known user, with the
    per-event columns the model stored) and the model's event vocabulary ``events``.

    Raises :class:`TypeError` for unknown keys and :class:`ValueError` for ``k < 1``, a request with
    neither a user nor a history, or per-event fields that do not fit the history
    (:func:`~attnrec.recommend.event_requests.request_columns`).
    """
    bad = set(request) - RECOMMEND_KEYS
    if bad:
        raise TypeError(f"unknown recommend arguments: {sorted(bad)}; known: {sorted(RECOMMEND_KEYS)}")
    user, history = request.get("user"), request.get("history")
    k = int(request.get("k", 10))
    if k < 1:
        raise ValueError("k must be at least 1")
    uid, hist, unknown, fallback = _who(user, history, users, items, histories)
    if history is not None:  # the request's own columns, of the known items (as ``hist``)
        keep = np.fromiter((items.get(x) is not None for x in history), dtype=bool, count=len(history))
        columns = request_columns(request, history, keep, events)
    else:  # a known user's stored columns; per-event fields without a history are refused
        request_columns(request, None, np.zeros(0, dtype=bool), events)
        columns = stored_columns(histories, uid) if uid != UNKNOWN_USER else {}
    when = request_time_of(request, columns)
    sent = frozenset(k for k in (*EVENT_KEYS, REQUEST_TIME) if request.get(k) is not None)
    if len(hist) == 0 and (fallback is None or history is not None):
        fallback = "no known items in the history: most popular items"
    banned = [hist] if request.get("exclude_seen", True) else []
    if request.get("exclude"):
        banned.append(items.split_known(request["exclude"])[0])
    allowed = None
    if request.get("include") is not None:
        allowed = np.unique(items.split_known(request["include"])[0])
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


def _who(
    user: object, history: list[object] | None, users: IdMap, items: IdMap, histories: Sequences
) -> tuple[int, np.ndarray, list[str], str | None]:
    """``(user index, history, unknown history items, fallback note)`` of a request's user and history.

    A given history is what is scored (a known user only contributes its index); without one, a
    known user's stored history is used, and an unknown user gets an empty one (popularity).
    """
    if history is not None:
        hist, unknown = items.split_known(history)
        if user is None:
            return UNKNOWN_USER, hist, unknown, None
        known = users.get(user)
        if known is None:
            return UNKNOWN_USER, hist, unknown, f"unknown user {user!r}: scored from the given history"
        return int(known), hist, unknown, None
    if user is None:
        raise ValueError("give a user or a history")
    idx = users.get(user)
    if idx is None:
        return UNKNOWN_USER, np.zeros(0, dtype=np.int64), [], f"unknown user {user!r}: most popular items"
    return int(idx), histories[idx], [], None


__all__ = ["Prepared", "RECOMMEND_KEYS", "UNKNOWN_USER", "prepare"]
