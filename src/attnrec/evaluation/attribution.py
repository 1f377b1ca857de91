"""Per-recommendation attributions: how much each history event raised the score of each recommended item.

One interface, :func:`attribute`, five methods:

``attention``
    The last layer's attention of the predicting position on each history event (mean over heads).
    One ranking shared by every target item: it says what the model looked at, not why item A beat B.
``rollout``
    Attention rollout through all layers (Abnar & Zuidema, 2020; the residual counted as half
    identity), also shared by every target.
``occlusion``
    Leave-one-out: ``value[k, j] = score_k(history) - score_k(history without event j)``, exactly,
    by re-scoring. The ``W`` variants are scored in one batched forward pass (one row per history
    event in the model's window). Removing an event lets the next older one (if any) slide into the
    window, which is what serving would see for that shorter history.
``greedy``
    Greedy joint occlusion: leave-one-out in rounds, each on what the earlier rounds left. Round
    ``r`` re-scores the history without the events already chosen and without each remaining one in
    turn (one batched pass of the remaining events), then chooses the ``2**r`` whose removal lowers
    the target's score most (1, 2, 4, ... events), until ``depth`` events are chosen (default: half
    the window); the others follow, ranked by their drop in the last round. ``value[k, j]`` is event
    ``j``'s drop in the round that chose it (or the last round): its effect given the events chosen
    before it. The ranking is the choice order (:attr:`Attribution.order`), which single removals
    cannot give: events that matter together (many recent films of one kind) are found together.
    Round 1 is exactly ``occlusion``'s top event, and a smaller ``depth`` gives the same first
    choices, so an explanation naming 3 events needs 2 rounds. Cost: about ``log2(depth) + 1``
    passes of at most ``W`` rows per distinct set of events chosen so far: round 1 (occlusion) is
    shared by every target, and targets that chose the same events share the later rounds' rows.
``integrated_gradients``
    Integrated gradients (Sundararajan et al., 2017) on the input embeddings of the history events,
    from a baseline where their item embeddings are zero (positions, padding and BERT4Rec's [mask]
    unchanged) along a straight path with ``steps`` midpoint samples. Completeness:
    ``value[k].sum() ~= score_k(history) - score_k(baseline)``; :attr:`Attribution.baseline` and
    :attr:`Attribution.completeness_gap` report it. Needs the model's
    :class:`~attnrec.models.contracts.EmbeddingInputs` capability.

Everything here works on internal item indices and a model implementing the contracts of
:mod:`attnrec.models.contracts`; the user-level layer maps IDs and titles. Larger values always mean
"raised the target's score more" (for the two attention methods: "was attended to more").
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable  # Any: JSON-ready dicts

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.data.signals import batch_keys
from attnrec.models.contracts import AttentionInspectable, Capabilities, EmbeddingInputs, Scorer, capabilities

METHODS = ("attention", "rollout", "occlusion", "greedy", "integrated_gradients")
"""The attribution methods, in the order the docs list them."""

SHARED_METHODS = frozenset({"attention", "rollout"})
"""Methods whose values do not depend on the target item (one ranking for the whole top-k)."""


@runtime_checkable
class AttributableModel(Scorer, Protocol):
    """What every method needs: the model's own inputs and scores, in inference mode."""

    def eval(self) -> object:
        """Inference mode (dropout off)."""
        ...


class AttributionError(ValueError):
    """The request cannot be attributed (unknown method, empty history, a capability the model lacks)."""


def cannot_attribute(caps: Capabilities, method: str) -> str | None:
    """Why a model with ``caps`` cannot attribute with ``method`` (None when it can): the one check
    :func:`attribute` makes, also asked before any work by the recommender and the server."""
    if method in SHARED_METHODS and not caps.attention:
        return (
            "has no attention weights; attention explanations need a self-attention model (SASRec, BERT4Rec)"
        )
    if method == "integrated_gradients" and not caps.embedding_inputs:
        return "does not expose its input embeddings, which integrated gradients need"
    if caps.closed_form:  # POP: its scores ignore the history, so every attribution would be 0
        return "scores items without reading the history; there is nothing to attribute"
    return None


@dataclass(frozen=True)
class Attribution:
    """Attributions of ``K`` target items to the ``W`` history events the model saw.

    ``events[j]`` is the position in the given history (0 = oldest) of column ``j``; columns run
    oldest to newest. ``values[k, j]`` is event ``j``'s attribution for ``targets[k]``.
    """

    method: str
    targets: np.ndarray  # (K,) internal item indices
    scores: np.ndarray  # (K,) the targets' scores for the full history
    events: np.ndarray  # (W,) positions in the history, oldest first
    values: np.ndarray  # (K, W)
    baseline: np.ndarray | None  # (K,) integrated gradients: the targets' scores at the baseline
    seconds: float  # wall time of the attribution (model calls included)
    order: np.ndarray | None = None  # (K, W) greedy: each target's column indices in choice order

    @property
    def shared(self) -> bool:
        """Whether every target gets the same values (the attention methods)."""
        return self.method in SHARED_METHODS

    @property
    def completeness_gap(self) -> np.ndarray | None:
        """``(K,)`` integrated gradients: ``values.sum(1) - (scores - baseline)`` (0 for an exact path
        integral)."""
        if self.baseline is None:
            return None
        return np.asarray(self.values.sum(1) - (self.scores - self.baseline))

    def ranking(self, k: int) -> np.ndarray:
        """Column indices of target ``k``'s events, highest attribution first (ties: the more recent first);
        for ``greedy``, the order in which the events were chosen."""
        if self.order is not None:
            return np.asarray(self.order[k])
        v = self.values[k]
        return np.lexsort((-np.arange(len(v)), -v))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (internal indices; the user-level layer maps them to IDs)."""
        out: dict[str, Any] = {
            "method": self.method,
            "shared": self.shared,
            "targets": self.targets.tolist(),
            "scores": np.round(self.scores, 6).tolist(),
            "events": self.events.tolist(),
            "values": np.round(self.values, 6).tolist(),
            "seconds": round(self.seconds, 6),
        }
        if self.baseline is not None:
            out["baseline"] = np.round(self.baseline, 6).tolist()
        if self.order is not None:
            out["order"] = self.order.tolist()
        return out


def _one(history: np.ndarray, n_items: int, columns: Mapping[str, np.ndarray] | None) -> Sequences:
    h = np.asarray(history, dtype=np.int64)
    return Sequences(np.array([0, len(h)]), h, n_items, dict(columns or {}))


def _without(one: Sequences, drops: list[np.ndarray]) -> Sequences:
    """One copy of the one-row ``one`` per entry of ``drops``, copy ``r`` without the events ``drops[r]``."""
    keep = np.ones((len(drops), len(one.items)), dtype=bool)
    for r, d in enumerate(drops):
        keep[r, d] = False
    rows, idx = np.nonzero(keep)  # row-major: each copy's kept events in order
    offsets = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(drops)))]).astype(np.int64)
    return Sequences(offsets, one.items[idx], one.n_items, {k: v[idx] for k, v in one.columns.items()})


def _window(seq: torch.Tensor, n_items: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The columns of the one-row model input ``seq`` ``(1, T)`` that hold history items, and their history
    positions."""
    tokens = seq[0].cpu().numpy()
    cols = np.flatnonzero((tokens > 0) & (tokens <= n_items))
    return cols, np.arange(length - len(cols), length)


def _scores(
    model: Scorer, users: np.ndarray, seqs: Sequences, targets: np.ndarray, device: torch.device
) -> np.ndarray:
    batch = {k: v.to(device) for k, v in model.score_inputs(users, seqs).items()}
    s = model.score(batch)  # (B, I+1)
    return s[:, torch.as_tensor(targets, device=s.device)].double().cpu().numpy()  # (B, K)


def attribute(
    model: AttributableModel,
    history: np.ndarray,
    targets: np.ndarray,
    *,
    n_items: int,
    method: str = "occlusion",
    user: int = 0,
    columns: Mapping[str, np.ndarray] | None = None,
    steps: int = 32,
    depth: int | None = None,
    device: torch.device | None = None,
) -> Attribution:
    """Attribute the scores of ``targets`` (internal items ``(K,)``) to the events of ``history``.

    ``history`` holds internal item indices (``1..n_items``), oldest first; ``columns`` its optional per-event
    columns (timestamps, ...), removed together with their event by occlusion; ``user`` is the
    internal user index fed to the model (the attention models ignore it). Only the events inside
    the model's window (its ``max_len`` most recent) are attributed. The model is switched to
    eval mode. Raises :class:`AttributionError` for an unknown method, an empty history or a
    method the model cannot support. ``depth``: how many events ``greedy`` chooses in rounds (default
    half the window; the rest are ranked by their last round's drop).
    """
    if method not in METHODS:
        raise AttributionError(f"unknown attribution method {method!r}; choose one of {', '.join(METHODS)}")
    if len(history) == 0:
        raise AttributionError("the history has no known items; there is nothing to attribute")
    if steps < 1:
        raise AttributionError(f"steps must be at least 1, got {steps}")
    if depth is not None and depth < 1:
        raise AttributionError(f"depth must be at least 1, got {depth}")
    why = cannot_attribute(capabilities(model), method)
    if why is not None:
        raise AttributionError(f"this model {why}")
    dev = device or torch.device("cpu")
    targets = np.asarray(targets, dtype=np.int64)
    one = _one(history, n_items, columns)
    model.eval()
    users = np.array([user])
    start = time.perf_counter()
    if method in SHARED_METHODS:
        values, scores, events, base = _attention(model, one, users, targets, method, dev)
    elif method == "occlusion":
        values, scores, events, base = _occlusion(model, one, users, targets, dev)
    elif method == "greedy":
        values, scores, events, order = _greedy(model, one, users, targets, depth, dev)
        return Attribution(method, targets, scores, events, values, None, time.perf_counter() - start, order)
    else:
        values, scores, events, base = _integrated_gradients(model, one, users, targets, steps, dev)
    return Attribution(method, targets, scores, events, values, base, time.perf_counter() - start)


_Parts = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


def _attention(
    model: Scorer, one: Sequences, users: np.ndarray, targets: np.ndarray, method: str, dev: torch.device
) -> _Parts:
    assert isinstance(model, AttentionInspectable)  # cannot_attribute checked it
    with torch.no_grad():
        batch = model.score_inputs(users, one)
        read = sorted(set(batch) & batch_keys())  # the per-event model inputs
        if read:  # attention_weights(seq) sees the items only: it would not be this model's attention
            raise AttributionError(
                f"method {method!r} is not available for a model that reads per-event "
                f"{', '.join(read)}; use occlusion (it removes each event with its columns)"
            )
        seq = batch["seq"].to(dev)  # (1, T)
        maps = [a[0].float().mean(0).cpu() for a in model.attention_weights(seq)]  # L x (T, T)
        scores = _scores(model, users, one, targets, dev)[0]  # (K,)
    t = seq.shape[1]
    if method == "attention":
        row = maps[-1][t - 1]  # (T,) the predicting position's last-layer attention
    else:
        roll = torch.eye(t)
        for a in maps:
            a = 0.5 * a + 0.5 * torch.eye(t)
            roll = (a / a.sum(-1, keepdim=True)) @ roll
        row = roll[t - 1]
    cols, events = _window(seq, one.n_items, len(one.items))
    values = np.tile(row.double().numpy()[cols], (len(targets), 1))  # (K, W) the same row for every target
    return values, scores, events, None


def _occlusion(
    model: Scorer, one: Sequences, users: np.ndarray, targets: np.ndarray, dev: torch.device
) -> _Parts:
    with torch.no_grad():
        seq = model.score_inputs(users, one)["seq"]
        _, events = _window(seq, one.n_items, len(one.items))
        full = _scores(model, users, one, targets, dev)[0]  # (K,)
        if len(one.items) == 1:  # without its only event the history is empty: the model has no input
            raise AttributionError(
                "occlusion needs at least two history events (an empty history has no score)"
            )
        reduced = _scores(
            model,
            np.repeat(users, len(events)),
            _without(one, [events[j : j + 1] for j in range(len(events))]),
            targets,
            dev,
        )  # (W, K)
    return (full[None, :] - reduced).T, full, events, None


def _greedy(
    model: Scorer,
    one: Sequences,
    users: np.ndarray,
    targets: np.ndarray,
    depth: int | None,
    dev: torch.device,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Greedy joint occlusion (module doc): values ``(K, W)``, full scores, events, choice order
    ``(K, W)``."""
    with torch.no_grad():
        seq = model.score_inputs(users, one)["seq"]
        _, events = _window(seq, one.n_items, len(one.items))
        full = _scores(model, users, one, targets, dev)[0]  # (K,)
    w, k_n = len(events), len(targets)
    if len(one.items) == 1:  # without its only event the history is empty: the model has no input
        raise AttributionError(
            "greedy occlusion needs at least two history events (an empty history has no score)"
        )
    goal = min(
        w // 2 if depth is None else depth, w - 1
    )  # one event always stays: an empty history has no score
    chosen: list[list[int]] = [[] for _ in range(k_n)]  # per target: window columns in choice order
    values = np.zeros((k_n, w))
    before = full.copy()  # (K,) each target's score without its chosen events
    active, size = list(range(k_n)), 1  # targets still choosing; events chosen this round
    while active:
        # targets that chose the same events so far share their variants (all of them in round 1, and
        # often most of them later: the same recent event tends to matter for every recommended item)
        groups: dict[tuple[int, ...], list[int]] = {}
        for k in active:
            groups.setdefault(tuple(chosen[k]), []).append(k)
        left = {
            key: np.setdiff1d(np.arange(w), key, assume_unique=True) for key in groups
        }  # remaining columns
        drops = [events[np.array([*key, j], dtype=np.int64)] for key in groups for j in left[key]]
        with torch.no_grad():  # every group's variants in one pass: its chosen events and one more removed
            reduced = _scores(
                model, np.repeat(users, len(drops)), _without(one, drops), targets, dev
            )  # (R, K)
        row = 0
        for key, members in groups.items():
            for k in members:
                drop = (
                    before[k] - reduced[row : row + len(left[key]), k]
                )  # (W_left,) each remaining event's drop
                values[k, left[key]] = drop
                best = np.lexsort((-left[key], -drop))[
                    : min(size, goal - len(chosen[k]))
                ]  # largest drop; ties: newer
                chosen[k] += left[key][best].tolist()
            row += len(left[key])
        active = [k for k in active if len(chosen[k]) < goal]
        if active:
            sets = sorted({tuple(chosen[k]) for k in active})
            with torch.no_grad():  # the score without everything chosen so far: the next round's reference
                now = _scores(
                    model,
                    np.repeat(users, len(sets)),
                    _without(one, [events[np.array(c, dtype=np.int64)] for c in sets]),
                    targets,
                    dev,
                )
            for k in active:
                before[k] = now[sets.index(tuple(chosen[k])), k]
        size *= 2
    order = np.zeros((k_n, w), dtype=np.int64)
    for k in range(k_n):
        rest = np.setdiff1d(np.arange(w), chosen[k], assume_unique=True)
        rest = rest[np.lexsort((-rest, -values[k, rest]))]  # ranked by their last round's drop
        order[k] = np.concatenate([np.array(chosen[k], dtype=np.int64), rest])
    return values, full, events, order


def _integrated_gradients(
    model: Scorer, one: Sequences, users: np.ndarray, targets: np.ndarray, steps: int, dev: torch.device
) -> _Parts:
    assert isinstance(model, EmbeddingInputs)  # cannot_attribute checked it
    batch = {k: v.to(dev) for k, v in model.score_inputs(users, one).items()}
    seq = batch["seq"]  # (1, T)
    cols, events = _window(seq, one.n_items, len(one.items))
    with torch.no_grad():
        emb = model.input_embeddings(batch).detach()  # (1, T, D)
    is_event = torch.zeros(seq.shape[1], 1, dtype=emb.dtype, device=emb.device)
    is_event[torch.as_tensor(cols, device=emb.device)] = 1.0
    base = emb * (1.0 - is_event)  # (1, T, D): the history events' content zeroed, the rest kept
    delta = emb - base  # (1, T, D)
    alphas = (torch.arange(steps, dtype=emb.dtype, device=emb.device) + 0.5) / steps  # (S,) midpoints
    path = (base + alphas[:, None, None] * delta).requires_grad_(True)  # (S, T, D)
    rep = {k: v.expand(steps, *v.shape[1:]) for k, v in batch.items()}
    tgt = torch.as_tensor(targets, device=emb.device)
    with torch.enable_grad():
        out = model.score_embedded(rep, path)[:, tgt]  # (S, K)
        grads = [
            torch.autograd.grad(out[:, k].sum(), path, retain_graph=k < len(targets) - 1)[0]
            for k in range(len(targets))
        ]  # K x (S, T, D)
    g = torch.stack(grads).mean(1)  # (K, T, D) the path's mean gradient
    values = (g * delta).sum(-1)[:, torch.as_tensor(cols, device=emb.device)]  # (K, W)
    with torch.no_grad():
        ends = (
            model.score_embedded(
                {k: v.expand(2, *v.shape[1:]) for k, v in batch.items()}, torch.cat([emb, base])
            )[:, tgt]
            .double()
            .cpu()
            .numpy()
        )  # (2, K)
    return values.double().cpu().numpy(), ends[0], events, ends[1]


__all__ = [
    "METHODS",
    "SHARED_METHODS",
    "AttributableModel",
    "Attribution",
    "AttributionError",
    "attribute",
    "cannot_attribute",
]
