"""Where the held-out items land among the candidates: full-ranking and sampled-negative ranks.

Ties are counted against the model: a candidate scored the same as a target is ranked above it.
"""

from __future__ import annotations

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.data.split import EvalSet


def full_ranks(
    scores: torch.Tensor, hist: Sequences, targets: torch.Tensor, exclude_seen: bool
) -> torch.Tensor:
    """``(B,)`` each row's target's 0-based rank among the full-ranking candidates (changes ``scores``)."""
    b = scores.shape[0]
    target_scores = scores[torch.arange(b), targets].clone()  # (B,)
    remove_non_candidates(scores, hist, exclude_seen)
    # The target stays a candidate even when it repeats a history item; ties count against it.
    scores[torch.arange(b), targets] = -torch.inf
    ts = target_scores[:, None]
    return ((scores > ts) | (scores == ts)).sum(dim=1)


def sampled_ranks(scores: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    """``(B,)`` each row's target's rank among its ``negatives`` ``(B, n_neg)`` (0 = no negative)."""
    b = scores.shape[0]
    target_scores = scores[torch.arange(b), targets]  # (B,)
    return negatives_ahead(target_scores, scores.gather(1, negatives.clamp(min=0)), negatives)


def negatives_ahead(
    target_scores: torch.Tensor, neg_scores: torch.Tensor, negatives: torch.Tensor
) -> torch.Tensor:
    """Real negatives (index > 0) scoring at least the target's ``(B,)``: ties count against it."""
    ts = target_scores[:, None]  # (B, 1)
    return (((neg_scores > ts) | (neg_scores == ts)) & (negatives > 0)).sum(dim=1)


def sample_negatives(cases: EvalSet, n_neg: int, weights: np.ndarray, seed: int) -> np.ndarray:
    """``(n_cases, n_neg)`` distinct items per case, none in its history nor its target.

    Items are drawn in proportion to ``weights`` (index 0, padding, is never drawn) with
    replacement and duplicates dropped in draw order, which is exactly sampling without
    replacement. Rows whose catalog has fewer allowed items than ``n_neg`` are padded with 0.
    """
    rng = np.random.default_rng([seed, 2024])
    w = np.asarray(weights, dtype=np.float64).copy()
    w[0] = 0.0
    # Items with zero weight (never seen in training) get a tiny share so every item can be drawn.
    w = np.where(w > 0, w, 1e-12)
    w[0] = 0.0
    cdf = np.cumsum(w) / w.sum()
    n, n_items = len(cases), len(w) - 1
    hist = cases.histories
    stride = n_items + 1
    hist_rows = np.repeat(np.arange(n, dtype=np.int64), hist.lengths())
    forbidden = np.unique(
        np.concatenate([hist_rows * stride + hist.items, np.arange(n) * stride + cases.targets])
    )
    out = np.zeros((n, n_neg), dtype=np.int64)
    filled = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    draws = 3 * n_neg
    for _ in range(6):
        if not len(todo):
            break
        cand = np.searchsorted(cdf, rng.random((len(todo), draws)), side="right").clip(1, n_items)
        keys = todo[:, None] * stride + cand  # (R, draws)
        ok = ~_isin_sorted(keys, forbidden)
        # Drop repeats within a row, keeping the first draw (stable sort keeps order).
        order = np.argsort(keys, axis=1, kind="stable")
        sorted_keys = np.take_along_axis(keys, order, axis=1)
        dup_sorted = np.zeros_like(sorted_keys, dtype=bool)
        dup_sorted[:, 1:] = sorted_keys[:, 1:] == sorted_keys[:, :-1]
        dup = np.empty_like(dup_sorted)
        np.put_along_axis(dup, order, dup_sorted, axis=1)
        ok &= ~dup
        for r_local, r in enumerate(todo):
            picked = cand[r_local][ok[r_local]]
            # Also skip items this row already got in an earlier round.
            if filled[r]:
                picked = picked[~np.isin(picked, out[r, : filled[r]])]
            take = picked[: n_neg - filled[r]]
            out[r, filled[r] : filled[r] + len(take)] = take
            filled[r] += len(take)
        todo = todo[filled[todo] < n_neg]
        draws *= 2
    for r in todo:  # tiny catalogs: take every allowed item
        allowed = np.setdiff1d(np.arange(1, n_items + 1), out[r, : filled[r]])
        allowed = allowed[~_isin_sorted(r * stride + allowed, forbidden)]
        take = allowed[: n_neg - filled[r]]
        out[r, filled[r] : filled[r] + len(take)] = take
    return out


def _isin_sorted(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(sorted_keys, keys).clip(0, max(len(sorted_keys) - 1, 0))
    return sorted_keys[pos] == keys if len(sorted_keys) else np.zeros(keys.shape, dtype=bool)


def remove_non_candidates(scores: torch.Tensor, hist: Sequences, exclude_seen: bool) -> torch.Tensor:
    """``scores`` ``(B, I + 1)`` with ``-inf`` at the padding column and (with ``exclude_seen``) at each row's
    history items: the full-ranking candidates a user is shown. Changed in place and returned."""
    scores[:, 0] = -torch.inf
    if exclude_seen and len(hist.items):
        rows = torch.as_tensor(np.repeat(np.arange(scores.shape[0]), hist.lengths()))
        scores[rows, torch.as_tensor(hist.items)] = -torch.inf
    return scores


def top_lists(scores: torch.Tensor, k: int) -> np.ndarray:
    """``(B, k)`` each row's ``k`` best items, best first (0 in the slots past its candidates, which score
    ``-inf``)."""
    width = min(k, scores.shape[1])
    values, items = scores.topk(width, dim=1)
    lists = np.zeros((scores.shape[0], k), dtype=np.int64)
    lists[:, :width] = torch.where(values > -torch.inf, items, 0).numpy()
    return lists
