"""The cold-item protocol (issue #19): a seeded share of items never seen in training, tested as targets.

:func:`cold_items` draws the cold items; :func:`cold_start` builds everything a run needs from them,
as pure functions of the log:

* **Which items.** ``share`` of the catalogue (``round(share * n_items)`` items, at least one), drawn
  with ``rng`` among the items that are a leave-one-out **test target** of some user, so that every
  cold item is measured; when the log has an item feature table, only among items with a row in it
  (an item without features cannot be cold-started by any model, so drawing it would measure nothing).
* **What is removed.** Every interaction with a cold item is removed from the training sequences and
  from every validation and test history: a cold item appears only as a test target. Validation (early
  stopping) keeps the cases with warm targets only. A case whose history is empty once the cold items are
  gone is dropped (counted in :class:`ColdRecord`).
* **Indices.** The log is re-indexed so that the warm items keep their order as ``1..n_warm`` and the cold
  items follow as ``n_warm + 1..n_items``. A model is then trained on :attr:`ColdStart.warm` (the log
  without the cold items, whose catalogue is the warm items only) and the cold items are added after
  training, exactly as new items arrive in production (``Recommender.add_items``: features, all-zero ID
  vectors); a model that cannot take them (ID-only, POP) has no score for them, so they rank last.
* **Reported.** Test cases are reported overall and split by whether the target is cold or warm
  (:attr:`ColdStart.is_cold`); :class:`ColdRecord` says share, seed and how many items/targets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnrec.data.features import FeatureTable
from attnrec.data.schema import DataError, IdMap, Interactions, Sequences
from attnrec.data.split import EvalSet, Split, leave_one_out


@dataclass(frozen=True)
class ColdRecord:
    """What a result records of the cold-item protocol."""

    share: float  # requested share of the catalogue
    seed: int
    n_items: int  # cold items
    n_test_targets: int  # test cases whose target is cold
    n_warm_targets: int  # test cases whose target is warm
    n_valid_dropped: int  # validation cases left out because their target is cold
    n_empty_dropped: int  # validation/test cases left out because their history held only cold items
    drawn_from: str  # the pool the cold items were drawn from

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        return (
            f"cold items {self.share:g} of the catalogue (seed {self.seed}): {self.n_items:,} items drawn "
            f"from {self.drawn_from}, never in training or histories; {self.n_test_targets:,} cold / "
            f"{self.n_warm_targets:,} warm test targets"
        )


@dataclass(frozen=True)
class ColdStart:
    """A leave-one-out split under the cold-item protocol (see the module docstring).

    ``data``: the whole log re-indexed, cold items last. ``warm``: the training log: no cold item in its
    interactions nor in its catalogue. ``split``: training sequences and validation cases over the warm
    items (``n_items = n_warm``), test cases over the whole catalogue. ``cold_features``: the cold items'
    feature rows in index order (what ``add_items`` takes), ``None`` for a log without item features.
    """

    data: Interactions
    warm: Interactions
    split: Split
    n_warm: int
    cold_features: FeatureTable | None
    record: ColdRecord

    @property
    def cold_ids(self) -> list[str]:
        """The cold items' external IDs, in index order ``n_warm + 1 ..``."""
        return [str(x) for x in self.data.items.external[self.n_warm :]]

    def is_cold(self, targets: np.ndarray) -> np.ndarray:
        """Boolean mask: which of the internal ``targets`` are cold items."""
        return np.asarray(targets) > self.n_warm


def _test_targets(data: Interactions) -> np.ndarray:
    """The distinct leave-one-out test targets (last item of each user with 3 or more interactions)."""
    seqs = data.sequences(columns=False)
    ends = seqs.offsets[1:][seqs.lengths() >= 3]
    return np.unique(seqs.items[ends - 1])


def cold_items(data: Interactions, share: float, rng: np.random.Generator) -> np.ndarray:
    """Internal indices (sorted) of ``round(share * n_items)`` cold items drawn with ``rng`` among the
    leave-one-out test targets (with a feature row, when the log has item features)."""
    if not 0.0 < share < 1.0:
        raise DataError(f"cold items: the share must be in (0, 1), not {share}")
    pool = _test_targets(data)
    if data.item_features is not None:
        pool = pool[data.item_features.rows_of(data.items.to_external(pool)) >= 0]
    k = max(1, round(share * data.n_items))
    if k > len(pool):
        raise DataError(
            f"cold items: {share:g} of {data.n_items:,} items is {k:,}, but only {len(pool):,} items "
            "are test targets (with features); use a smaller share"
        )
    return np.sort(rng.choice(pool, k, replace=False))


def _cold_last(data: Interactions, cold: np.ndarray) -> Interactions:
    """``data`` with its items re-indexed: warm items ``1..n_warm`` in their order, then the ``cold`` ones."""
    n = data.n_items
    off = data.items.offset
    is_cold = np.zeros(n + off, dtype=bool)
    is_cold[cold] = True
    order = np.concatenate(
        [np.flatnonzero(~is_cold[off:]) + off, np.asarray(cold, dtype=np.int64)]
    )  # old, new order
    new_of_old = np.zeros(n + off, dtype=np.int64)
    new_of_old[order] = np.arange(off, n + off)
    items = IdMap(data.items.external[order - off], off)
    return dataclasses.replace(data, item=new_of_old[data.item], items=items)


def _warm_log(data: Interactions, n_warm: int) -> Interactions:
    """The re-indexed ``data`` without the cold items' interactions, its catalogue the warm items only."""
    keep = data.item <= n_warm

    def cut(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[keep]

    return dataclasses.replace(
        data,
        user=data.user[keep],
        item=data.item[keep],
        timestamp=cut(data.timestamp),
        rating=cut(data.rating),
        event=cut(data.event),
        events=data.events,
        items=IdMap(data.items.external[:n_warm], data.items.offset),
    )


def _without_cold(seqs: Sequences, n_warm: int, n_items: int) -> Sequences:
    return dataclasses.replace(seqs.select(seqs.items <= n_warm), n_items=n_items)


def _cases(cases: EvalSet, n_warm: int, n_items: int, keep_cold_targets: bool) -> tuple[EvalSet, int, int]:
    """``cases`` with cold items out of the histories; cases with a cold target (unless kept) or an empty
    history dropped. Also how many were dropped for each reason."""
    hist = _without_cold(cases.histories, n_warm, n_items)
    warm_target = cases.targets <= n_warm
    ok_target = np.ones(len(cases), dtype=bool) if keep_cold_targets else warm_target
    rows = np.flatnonzero(ok_target & (hist.lengths() > 0))
    out = EvalSet(
        cases.users[rows],
        hist.take(rows),
        cases.targets[rows],
        {k: v[rows] for k, v in cases.target_columns.items()},
    )
    return out, int((~ok_target).sum()), int((ok_target & (hist.lengths() == 0)).sum())


def cold_start(data: Interactions, share: float, seed: int = 0, valid_users: int = 0) -> ColdStart:
    """The leave-one-out split (``valid_users`` as in :func:`~attnrec.data.split.leave_one_out`) under the
    cold-item protocol: ``share`` of the items drawn with ``numpy.random.default_rng(seed)``."""
    if data.items.offset != 1:
        raise DataError(f"cold items: item indices must start at 1, not {data.items.offset}")
    cold = cold_items(data, share, np.random.default_rng(seed))
    full = _cold_last(data, cold)
    n_items, n_warm = full.n_items, full.n_items - len(cold)
    base = leave_one_out(full, valid_users=valid_users, seed=seed)
    valid, n_valid_cold, empty_valid = _cases(base.valid, n_warm, n_warm, keep_cold_targets=False)
    test, _, empty_test = _cases(base.test, n_warm, n_items, keep_cold_targets=True)
    params = dict(base.params) | {"cold_items": share, "cold_seed": seed}
    split = Split(base.name, _without_cold(base.train, n_warm, n_warm), valid, test, params)
    n_cold_targets = int((test.targets > n_warm).sum())
    record = ColdRecord(
        share,
        seed,
        len(cold),
        n_cold_targets,
        len(test) - n_cold_targets,
        n_valid_cold,
        empty_valid + empty_test,
        "leave-one-out test targets" + (" with item features" if data.item_features else ""),
    )
    features = None
    if data.item_features is not None:
        ids = [str(x) for x in full.items.external[n_warm:]]
        features = data.item_features.rekey({i: i for i in ids})  # the cold items' rows, in index order
    return ColdStart(full, _warm_log(full, n_warm), split, n_warm, features, record)


__all__ = ["ColdRecord", "ColdStart", "cold_items", "cold_start"]
