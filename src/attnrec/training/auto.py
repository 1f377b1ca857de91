"""Settings chosen from the data: what ``attnrec train --data FILE`` uses when no preset is named.

The library's per-model defaults are the papers' settings on ML-1M (SASRec: BCE with one negative,
200 positions, dropout 0.2, patience 5). On a small or sparse log those settings train slowly and
stop on validation noise, and the plain command then does no better than popularity. The rules
below read four figures of the training split and choose what the committed benchmarks found to
hold across files:

- **Objective.** A full softmax over the catalog (``loss="ce"`` through the chunked item-major
  kernel, whose memory does not grow with the batch) learns several times more per epoch than BCE
  with one negative. Its time grows with training positions times catalog size: about 6·10⁷
  logits a second on one CPU core at width 64 (ml-latest-small), so above ``CE_LOGITS_PER_EPOCH``
  logits an epoch (about a minute there; 15 minutes an epoch on Ciao's 105,000 items) a sampled
  softmax with 256 shared negatives is used instead, as it is for a catalog of more than
  ``CE_MAX_ITEMS`` items, where every training event would pay for the whole catalog.
- **Regime.** Below 500,000 training events (the SASRec paper's sparse regime: Beauty, Games,
  Steam; and every MovieLens file smaller than ML-1M) the paper's sparse settings hold: window
  (``max_len``) 50 and dropout 0.5. On a larger log dropout is 0.2 and the window is the smallest of
  50, 100 and 200 that covers the 90th percentile of the training histories: positions nobody
  reaches cost time and add nothing.
- **Steps.** An epoch should take at least about 20 optimiser steps: on a log of a few hundred
  users, batches of 128 give five a pass, and the model learns per epoch what it could in a quarter
  of one. The batch is the largest of 128, 64 and 32 that gives 20 steps, and 32 below that.
- **Stopping.** Validation on a few thousand users is noisy; patience then counts noise. The rule
  smooths the signal over three evaluations and never stops before epoch 20 when the validation
  set is small, with patience 10 on at most 200 epochs.

Each rule fills a setting only where the user did not give one, and says why in a line that the
CLI prints. The rules are pure functions of the split, so the same file gives the same choices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attnrec.data.split import Split

if TYPE_CHECKING:
    from attnrec.models.registry import ModelSpec

WINDOWS = (50, 100, 200)
BATCHES = (128, 64, 32)
STEPS_PER_EPOCH = 20
SPARSE_EVENTS = 500_000  # below this many training events: the papers' sparse-data dropout
SMALL_VALIDATION = 10_000  # validation users below which the stopping rule smooths and waits
# Full-softmax logits an epoch (training positions x catalog) above which the sampled softmax is used.
CE_LOGITS_PER_EPOCH = 4 * 10**9
# Catalogs above this many items train with the sampled softmax whatever the data's size: every
# training event pays for the whole catalog in a full softmax (Taobao's 55,000 items over 82,000
# events trained 5 epochs in 300 s, below popularity, where BCE reached 0.015 NDCG@10).
CE_MAX_ITEMS = 20_000


@dataclass(frozen=True)
class DataShape:
    """The figures of a training split that the rules read."""

    n_items: int
    train_events: int
    history_p90: float
    valid_users: int
    train_users: int  # users with at least one next-item position
    positions: dict[int, int]  # next-item training positions an epoch, by window

    @classmethod
    def of(cls, split: Split, n_items: int) -> DataShape:
        lengths = split.train.lengths()
        lengths = lengths[lengths > 0]
        return cls(
            n_items=int(n_items),
            train_events=int(lengths.sum()),
            history_p90=float(np.percentile(lengths, 90)) if len(lengths) else 0.0,
            valid_users=len(split.valid),
            train_users=int(np.sum(lengths > 1)),
            positions={w: int(np.minimum(lengths - 1, w).sum()) for w in WINDOWS},
        )


@dataclass(frozen=True)
class AutoSettings:
    """Model and training settings chosen from the data, and one line of reason per choice."""

    model: dict[str, Any]
    train: dict[str, Any]
    reasons: tuple[str, ...]


def _fields(config_cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(config_cls)}


def _window(shape: DataShape) -> tuple[int, str]:
    if shape.train_events < SPARSE_EVENTS:
        return WINDOWS[0], f"max_len {WINDOWS[0]}: the papers' window for sparse data (see dropout)"
    window = next((w for w in WINDOWS if w >= shape.history_p90), None)
    p90 = f"90% of training histories have at most {shape.history_p90:.0f} events"
    if window is None:
        return WINDOWS[-1], f"max_len {WINDOWS[-1]}, the longest window: {p90}"
    return window, f"max_len {window}: {p90}"


def _dropout(shape: DataShape) -> tuple[float, str]:
    if shape.train_events < SPARSE_EVENTS:
        return 0.5, f"dropout 0.5: {shape.train_events:,} training events is the sparse-data regime"
    return 0.2, f"dropout 0.2: {shape.train_events:,} training events is the dense-data regime"


def _objective(shape: DataShape, max_len: int) -> tuple[dict[str, Any], str]:
    positions = shape.positions.get(max_len) or max(shape.positions.values(), default=0)
    logits = positions * shape.n_items
    if logits <= CE_LOGITS_PER_EPOCH and shape.n_items <= CE_MAX_ITEMS:
        return (
            {"loss": "ce", "fast_ce": True},
            f"loss ce (full softmax over {shape.n_items:,} items): {logits:.1e} logits an epoch",
        )
    why = (
        f"{shape.n_items:,} items is over {CE_MAX_ITEMS:,}"
        if shape.n_items > CE_MAX_ITEMS
        else f"a full softmax would need {logits:.1e} logits an epoch"
    )
    return {"loss": "sampled_ce", "n_negatives": 256}, f"loss sampled_ce with 256 negatives: {why}"


def _batch(shape: DataShape) -> tuple[int, str]:
    size = next((b for b in BATCHES if shape.train_users / b >= STEPS_PER_EPOCH), BATCHES[-1])
    steps = -(-shape.train_users // size)
    return size, f"batch_size {size}: {steps} optimiser steps an epoch over {shape.train_users:,} users"


def _stopping(shape: DataShape) -> tuple[dict[str, Any], str]:
    if shape.valid_users < SMALL_VALIDATION:
        return (
            {"max_epochs": 200, "patience": 10, "smooth": 3, "min_epochs": 20},
            f"stopping: {shape.valid_users:,} validation users is noisy, so patience 10 counts on the "
            "mean of 3 evaluations and never before epoch 20 (at most 200 epochs)",
        )
    return (
        {"max_epochs": 200, "patience": 10},
        f"stopping: patience 10 on {shape.valid_users:,} validation users (at most 200 epochs)",
    )


# Which rules a model takes: the objective and the regularisation are SASRec's settings; every
# model with a window takes the window rule, and every trained model the stopping rule.
FULL_RULES = frozenset({"sasrec"})


def choose(
    spec: ModelSpec, shape: DataShape, given_model: Mapping[str, Any], given_train: Mapping[str, Any]
) -> AutoSettings:
    """Settings for the model of ``spec`` on data of ``shape``, filling only keys absent from the given
    ones."""
    fields = _fields(spec.config_cls)
    model_out: dict[str, Any] = {}
    train_out: dict[str, Any] = {}
    reasons: list[str] = []

    def offer(target: dict[str, Any], given: Mapping[str, Any], values: Mapping[str, Any], why: str) -> None:
        free = {k: v for k, v in values.items() if k not in given}
        if free:
            target.update(free)
            reasons.append(why)

    max_len = int(given_model.get("max_len", 0))
    if "max_len" in fields:
        window, why = _window(shape)
        offer(model_out, given_model, {"max_len": window}, why)
        max_len = max_len or window
    if spec.name in FULL_RULES:
        offer(model_out, given_model, {"hidden": 64}, "hidden 64: the width the committed runs use")
        rate, why = _dropout(shape)
        offer(model_out, given_model, {"dropout": rate, "attn_dropout": 0.0}, why)
        if "loss" not in given_model:
            values, why = _objective(shape, max_len or WINDOWS[-1])
            offer(model_out, given_model, values, why)
    size, why = _batch(shape)
    offer(train_out, given_train, {"batch_size": size}, why)
    values, why = _stopping(shape)
    offer(train_out, given_train, values, why)
    return AutoSettings(model_out, train_out, tuple(reasons))
