"""Replaying a timestamped log as a server meets it: each next event of a user is a case, answered with
what the server knows at that moment (the user's events before it, a request time that is never the
event's own), ranked over the answering model's items.

This is the protocol of the between-retrains replay benchmark (``benchmarks/replay.py``) and of
:func:`attnrec.experiments.retrain_plan.plan_retrain`, which replays a log's last periods to choose the
nightly fine-tune. A :class:`Log` holds the events in the log's own (global) item indices; a
:class:`Plan` cuts time into periods; :func:`replay_cases` lists the cases; :func:`model_ranks` ranks
their targets under a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from attnrec.data.schema import Interactions, Sequences

if TYPE_CHECKING:
    from attnrec.recommend import Recommender

K = 10  # the cut-off of HR@K and NDCG@K


@dataclass(frozen=True)
class Log:
    """A log in global indices, ordered by user then time (the order of :class:`Interactions`)."""

    user: np.ndarray  # (N,) int64
    item: np.ndarray  # (N,) int64, 1..n_items
    time: np.ndarray  # (N,) int64 seconds
    n_items: int

    @classmethod
    def of(cls, data: Interactions) -> Log:
        """The events of ``data`` (which must have timestamps), times floored to whole seconds."""
        if data.timestamp is None:
            raise ValueError("the log has no timestamps; a replay cuts it by time")
        return cls(
            data.user.astype(np.int64),
            data.item.astype(np.int64),
            np.floor(data.timestamp).astype(np.int64),
            data.n_items,
        )

    def user_starts(self) -> np.ndarray:
        """(N,) the index of the first event of each event's user."""
        first = np.r_[True, self.user[1:] != self.user[:-1]]
        return np.maximum.accumulate(np.where(first, np.arange(len(self.user)), 0))

    def before(self, t: int) -> Log:
        """The events before time ``t``, in the same order."""
        keep = self.time < t
        return Log(self.user[keep], self.item[keep], self.time[keep], self.n_items)


@dataclass(frozen=True)
class Plan:
    """The cut and the step boundaries: step ``s`` covers ``[bounds[s], bounds[s + 1])``."""

    cut: int
    step: int
    bounds: tuple[int, ...]

    @property
    def n_steps(self) -> int:
        return len(self.bounds) - 1


def choose_within(ndcg: Sequence[float], cpu: Sequence[float], limit: float) -> int:
    """The index of the best ``ndcg`` (ties: the smaller ``cpu``) among the candidates whose ``cpu`` is at
    most ``limit``; of the cheapest when none is."""
    within = [i for i, c in enumerate(cpu) if c <= limit]
    if not within:
        return min(range(len(cpu)), key=lambda i: cpu[i])
    return max(within, key=lambda i: (ndcg[i], -cpu[i]))


@dataclass(frozen=True)
class Cases:
    """The replayed events answered, with what the server knows for each."""

    pos: np.ndarray  # (C,) index of the target event in the log
    start: np.ndarray  # (C,) index of the user's first event
    frozen_end: np.ndarray  # (C,) index past the user's last event before the cut
    step: np.ndarray  # (C,) the step the target falls in
    request_time: (
        np.ndarray
    )  # (C,) the previous event's time, or the step start when later and before the target
    target: np.ndarray  # (C,) global item
    counts: dict[str, int]  # replayed events, first events, repeats, cases
    exclude_seen: bool = True  # answers leave out the history's items (and repeats are no cases)

    def live(self, log: Log, c: int) -> np.ndarray:
        """Global items of case ``c``'s live history: every event of its user before the target."""
        return log.item[self.start[c] : self.pos[c]]

    def frozen(self, log: Log, c: int) -> np.ndarray:
        """Global items of case ``c``'s frozen history: its user's events before the cut."""
        return log.item[self.start[c] : self.frozen_end[c]]

    def take(self, keep: np.ndarray) -> Cases:
        return Cases(
            self.pos[keep],
            self.start[keep],
            self.frozen_end[keep],
            self.step[keep],
            self.request_time[keep],
            self.target[keep],
            self.counts,
            self.exclude_seen,
        )


def replay_cases(log: Log, plan: Plan, keep_repeats: bool = False) -> Cases:
    """Every event at or after the cut that has a history and is not a repeat (with ``keep_repeats``, repeats
    too; then no answer excludes the history), with its request time."""
    starts = log.user_starts()
    replayed = np.flatnonzero(log.time >= plan.cut)
    pos, start, frozen_end, step, request, n_first, n_repeat = [], [], [], [], [], 0, 0
    before_cut: dict[int, int] = {}
    for p in replayed:
        s = int(starts[p])
        if s not in before_cut:  # the user's events before the cut end at its first replayed event
            before_cut[s] = int(p)
        if p == s:
            n_first += 1
            continue
        if log.item[p] in set(log.item[s:p].tolist()):
            n_repeat += 1
            if not keep_repeats:
                continue
        k = min(int(np.searchsorted(plan.bounds, log.time[p], side="right")) - 1, plan.n_steps - 1)
        pos.append(p)
        start.append(s)
        frozen_end.append(before_cut[s])
        step.append(k)
        # the step start counts only when it precedes the target: the target's own time is never used
        start_k = plan.bounds[k] if plan.bounds[k] < log.time[p] else int(log.time[p - 1])
        request.append(max(int(log.time[p - 1]), start_k))
    pos_a = np.asarray(pos, dtype=np.int64)
    counts = {"replayed": len(replayed), "first": n_first, "repeat": n_repeat, "cases": len(pos)}
    return Cases(
        pos_a,
        np.asarray(start, dtype=np.int64),
        np.asarray(frozen_end, dtype=np.int64),
        np.asarray(step, dtype=np.int64),
        np.asarray(request, dtype=np.int64),
        log.item[pos_a] if len(pos_a) else np.zeros(0, dtype=np.int64),
        counts,
        not keep_repeats,
    )


def pessimistic_ranks(scores: torch.Tensor, targets: torch.Tensor, exclude: list[np.ndarray]) -> np.ndarray:
    """0-based ranks of ``targets`` (B,) among the columns of ``scores`` (B, I+1) after column 0 and each
    row's ``exclude`` items are removed; ties count against the target; a target 0 (unknown) gets -1."""
    scores = scores.clone()
    scores[:, 0] = -torch.inf
    rows = np.repeat(np.arange(len(exclude)), [len(e) for e in exclude])
    if len(rows):
        scores[torch.from_numpy(rows), torch.from_numpy(np.concatenate(exclude))] = -torch.inf
    own = scores.gather(1, targets[:, None])  # (B, 1)
    ranks = (scores >= own).sum(1) - 1  # the target itself is >= own
    ranks[targets == 0] = -1
    return ranks.numpy()


def summary(ranks: np.ndarray) -> dict[str, float]:
    """Sums over cases: hits and NDCG@K (rank -1 = a miss)."""
    hit = (ranks >= 0) & (ranks < K)
    gain = np.where(hit, 1.0 / np.log2(np.maximum(ranks, 0) + 2.0), 0.0)
    return {"hits": float(hit.sum()), "ndcg": float(gain.sum())}


def to_model(rec: Recommender, external: np.ndarray) -> np.ndarray:
    """(n_items + 1,) the answering model's index of each global item (0: unknown to it)."""
    out = np.zeros(len(external) + 1, dtype=np.int64)
    for g, ext in enumerate(external, start=1):
        assert rec.items_ is not None
        j = rec.items_.get(ext)
        out[g] = 0 if j is None else j
    return out


def model_ranks(
    rec: Recommender, log: Log, cases: Cases, histories: str, g2m: np.ndarray, batch: int = 256
) -> np.ndarray:
    """Ranks of the cases' targets under ``rec`` with ``histories`` ("live" or "frozen"); ``g2m`` maps
    the log's items to the model's (:func:`to_model`). A history with no item the model knows is
    answered with the model's training popularity."""
    assert rec.items_ is not None
    history_of: Callable[[Log, int], np.ndarray] = cases.live if histories == "live" else cases.frozen
    n_items = int(rec.items_.offset + len(rec.items_) - 1)
    popular = torch.as_tensor(np.asarray(rec.popularity_, dtype=np.float32))  # (I+1,)
    out = []
    for lo in range(0, len(cases.pos), batch):
        rows = range(lo, min(lo + batch, len(cases.pos)))
        hist = [g2m[history_of(log, c)] for c in rows]
        hist = [h[h > 0] for h in hist]
        empty = np.array([len(h) == 0 for h in hist])
        seqs = Sequences.from_lists([h if len(h) else [1] for h in hist], n_items)
        users = np.zeros(len(hist), dtype=np.int64)
        scores = rec.score_histories(users, seqs, cases.request_time[lo : rows.stop].astype(np.int64))
        scores = scores.detach().float().cpu()
        if empty.any():
            scores[torch.from_numpy(empty)] = popular
        targets = torch.from_numpy(g2m[cases.target[lo : rows.stop]])
        seen = [np.unique(h) if cases.exclude_seen else h[:0] for h in hist]
        out.append(pessimistic_ranks(scores, targets, seen))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


__all__ = [
    "K",
    "Cases",
    "Log",
    "Plan",
    "choose_within",
    "model_ranks",
    "pessimistic_ranks",
    "replay_cases",
    "summary",
    "to_model",
]
