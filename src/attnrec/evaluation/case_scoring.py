"""Scoring the evaluation cases in batches and ranking their held-out items (for :mod:`.protocol`).

A scorer is any callable ``score(users, histories, request_time=None) -> Tensor[B, n_items + 1]``
(:class:`ScoreFn`; column 0 is padding); a candidate scorer scores given items only
(:class:`CandidateScoreFn`).
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING

import numpy as np
import torch

from attnrec.data.schema import TIMESTAMP, Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.candidates import (
    full_ranks,
    negatives_ahead,
    remove_non_candidates,
    sample_negatives,
    sampled_ranks,
    top_lists,
)
from attnrec.evaluation.metrics import TargetRanks
from attnrec.evaluation.window import TargetSets, target_positions

if TYPE_CHECKING:
    from attnrec.evaluation.protocol import Protocol


class ScoreFn(typing.Protocol):
    """Scores ``(B, I + 1)`` of ``users`` ``(B,)`` and their internal-index ``histories`` at
    ``request_time``."""

    def __call__(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor: ...


class CandidateScoreFn(typing.Protocol):
    """Scores ``(B, C)`` of the internal ``items`` ``(B, C)`` only (equal to those columns of a
    :class:`ScoreFn`)."""

    def __call__(
        self,
        users: np.ndarray,
        histories: Sequences,
        items: torch.Tensor,
        request_time: np.ndarray | None = None,
    ) -> torch.Tensor: ...


# Histories count at most this many positions when batches are sized (the longest model window here).
WINDOW = 200


def batch_bounds(lengths: np.ndarray, batch_size: int, batch_positions: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` bounds of consecutive batches over ``lengths`` sorted ascending: each batch as long
    as it holds at most ``batch_size`` rows and ``rows x width <= batch_positions`` (width: its longest
    length, capped at :data:`WINDOW`), and at least one row."""
    if batch_size < 1 or batch_positions < 1:
        raise ValueError(
            f"batch_size and batch_positions must be positive, not {batch_size} and {batch_positions}"
        )
    width = np.clip(np.asarray(lengths, dtype=np.int64), 1, WINDOW)  # (n,) nondecreasing
    out, lo, n = [], 0, len(width)
    while lo < n:
        w = width[lo : lo + batch_size]  # (R,) the widths of batches of 1..R rows
        fits = np.arange(1, len(w) + 1) * w <= batch_positions  # (R,) True then False: w nondecreasing
        hi = lo + max(1, int(fits.sum()))
        out.append((lo, hi))
        lo = hi
    return out


def rank_cases(
    scorer: ScoreFn,
    cases: EvalSet,
    protocol: Protocol,
    popularity: np.ndarray | None,
    batch_size: int,
    batch_positions: int,
    candidate_scorer: CandidateScoreFn | None,
    with_lists: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` each single-target case's rank and, ``with_lists``, ``(n, max k)`` its top list (else
    ``(n, 0)``)."""
    n = len(cases)
    n_items = cases.histories.n_items
    negatives = None
    if protocol.candidates == "sampled":
        if protocol.sampler == "popularity" and popularity is None:
            raise ValueError("popularity-sampled evaluation needs item popularity counts")
        weights = popularity if protocol.sampler == "popularity" else np.ones(n_items + 1)
        negatives = sample_negatives(
            cases, protocol.n_negatives, np.asarray(weights, dtype=np.float64), protocol.seed
        )
    ranks = np.empty(n, dtype=np.int64)
    lists = np.zeros((n, max(protocol.ks) if with_lists else 0), dtype=np.int64)
    # Cases in order of history length: a batch is padded to its longest history, so batches of
    # similar lengths pad (and attend over) far fewer positions; each case's score is the same.
    order = np.argsort(cases.histories.lengths(), kind="stable")
    times = request_times(cases, protocol.request_time)  # (n,) each case's request time, or None: none
    for lo, hi in batch_bounds(cases.histories.lengths()[order], batch_size, batch_positions):
        rows = order[lo:hi]
        hist = cases.histories.take(rows)
        targets = torch.as_tensor(cases.targets[rows])
        when = None if times is None else np.asarray(times[rows], dtype=np.int64)  # (B,)
        if negatives is not None and candidate_scorer is not None:
            neg = torch.as_tensor(negatives[rows])  # (B, n_neg), -1 = fewer candidates than asked
            items = torch.cat([targets[:, None], neg.clamp(min=0)], dim=1)  # (B, 1 + n_neg)
            with torch.no_grad():
                cand = candidate_scorer(cases.users[rows], hist, items, when).float().cpu()  # (B, 1 + n_neg)
            ranks[rows] = negatives_ahead(cand[:, 0], cand[:, 1:], neg).numpy()
            continue
        with torch.no_grad():
            scores = scorer(cases.users[rows], hist, when).float().cpu()  # (B, n_items + 1)
        if negatives is None:
            if with_lists:  # what the user is shown, whatever the target
                shown = remove_non_candidates(scores.clone(), hist, protocol.exclude_seen)
                lists[rows] = top_lists(shown, lists.shape[1])
            ranks[rows] = full_ranks(scores, hist, targets, protocol.exclude_seen).numpy()
        else:
            ranks[rows] = sampled_ranks(scores, targets, torch.as_tensor(negatives[rows])).numpy()
    return ranks, lists


def request_times(cases: EvalSet, rule: str) -> np.ndarray | None:
    """``(n,)`` int64 each case's request time under ``rule`` (``Protocol.request_time``), or None when the
    log has no timestamps. ``"previous"``: the newest timestamp of the case's history, the user's previous
    event (0 for a case without history: a model reads the request time at its newest position, and such
    a case has none); ``"target"``: the target's own timestamp (the upper bound)."""
    if rule == "target":
        targets = cases.target_columns.get(TIMESTAMP)
        return None if targets is None else np.asarray(targets, dtype=np.int64)
    times = cases.histories.columns.get(TIMESTAMP)
    if times is None:
        return None
    filled = cases.histories.lengths() > 0
    out = np.zeros(len(cases), dtype=np.int64)
    out[filled] = np.asarray(times, dtype=np.int64)[cases.histories.offsets[1:][filled] - 1]
    return out


def rank_target_sets(
    scorer: ScoreFn,
    cases: TargetSets,
    protocol: Protocol,
    batch_size: int,
    batch_positions: int,
    with_lists: bool,
) -> tuple[TargetRanks, np.ndarray]:
    """Each time-window case's targets' positions and, ``with_lists``, its top list; every case scored at the
    cut."""
    n = len(cases)
    lists = np.zeros((n, max(protocol.ks) if with_lists else 0), dtype=np.int64)
    positions = np.empty(len(cases.targets.items), dtype=np.int64)
    order = np.argsort(cases.histories.lengths(), kind="stable")
    for lo, hi in batch_bounds(cases.histories.lengths()[order], batch_size, batch_positions):
        rows = order[lo:hi]
        hist, targets = cases.histories.take(rows), cases.targets.take(rows)
        when = np.full(len(rows), int(cases.cut), dtype=np.int64)  # (B,) the request: at the cut time
        with torch.no_grad():
            scores = scorer(cases.users[rows], hist, when).float().cpu()  # (B, n_items + 1)
        remove_non_candidates(scores, hist, protocol.exclude_seen)
        if with_lists:
            lists[rows] = top_lists(scores, lists.shape[1])
        at = np.concatenate([np.arange(cases.targets.offsets[r], cases.targets.offsets[r + 1]) for r in rows])
        positions[at] = target_positions(scores, targets)
    return TargetRanks(cases.targets.offsets, positions), lists
