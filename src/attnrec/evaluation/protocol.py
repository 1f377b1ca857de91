"""Evaluation protocols: full ranking or ranking against sampled negatives, with a recorded protocol.

Single-target protocols rank each case's one held-out item (the split's test or validation target); the
time-window protocol (``window`` > 0) ranks every item a user interacts with in a window after the
split's cut time (:mod:`attnrec.evaluation.window`), where Recall, Precision and MAP mean more than HR.

One evaluator serves validation and test. A scorer is any callable
``score(users, histories, request_time=None) -> Tensor[B, n_items + 1]`` (column 0 is padding and
is ignored; :class:`ScoreFn`). Under sampled negatives an optional candidate scorer
``score(users, histories, items, request_time=None) -> Tensor[B, C]`` scores only each case's
target and negatives ``items`` ``(B, C)``: the same ranks as the full scorer, without a score for
every item of a large catalog.

The request time: on a timestamped log each case is a request made when a server would make it, at
the time of the user's previous event (the newest timestamp of the case's history), and the scorers
get it as ``request_time`` ``(B,)`` (a model that reads no time ignores it). The target event's own
timestamp is information no server has before the click: it is available only as a named upper bound
(``Protocol.request_time = "target"``, the protocol ``full-target-time``), labelled as one wherever it
is shown. Under the time-window protocol every case is a request made at the window's start. The
result records which (:attr:`EvalResult.request_time`; :data:`REQUEST_TIMES`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from attnrec.data.schema import DataError, DataSource, Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.case_scoring import (
    CandidateScoreFn,
    ScoreFn,
    rank_cases,
    rank_target_sets,
    request_times,
)
from attnrec.evaluation.list_metrics import ItemVectors, list_metrics
from attnrec.evaluation.metrics import (
    DEFAULT_FAMILIES,
    DEFAULT_KS,
    LIST_FAMILIES,
    RANKING_FAMILIES,
    TargetRanks,
    parse_families,
    ranking_metrics,
    ranking_standard_errors,
)
from attnrec.evaluation.window import WINDOW_START, TargetSets, window_text

# Protocol.request_time -> what EvalResult.request_time records (and tables show) for it
REQUEST_TIMES: dict[str, str] = {
    # what a server knows: the user's newest event before the target
    "previous": "previous event's timestamp",
    # known only after the click: not a deployable setting
    "target": "upper bound: the target's own timestamp",
}
DEFAULT_REQUEST_TIME = "previous"
PREVIOUS_TIME = REQUEST_TIMES["previous"]
TARGET_TIME = REQUEST_TIMES["target"]
LEGACY_TARGET_TIME = (
    "target timestamp"  # what results written before the honest default recorded for "target"
)

DEFAULT_NEGATIVES = 100  # negatives per case of the papers' sampled protocols
DEFAULT_WINDOW = 7 * 86_400.0  # seconds: the time-window protocol's week


@dataclass(frozen=True)
class Protocol:
    """How held-out items are ranked.

    ``candidates`` is ``"full"`` (rank against every item) or ``"sampled"`` (rank against
    ``n_negatives`` items drawn without replacement, ``"uniform"``-ly or in proportion to
    ``"popularity"``, never from the user's history nor the target). ``exclude_seen`` removes
    the user's history from the full-ranking candidates (the target is always kept).
    ``window`` > 0 (seconds; full ranking only) makes it the time-window protocol: the targets are
    every item a user interacts with in ``[cut, cut + window)`` after the split's cut time (with
    ``exclude_seen``, those not already in the history), each case a request made at the cut time.
    ``request_time`` (single-target protocols on timestamped logs): ``"previous"``, each case is scored at
    its history's newest timestamp (what a server knows), or ``"target"``, at the target's own timestamp:
    an upper bound no server can reach, described as one (:data:`REQUEST_TIMES`).
    """

    candidates: str = "full"
    n_negatives: int = DEFAULT_NEGATIVES
    sampler: str = "uniform"
    exclude_seen: bool = True
    seed: int = 0
    ks: tuple[int, ...] = DEFAULT_KS
    window: float = 0.0
    request_time: str = DEFAULT_REQUEST_TIME

    def __post_init__(self) -> None:
        if self.request_time not in REQUEST_TIMES:
            raise ValueError(
                f"request_time must be one of {', '.join(REQUEST_TIMES)}, not {self.request_time!r}"
            )
        if self.request_time != DEFAULT_REQUEST_TIME and self.window > 0:
            raise ValueError(
                "the time-window protocol scores every case at the cut time: no other request time"
            )
        if self.candidates not in ("full", "sampled"):
            raise ValueError(f"candidates must be 'full' or 'sampled', not {self.candidates!r}")
        if self.sampler not in ("uniform", "popularity"):
            raise ValueError(f"sampler must be 'uniform' or 'popularity', not {self.sampler!r}")
        if self.n_negatives < 1:
            raise ValueError("n_negatives must be >= 1")
        if not self.ks or min(self.ks) < 1:
            raise ValueError("ks must be positive cut-offs")
        if self.window < 0 or (self.window > 0 and self.candidates != "full"):
            raise ValueError("window must be >= 0 seconds, and a time window is ranked under full candidates")

    @property
    def default_metrics(self) -> tuple[str, ...]:
        """The metric families reported unless others are asked for: HR, NDCG and MRR; under a time
        window (several targets a case) Recall, Precision and MAP too."""
        return RANKING_FAMILIES if self.window > 0 else DEFAULT_FAMILIES

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON values, only those the protocol uses: full ranking leaves out
        ``n_negatives`` and ``sampler``, and a protocol without a time window leaves out ``window``."""
        d = asdict(self) | {"ks": list(self.ks)}
        if self.candidates == "full":
            del d["n_negatives"], d["sampler"]
        if not self.window:
            del d["window"]
        return d

    def describe(self) -> str:
        if self.window > 0:
            cand = (
                f"every item of the {window_text(self.window)} after the cut time, full ranking over all "
                "items"
            )
        elif self.candidates == "full":
            cand = "full ranking over all items"
        else:
            cand = f"{self.n_negatives} {self.sampler}-sampled negatives (seed {self.seed})"
        seen = "history excluded" if self.exclude_seen or self.candidates == "sampled" else "history kept"
        # the default is stated by the result (EvalResult.describe); a protocol that departs from it says so
        when = "" if self.request_time == DEFAULT_REQUEST_TIME else f", request time = {TARGET_TIME}"
        return f"{cand}, {seen}{when}"


PROTOCOLS: dict[str, Protocol] = {
    "full": Protocol(),
    # every item a candidate, the history too: for logs that repeat themselves (shops, streams), where
    # removing the history but the target makes any repeated target compete with unseen items only
    "full-history": Protocol(exclude_seen=False),
    "sampled-uniform": Protocol(candidates="sampled", n_negatives=DEFAULT_NEGATIVES, sampler="uniform"),
    "sampled-popularity": Protocol(candidates="sampled", n_negatives=DEFAULT_NEGATIVES, sampler="popularity"),
    # every item each user interacts with in the week after the split's cut time (RecTools' time-range split)
    "time-window": Protocol(window=DEFAULT_WINDOW),
    # the upper bound of a time-aware model: each case scored at its target's own timestamp, which no
    # server knows before the click (the default scores at the user's previous event's time)
    "full-target-time": Protocol(request_time="target"),
}
"""The named protocols, as the CLI's ``--protocol`` and the benchmark configs spell them."""
FULL = PROTOCOLS["full"]
PAPER_SASREC = PROTOCOLS["sampled-uniform"]  # the SASRec paper's protocol
PAPER_BERT4REC = PROTOCOLS["sampled-popularity"]  # the BERT4Rec paper's protocol


def check_protocol(value: object, name: str = "protocol") -> Protocol:
    """``value`` when it is a :class:`Protocol`; a one-line ``TypeError`` naming ``name`` and the named
    protocols otherwise (``valid_protocol="full"`` ended after the first epoch in an ``AttributeError``)."""
    if not isinstance(value, Protocol):
        names = ", ".join(PROTOCOLS)
        raise TypeError(
            f"{name} is a Protocol (PROTOCOLS[name] or protocol_by_name(name), names {names}), "
            f"not {type(value).__name__} {value!r:.40}"
        )
    return value


def protocol_by_name(
    name: str,
    negatives: int = DEFAULT_NEGATIVES,
    seed: int = 0,
    ks: Sequence[int] = DEFAULT_KS,
    window: float | None = None,
) -> Protocol:
    """The named protocol of :data:`PROTOCOLS` with ``negatives`` (sampled ones only), ``seed``, ``ks`` and
    ``window`` (seconds; the time-window protocol only, its week when ``None``).

    >>> protocol_by_name("sampled-popularity", 10).describe()
    '10 popularity-sampled negatives (seed 0), history excluded'
    """
    base = PROTOCOLS.get(name)
    if base is None:
        raise ValueError(f"unknown protocol {name!r}; use {', '.join(PROTOCOLS)}")
    # Full ranking keeps the default count, so its recorded protocol does not depend on --negatives.
    n_negatives = negatives if base.candidates == "sampled" else base.n_negatives
    if window is not None and not base.window:
        raise ValueError(f"a window applies to the time-window protocol only, not {name}")
    length = base.window if window is None else window
    return dataclasses.replace(base, n_negatives=n_negatives, seed=seed, ks=tuple(ks), window=length)


def check_single_target(names: Sequence[str], where: str) -> None:
    """A one-line ``ValueError`` when ``names`` include a time-window protocol where only a split's single
    targets are tested (training's validation and test, ``attnrec compare``, benchmark configs)."""
    windowed = [n for n in names if n in PROTOCOLS and PROTOCOLS[n].window > 0]
    if windowed:
        raise ValueError(
            f"{where}: the {windowed[0]} protocol ranks every item of a window after the split's cut time, "
            "which only `attnrec evaluate` (or attnrec.evaluation.window) builds: train with --split "
            f"temporal, then run attnrec evaluate --protocol {windowed[0]}"
        )


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
    # what the scorers got as the request time: PREVIOUS_TIME (each case's history's newest timestamp),
    # TARGET_TIME (the upper bound: each case's target timestamp; LEGACY_TARGET_TIME in older results),
    # WINDOW_START (the time-window protocol's cut time, in extra["cut_time"]) or "" (none)
    request_time: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["protocol"] = self.protocol.to_dict()
        d["protocol_text"] = self.describe()
        return d

    def to_frame(self) -> pd.DataFrame:
        """One row per metric (``Recall@10``, ..., ``MRR``; the index): its ``metric`` family, cut-off ``k``
        (``<NA>`` for MRR), ``value``, ``standard_error`` (NaN where none) and the ``cases`` it is over
        (``"all"``, or a group's name, e.g. the cold-item protocol's ``"cold"``)."""
        rows = [("all", self.metrics, self.standard_errors)] + [
            (name, g["metrics"], g.get("standard_errors", {})) for name, g in self.groups.items()
        ]
        records = [
            {
                "name": key,
                "metric": key.partition("@")[0],
                "k": int(key.partition("@")[2]) if "@" in key else None,
                "value": value,
                "standard_error": errors.get(key, float("nan")),
                "cases": cases,
            }
            for cases, metrics, errors in rows
            for key, value in metrics.items()
        ]
        frame = pd.DataFrame.from_records(
            records, columns=["name", "metric", "k", "value", "standard_error", "cases"]
        )
        return frame.astype({"k": "Int64", "value": "float64", "standard_error": "float64"}).set_index("name")

    def describe(self) -> str:
        sha = self.data.sha256[:12] if self.data.sha256 else "n/a"
        groups = "".join(f", {g['n_cases']} with {name} targets" for name, g in self.groups.items())
        protocol = self.protocol.describe()  # says the request time itself when it is the upper bound
        when = (
            f", request time = {self.request_time}"
            if self.request_time and "request time" not in protocol
            else ""
        )
        if "cut_time" in self.extra:
            when += f" {_utc(self.extra['cut_time'])}"
        return (
            f"{self.target} on {self.data.name} (sha256 {sha}), split {self.split}, "
            f"{self.n_cases} users{groups}, {protocol}{when}"
        )


def labelled_protocol_text(text: str) -> str:
    """A recorded protocol line (``EvalResult.describe``) as tables show it today: results written before
    the previous event's time became the default recorded ``request time = target timestamp``, which is the
    upper bound and is labelled as one (:data:`TARGET_TIME`); every other line is returned unchanged."""
    return text.replace(f"request time = {LEGACY_TARGET_TIME}", f"request time = {TARGET_TIME}")


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def evaluate(
    scorer: ScoreFn,
    cases: EvalSet | TargetSets,
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
    metrics: Sequence[str] | None = None,
    train_counts: np.ndarray | None = None,
    item_vectors: ItemVectors | None = None,
) -> EvalResult:
    """Rank each case's targets under ``protocol`` and compute the ``metrics`` families at its cut-offs.

    ``metrics`` names families of :data:`~attnrec.evaluation.metrics.FAMILIES` in any case (``"recall"``
    or ``"Recall"``): HR, NDCG, MRR, Recall, Precision, MAP and the list-level Coverage, Novelty,
    Diversity, ARP of the top-k lists, which need full ranking. By default the protocol's
    :attr:`Protocol.default_metrics`. Novelty and ARP read ``train_counts`` (interactions per item in
    training, length ``n_items + 1``), Diversity ``item_vectors`` (:mod:`attnrec.evaluation.list_metrics`).
    ``cases`` is an :class:`EvalSet` (one target each) or, under the time-window protocol, the
    :class:`~attnrec.evaluation.window.TargetSets` of :func:`~attnrec.evaluation.window.split_window_cases`.

    ``popularity`` (length ``n_items + 1``) is required for popularity-sampled negatives.
    ``candidate_scorer``, when given, scores only the target and the negatives under a sampled
    protocol (``scorer`` still serves full ranking). ``groups`` maps a name to a boolean mask of the
    cases (e.g. cold and warm targets): each group's metrics are reported too (:attr:`EvalResult.groups`).
    A batch holds at most ``batch_size`` cases and ``batch_positions`` history positions (a history
    counts as its length, at most :data:`WINDOW`): at ML-1M's length 200 that is about 80 cases,
    whose activations stay in the CPU's caches (twice as fast on 2 threads as 256 cases).
    On a timestamped log each case is scored with ``request_time`` = its history's newest timestamp (the
    user's previous event: what a server knows when the request comes), or under ``protocol.request_time
    = "target"`` its target's own timestamp (an upper bound); the result says which. Time-window cases
    are all scored at the window's start.
    """
    start = time.perf_counter()
    check_protocol(protocol)
    n = len(cases)
    if n == 0:
        raise DataError(f"no {target} cases to evaluate")
    if (protocol.window > 0) != isinstance(cases, TargetSets):
        raise ValueError(
            "the time-window protocol evaluates TargetSets (attnrec.evaluation.window.split_window_cases), "
            "every other protocol a split's EvalSet"
        )
    families = protocol.default_metrics if metrics is None else parse_families(metrics)
    listed = [f for f in families if f in LIST_FAMILIES]
    if listed and protocol.candidates != "full":
        raise ValueError(
            f"{', '.join(listed)} rank(s) the top-k lists: they need full ranking, not sampled negatives"
        )
    ranking = tuple(f for f in families if f in RANKING_FAMILIES)
    if groups and isinstance(cases, TargetSets):
        raise ValueError("case groups apply to single-target protocols only")
    if isinstance(cases, TargetSets):
        ranks: np.ndarray | TargetRanks
        ranks, lists = rank_target_sets(scorer, cases, protocol, batch_size, batch_positions, bool(listed))
        request_time, extra = WINDOW_START, {"cut_time": cases.cut, "window_end": cases.end}
    else:
        ranks, lists = rank_cases(
            scorer, cases, protocol, popularity, batch_size, batch_positions, candidate_scorer, bool(listed)
        )
        timed = request_times(cases, protocol.request_time) is not None
        request_time, extra = (REQUEST_TIMES[protocol.request_time] if timed else ""), {}
    values = ranking_metrics(ranks, protocol.ks, ranking)
    errors = ranking_standard_errors(ranks, protocol.ks, ranking)
    if listed:
        at_k, at_k_errors = list_metrics(
            lists,
            protocol.ks,
            listed,
            n_items=cases.histories.n_items,
            counts=train_counts,
            vectors=item_vectors,
        )
        values |= at_k
        errors |= at_k_errors
    return EvalResult(
        values,
        protocol,
        split,
        target,
        n,
        data,
        time.perf_counter() - start,
        extra=extra,
        standard_errors=errors,
        groups=group_metrics(np.asarray(ranks), groups or {}, protocol.ks, ranking) if groups else {},
        request_time=request_time,
    )


def group_metrics(
    ranks: np.ndarray,
    groups: Mapping[str, np.ndarray],
    ks: Sequence[int],
    families: Sequence[str] = DEFAULT_FAMILIES,
) -> dict[str, dict[str, Any]]:
    """Per named boolean mask of the cases: its case count, metrics and standard errors (NaN when empty)."""
    out: dict[str, dict[str, Any]] = {}
    for name, mask in groups.items():
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != ranks.shape:
            raise ValueError(f"group {name!r} masks {mask.shape[0]} cases, not {len(ranks)}")
        out[name] = {
            "n_cases": int(mask.sum()),
            "metrics": ranking_metrics(ranks[mask], ks, families),
            "standard_errors": ranking_standard_errors(ranks[mask], ks, families),
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


def format_metrics(metrics: dict[str, float], keys: Sequence[str] | None = None) -> str:
    """``HR@10 0.8245  NDCG@10 0.5905`` style one-liner."""
    keys = list(metrics) if keys is None else keys
    return "  ".join(f"{k} {metrics[k]:.4f}" for k in keys if k in metrics)
