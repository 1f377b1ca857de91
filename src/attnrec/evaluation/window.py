"""The time-window protocol's cases: every item a user interacts with in a window after a cut time.

A production report (and RecTools' time-range splitter) trains on the events before a cut time ``t``
and asks, for each user seen before ``t``, for the items the user interacts with in ``[t, t + w)``:
several held-out items per user, so Recall@k, Precision@k and MAP@k mean more than HR@k. Every case
is one request made at the cut time (the moment its history ends), so a time-aware model is scored
with ``t`` as its request time (:data:`WINDOW_START`), never with a target's own time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch

from attnrec.data.schema import DataError, IdMap, Interactions, Sequences
from attnrec.data.split import Split

WINDOW_START = "window start"  # EvalResult.request_time when every case was scored at the window's start
DAY = 86_400.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}


def parse_window(text: str) -> float:
    """A window length in seconds from ``"7d"``, ``"12h"``, ``"30m"``, ``"2w"`` or ``"3600"`` / ``"3600s"``.

    >>> parse_window("7d"), parse_window("1.5h"), parse_window("90")
    (604800.0, 5400.0, 90.0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text.lower())
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(
            f"window {text!r}: give a positive length such as 7d, 12h, 30m, 2w or 3600 (seconds)"
        )
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def window_text(seconds: float) -> str:
    """``604800`` -> ``"7d"``: the largest of days, hours and minutes that divides the length."""
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class TargetSets:
    """Multi-target evaluation cases: user ``users[r]`` with input ``histories[r]`` (its events before the
    cut time) must rank the items ``targets[r]`` (distinct, at least one), all at request time ``cut``."""

    users: np.ndarray  # (n,) int64
    histories: Sequences
    targets: Sequences
    cut: float  # the cut time (unix seconds): the window's start and every case's request time
    end: float  # the window's end (exclusive)

    def __post_init__(self) -> None:
        if not len(self.users) == self.histories.n_users == self.targets.n_users:
            raise ValueError("TargetSets: users, histories and targets must have one row per case")
        if np.any(self.targets.lengths() < 1):
            raise ValueError("TargetSets: every case needs at least one target")

    def __len__(self) -> int:
        return len(self.users)


def window_cases(
    data: Interactions, cut: float, window: float, *, end: float = math.inf, exclude_seen: bool = True
) -> TargetSets:
    """The cases of users with events both before ``cut`` and in ``[cut, min(cut + window, end))``.

    A case's history is every event of its user before ``cut``; its targets are the distinct items of the
    window, in order of first interaction, less (with ``exclude_seen``, RecTools' ``filter_already_seen``)
    the items already in its history, which full ranking removes from the candidates. Users with no
    history before the cut (cold users) or no target left are not cases.
    """
    if data.timestamp is None:
        raise DataError("the time-window protocol needs timestamps; this dataset has none")
    if not window > 0:
        raise ValueError(f"window must be a positive number of seconds, not {window}")
    seqs = data.sequences()
    ts = np.asarray(data.timestamp, dtype=np.float64)  # aligned with seqs (by user, then time)
    owner = seqs.owners()  # (M,) the user of each event
    history = seqs.select(ts < cut)
    inside = np.flatnonzero((ts >= cut) & (ts < min(cut + window, end)))
    # Distinct (user, item) pairs of the window, each at its first interaction (events are in time order).
    stride = seqs.n_items + 1
    _, first = np.unique(owner[inside] * stride + seqs.items[inside], return_index=True)
    pairs = inside[np.sort(first)]
    if exclude_seen and len(pairs):
        hist_keys = history.user_item_keys()
        pairs = pairs[~np.isin(owner[pairs] * stride + seqs.items[pairs], hist_keys)]
    pairs = pairs[np.argsort(owner[pairs], kind="stable")]  # by user, each user's in time order
    counts = np.bincount(owner[pairs], minlength=seqs.n_users)
    users = np.flatnonzero((counts > 0) & (history.lengths() > 0))
    keep = np.isin(owner[pairs], users)
    offsets = np.zeros(len(users) + 1, dtype=np.int64)
    np.cumsum(counts[users], out=offsets[1:])
    targets = Sequences(offsets, seqs.items[pairs[keep]], seqs.n_items)
    return TargetSets(users, history.take(users), targets, float(cut), float(min(cut + window, end)))


def split_window_cases(
    data: Interactions, split: Split, window: float, target: str = "test", exclude_seen: bool = True
) -> TargetSets:
    """:func:`window_cases` at a split's cut time: the test cut-off for ``target="test"``; the validation
    cut-off, with the window ending at the test cut-off at the latest, for ``"valid"``.

    Only a split with time cut-offs (the temporal split) has one: under any other the model has trained
    on events after every cut time one could name, and the window's targets would be training data.
    """
    key = {"test": "test_cutoff", "valid": "valid_cutoff"}.get(target)
    if key is None:
        raise ValueError(f"target must be test or valid, not {target!r}")
    if key not in split.params:
        raise DataError(
            f"the time-window protocol opens its window at the split's cut time; the {split.name} split has "
            "none (use the temporal split, whose model trains on the events before its cut-offs only)"
        )
    cut = float(split.params[key])
    end = float(split.params["test_cutoff"]) if target == "valid" else math.inf
    return window_cases(data, cut, window, end=end, exclude_seen=exclude_seen)


def align_target_sets(
    cases: TargetSets, data_users: IdMap, data_items: IdMap, model_users: IdMap, model_items: IdMap
) -> tuple[TargetSets, int]:
    """``cases`` in a model's indices (as :func:`attnrec.evaluation.alignment.align_cases` does for one
    target): unknown history items and targets are dropped, then cases with no target or an unknown user."""
    if model_items.to_list() == data_items.to_list() and model_users.to_list() == data_users.to_list():
        return cases, 0
    item_map = np.zeros(len(data_items) + 1, dtype=np.int64)  # data index -> model index (0: unknown)
    item_map[1:] = [model_items.get(i) or 0 for i in data_items.to_list()]
    user_map = np.array(
        [-1 if (u := model_users.get(x)) is None else u for x in data_users.to_list()], dtype=np.int64
    )
    targets = _mapped(cases.targets, item_map, len(model_items))
    rows = np.flatnonzero((user_map[cases.users] >= 0) & (targets.lengths() > 0))
    histories = _mapped(cases.histories.take(rows), item_map, len(model_items))
    aligned = TargetSets(user_map[cases.users[rows]], histories, targets.take(rows), cases.cut, cases.end)
    return aligned, len(cases) - len(rows)


def _mapped(seqs: Sequences, item_map: np.ndarray, n_items: int) -> Sequences:
    items = item_map[seqs.items]
    known = items > 0
    rows = seqs.owners()
    offsets = np.zeros(seqs.n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[known], minlength=seqs.n_users), out=offsets[1:])
    return Sequences(offsets, items[known], n_items)


def target_positions(scores: torch.Tensor, targets: Sequences, chunk: int = 1 << 24) -> np.ndarray:
    """``(T,)`` each target's 0-based position in its row's ranked list, ascending within a row: the
    non-target candidates scored at least as high (ties against the model) plus the row's targets
    ranked above it. ``scores`` ``(B, I + 1)`` already hold ``-inf`` where an item is no candidate
    (padding, excluded history); they are changed in place (the targets set to ``-inf``)."""
    rows = torch.as_tensor(targets.owners())
    items = torch.as_tensor(targets.items)
    target_scores = scores[rows, items].clone()  # (T,)
    scores[rows, items] = -torch.inf
    ahead = torch.empty(len(items), dtype=torch.int64)
    step = max(1, chunk // scores.shape[1])
    for lo in range(0, len(items), step):
        ts = target_scores[lo : lo + step, None]  # (c, 1)
        ahead[lo : lo + step] = (scores[rows[lo : lo + step]] >= ts).sum(dim=1)
    # Within a row the targets in order of fewer non-targets ahead (higher score); each also has the
    # row's targets before it ahead of it.
    order = np.lexsort((ahead.numpy(), rows.numpy()))
    nth = np.arange(len(items)) - np.repeat(targets.offsets[:-1], targets.lengths())
    return np.asarray(ahead.numpy()[order] + nth, dtype=np.int64)
