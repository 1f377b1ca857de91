"""Evaluation protocols: full ranking or ranking against sampled negatives, with a recorded protocol.

One evaluator serves validation and test. A scorer is any callable
``score(users, histories, request_time=None) -> Tensor[B, n_items + 1]`` (column 0 is padding and
is ignored; :class:`ScoreFn`). Under sampled negatives an optional candidate scorer
``score(users, histories, items, request_time=None) -> Tensor[B, C]`` scores only each case's
target and negatives ``items`` ``(B, C)``: the same ranks as the full scorer, without a score for
every item of a large catalog.

The request time: when the cases carry their targets' timestamps (``EvalSet.target_columns``), each
case is a request made at its target event's time, and the scorers get it as ``request_time``
``(B,)`` (a model that reads no time ignores it); the result records it (:attr:`EvalResult.request_time`).
"""

from __future__ import annotations

import dataclasses
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from attnrec.data.schema import TIMESTAMP, DataError, DataSource, Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.metrics import DEFAULT_KS, ranking_metrics, ranking_standard_errors


class ScoreFn(typing.Protocol):
    """Scores ``(B, I + 1)`` of ``users`` ``(B,)`` and their internal-index ``histories`` at ``request_time``."""

    def __call__(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor: ...


class CandidateScoreFn(typing.Protocol):
    """Scores ``(B, C)`` of the internal ``items`` ``(B, C)`` only (equal to those columns of a :class:`ScoreFn`)."""

    def __call__(
        self,
        users: np.ndarray,
        histories: Sequences,
        items: torch.Tensor,
        request_time: np.ndarray | None = None,
    ) -> torch.Tensor: ...


TARGET_TIME = "target timestamp"  # EvalResult.request_time when each case was scored at its target's time

DEFAULT_NEGATIVES = 100  # negatives per case of the papers' sampled protocols


@dataclass(frozen=True)
class Protocol:
    """How held-out items are ranked.

    ``candidates`` is ``"full"`` (rank against every item) or ``"sampled"`` (rank against
    ``n_negatives`` items drawn without replacement, ``"uniform"``-ly or in proportion to
    ``"popularity"``, never from the user's history nor the target). ``exclude_seen`` removes
    the user's history from the full-ranking candidates (the target is always kept).
    """

    candidates: str = "full"
    n_negatives: int = DEFAULT_NEGATIVES
    sampler: str = "uniform"
    exclude_seen: bool = True
    seed: int = 0
    ks: tuple[int, ...] = DEFAULT_KS

    def __post_init__(self) -> None:
        if self.candidates not in ("full", "sampled"):
            raise ValueError(f"candidates must be 'full' or 'sampled', not {self.candidates!r}")
        if self.sampler not in ("uniform", "popularity"):
            raise ValueError(f"sampler must be 'uniform' or 'popularity', not {self.sampler!r}")
        if self.n_negatives < 1:
            raise ValueError("n_negatives must be >= 1")
        if not self.ks or min(self.ks) < 1:
            raise ValueError("ks must be positive cut-offs")

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON values; full ranking leaves out ``n_negatives`` and ``sampler``, which it does not use."""
        d = asdict(self) | {"ks": list(self.ks)}
        if self.candidates == "full":
            del d["n_negatives"], d["sampler"]
        return d

    def describe(self) -> str:
        if self.candidates == "full":
            cand = "full ranking over all items"
        else:
            cand = f"{self.n_negatives} {self.sampler}-sampled negatives (seed {self.seed})"
        seen = "history excluded" if self.exclude_seen or self.candidates == "sampled" else "history kept"
        return f"{cand}, {seen}"


PROTOCOLS: dict[str, Protocol] = {
    "full": Protocol(),
    # every item a candidate, the history too: for logs that repeat themselves (shops, streams), where
    # removing the history but the target makes any repeated target compete with unseen items only
    "full-history": Protocol(exclude_seen=False),
    "sampled-uniform": Protocol(candidates="sampled", n_negatives=DEFAULT_NEGATIVES, sampler="uniform"),
    "sampled-popularity": Protocol(candidates="sampled", n_negatives=DEFAULT_NEGATIVES, sampler="popularity"),
}
"""The named protocols, as the CLI's ``--protocol`` and the benchmark configs spell them."""
FULL = PROTOCOLS["full"]
PAPER_SASREC = PROTOCOLS["sampled-uniform"]  # the SASRec paper's protocol
PAPER_BERT4REC = PROTOCOLS["sampled-popularity"]  # the BERT4Rec paper's protocol


def protocol_by_name(
    name: str, negatives: int = DEFAULT_NEGATIVES, seed: int = 0, ks: Sequence[int] = DEFAULT_KS
) -> Protocol:
    """The named protocol of :data:`PROTOCOLS` with ``negatives`` (sampled ones only), ``seed`` and ``ks``.

    >>> protocol_by_name("sampled-popularity", 10).describe()
    '10 popularity-sampled negatives (seed 0), history excluded'
    """
    base = PROTOCOLS.get(name)
    if base is None:
        raise ValueError(f"unknown protocol {name!r}; use {', '.join(PROTOCOLS)}")
    # Full ranking keeps the default count, so its recorded protocol does not depend on --negatives.
    n_negatives = negatives if base.candidates == "sampled" else base.n_negatives
    return dataclasses.replace(base, n_negatives=n_negatives, seed=seed, ks=tuple(ks))


@dataclass(frozen=True)
class EvalResult:
    """Metrics together with everything needed to compare them honestly."""

    metrics: dict[str, float]
    protocol: Protocol
    split: str
    target: str
    n_cases: int
    data: DataSource
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    standard_errors: dict[str, float] = field(default_factory=dict)  # per metric: sd of the cases / sqrt(n)
    # metrics of subsets of the cases (the cold-item protocol's "cold" and "warm" targets):
    # name -> {"n_cases", "metrics", "standard_errors"}
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what the scorers got as the request time: TARGET_TIME (each case's target timestamp) or "" (none)
    request_time: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["protocol"] = self.protocol.to_dict()
        d["protocol_text"] = self.describe()
        return d

    def describe(self) -> str:
        sha = self.data.sha256[:12] if self.data.sha256 else "n/a"
        groups = "".join(f", {g['n_cases']} with {name} targets" for name, g in self.groups.items())
        when = f", request time = {self.request_time}" if self.request_time else ""
        return (
            f"{self.target} on {self.data.name} (sha256 {sha}), split {self.split}, "
            f"{self.n_cases} users{groups}, {self.protocol.describe()}{when}"
        )


def evaluate(
    scorer: ScoreFn,
    cases: EvalSet,
    protocol: Protocol,
    *,
    popularity: np.ndarray | None = None,
    data: DataSource = DataSource("unnamed"),
    split: str = "",
    target: str = "test",
    batch_size: int = 256,
    batch_positions: int = 16384,
    candidate_scorer: CandidateScoreFn | None = None,
    groups: Mapping[str, np.ndarray] | None = None,
) -> EvalResult:
    """Rank each case's target under ``protocol`` and compute HR/NDCG/MRR.

    ``popularity`` (length ``n_items + 1``) is required for popularity-sampled negatives.
    ``candidate_scorer``, when given, scores only the target and the negatives under a sampled
    protocol (``scorer`` still serves full ranking). ``groups`` maps a name to a boolean mask of the
    cases (e.g. cold and warm targets): each group's metrics are reported too (:attr:`EvalResult.groups`).
    A batch holds at most ``batch_size`` cases and ``batch_positions`` history positions (a history
    counts as its length, at most :data:`WINDOW`): at ML-1M's length 200 that is about 80 cases,
    whose activations stay in the CPU's caches (twice as fast on 2 threads as 256 cases).
    When ``cases`` carry their targets' timestamps, each case is scored with its target's timestamp as
    ``request_time`` (the request is made when the target event happened), and the result says so.
    """
    start = time.perf_counter()
    n = len(cases)
    if n == 0:
        raise DataError(f"no {target} cases to evaluate")
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
    # Cases in order of history length: a batch is padded to its longest history, so batches of
    # similar lengths pad (and attend over) far fewer positions; each case's score is the same.
    order = np.argsort(cases.histories.lengths(), kind="stable")
    times = cases.target_columns.get(TIMESTAMP)  # (n,) the targets' times, or None: no request time
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
            ranks[rows] = _negatives_ahead(cand[:, 0], cand[:, 1:], neg).numpy()
            continue
        with torch.no_grad():
            scores = scorer(cases.users[rows], hist, when).float().cpu()  # (B, n_items + 1)
        if negatives is None:
            ranks[rows] = _full_ranks(scores, hist, targets, protocol.exclude_seen).numpy()
        else:
            ranks[rows] = _sampled_ranks(scores, targets, torch.as_tensor(negatives[rows])).numpy()
    metrics = ranking_metrics(ranks, protocol.ks)
    return EvalResult(
        metrics,
        protocol,
        split,
        target,
        n,
        data,
        time.perf_counter() - start,
        standard_errors=ranking_standard_errors(ranks, protocol.ks),
        groups=group_metrics(ranks, groups or {}, protocol.ks),
        request_time="" if times is None else TARGET_TIME,
    )


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


def group_metrics(
    ranks: np.ndarray, groups: Mapping[str, np.ndarray], ks: Sequence[int]
) -> dict[str, dict[str, Any]]:
    """Per named boolean mask of the cases: its case count, metrics and standard errors (NaN when empty)."""
    out: dict[str, dict[str, Any]] = {}
    for name, mask in groups.items():
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != ranks.shape:
            raise ValueError(f"group {name!r} masks {mask.shape[0]} cases, not {len(ranks)}")
        out[name] = {
            "n_cases": int(mask.sum()),
            "metrics": ranking_metrics(ranks[mask], ks),
            "standard_errors": ranking_standard_errors(ranks[mask], ks),
        }
    return out


def unscored_last(scorer: ScoreFn, n_items: int) -> ScoreFn:
    """``scorer`` with its score matrix widened to ``n_items + 1`` columns: items past its own catalogue
    (cold items a model has no row for, e.g. an ID-only model under the cold-item protocol) score
    ``-inf``, so such a target ranks behind every scored item (ties count against it)."""

    def score(
        users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor:
        s = scorer(users, histories, request_time)  # (B, n_model + 1)
        missing = n_items + 1 - s.shape[1]
        return s if missing <= 0 else torch.nn.functional.pad(s, (0, missing), value=-torch.inf)

    return score


def _full_ranks(
    scores: torch.Tensor, hist: Sequences, targets: torch.Tensor, exclude_seen: bool
) -> torch.Tensor:
    b = scores.shape[0]
    target_scores = scores[torch.arange(b), targets].clone()  # (B,)
    scores[:, 0] = -torch.inf
    if exclude_seen and len(hist.items):
        rows = torch.as_tensor(np.repeat(np.arange(b), hist.lengths()))
        scores[rows, torch.as_tensor(hist.items)] = -torch.inf
    # The target stays a candidate even when it repeats a history item; ties count against it.
    scores[torch.arange(b), targets] = -torch.inf
    ts = target_scores[:, None]
    return ((scores > ts) | (scores == ts)).sum(dim=1)


def _sampled_ranks(scores: torch.Tensor, targets: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
    b = scores.shape[0]
    target_scores = scores[torch.arange(b), targets]  # (B,)
    return _negatives_ahead(target_scores, scores.gather(1, negatives.clamp(min=0)), negatives)


def _negatives_ahead(
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


def format_metrics(metrics: dict[str, float], keys: Sequence[str] | None = None) -> str:
    """``HR@10 0.8245  NDCG@10 0.5905`` style one-liner."""
    keys = list(metrics) if keys is None else keys
    return "  ".join(f"{k} {metrics[k]:.4f}" for k in keys if k in metrics)
