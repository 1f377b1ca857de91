"""Train/validation/test splits as pure functions of an interaction log."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from attnrec.data.schema import TIMESTAMP, DataError, Interactions, Sequences

SPLITS: tuple[str, ...] = ("leave-one-out", "temporal", "last-qualifying")
"""The named splits, as the CLI's ``--split`` and the benchmark configs spell them (see
:func:`make_split`)."""
DEFAULT_SPLIT = "leave-one-out"
FINAL = "none"
"""The final fit's split (``--split none``, ``fit(data, split="none")``): every event trains, nothing is held
out, so training runs a fixed number of epochs with no validation (:func:`final_split`)."""


@dataclass(frozen=True)
class EvalSet:
    """Evaluation cases: for row ``r``, user ``users[r]`` with input ``histories[r]`` must rank
    ``targets[r]``.

    The history is both the model input and (when seen items are excluded) the set removed from
    the candidates. ``target_columns`` holds the targets' own per-event columns (their
    timestamp, event code, rating; see :data:`attnrec.data.schema.COLUMN_DTYPES`), aligned with
    ``targets``, when the log has them: e.g. to evaluate only on purchases.
    """

    users: np.ndarray
    histories: Sequences
    targets: np.ndarray
    target_columns: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.users)


@dataclass(frozen=True)
class Split:
    """Training sequences (one per user, possibly empty) plus validation and test cases."""

    name: str
    train: Sequences
    valid: EvalSet
    test: EvalSet
    params: dict[str, float | str]

    def describe(self) -> str:
        """The split as results record it: ``name`` or ``name (key=value, ...)`` (see :func:`parse_split`)."""
        extra = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return self.name + (f" ({extra})" if extra else "")


def parse_split(described: str) -> tuple[str, dict[str, float | str]]:
    """``(name, params)`` of a :meth:`Split.describe` string, e.g.
    ``"leave-one-out (valid_users=2048, seed=0)"``; numbers as floats, anything else
    (``target_events=cart,buy``) as text."""
    name, _, rest = described.partition(" (")
    pairs = (item.split("=", 1) for item in rest.removesuffix(")").split(", ") if "=" in item)
    return name, {k: _number_or_text(v) for k, v in pairs}


def _number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


def leave_one_out(data: Interactions, valid_users: int = 0, seed: int = 0) -> Split:
    """The papers' split: last item of each user is the test target, the one before it validation.

    The test input history includes the validation item. Users with fewer than 3 interactions
    are kept for training only (as in the SASRec code), since they cannot give both a training
    item and two held-out items.

    ``valid_users = 0`` (the SASRec code's practice): every evaluable user's second-to-last item is
    a validation target and stays out of training. ``valid_users = N > 0`` (the protocol of the
    BERT4Rec authors' code, which trains on every item but the test one, and of the RecTools
    benchmark, which validates on 2,048 users): only ``N`` users drawn with ``seed`` keep it out
    as their validation target; every other user trains on all items but the test one. The test
    cases are the same either way.
    """
    if valid_users < 0:
        raise DataError(f"leave-one-out split: valid_users must be >= 0, not {valid_users}")
    seqs = data.sequences()
    if len(seqs.items) == 0:
        raise DataError("leave-one-out split: the interaction log is empty")
    lengths = seqs.lengths()
    evaluable = np.flatnonzero(lengths >= 3)
    if len(evaluable) == 0:
        raise DataError(
            "leave-one-out split: no user has 3 or more interactions; each evaluated user needs a "
            "training item, a validation item and a test item"
        )
    validated = evaluable
    if 0 < valid_users < len(evaluable):
        validated = np.sort(np.random.default_rng(seed).choice(evaluable, valid_users, replace=False))
    drop = np.where(lengths >= 3, 1, 0)
    drop[validated] = 2
    train = _drop_last(seqs, drop)
    all_but_last = _drop_last(seqs, np.where(lengths >= 3, 1, 0))
    ends = seqs.offsets[1:]
    valid = _cases(validated, train.take(validated), seqs, ends[validated] - 2)
    test = _cases(evaluable, all_but_last.take(evaluable), seqs, ends[evaluable] - 1)
    params: dict[str, float | str] = {"valid_users": valid_users, "seed": seed} if valid_users else {}
    return Split("leave-one-out", train, valid, test, params)


def leave_last_new_out(data: Interactions, since: int) -> Split:
    """The validation split of a fine-tune on the new events (``new_since``): leave-one-out, new users only.

    Every user whose last event is at or after ``since`` (Unix seconds) and who has an event before it
    holds that last event out as a validation target, its input everything before it; no other user is
    validated, and nothing is held out for a test (the fine-tune chooses its number of epochs, the final
    fit then trains on every event). Every other event trains. The split is named ``leave-one-out``
    with ``new_since`` among its parameters.
    """
    if data.timestamp is None:
        raise DataError("new_since needs timestamps; this log has none")
    seqs = data.sequences()
    if len(seqs.items) == 0:
        raise DataError("new_since: the interaction log is empty")
    times = seqs.column(TIMESTAMP)
    lengths = seqs.lengths()
    ends = seqs.offsets[1:]
    last = np.where(lengths > 0, ends - 1, 0)
    validated = np.flatnonzero((lengths >= 2) & (times[last] >= since))
    if len(validated) == 0:
        raise DataError(
            f"new_since={since}: no user has an event before their last one at or after it, so nothing "
            "to validate on (use split 'none' with a fixed number of epochs)"
        )
    drop = np.zeros(seqs.n_users, dtype=np.int64)
    drop[validated] = 1
    train = _drop_last(seqs, drop)
    valid = _cases(validated, train.take(validated), seqs, ends[validated] - 1)
    none = np.zeros(0, dtype=np.int64)
    test = EvalSet(none, seqs.take(none), none)
    return Split(DEFAULT_SPLIT, train, valid, test, {"new_since": since})


def leave_last_qualifying_out(
    data: Interactions, target_events: str = "", min_rating: float | None = None
) -> Split:
    """Leave-one-out whose targets are *qualifying* events: of the ``target_events`` types (comma-separated
    names of ``data.events``, e.g. ``"buy"`` for taobao's "next buy") and rated at least ``min_rating``.

    The test target is each user's last qualifying event, its input every event before it (of any type);
    the validation target is the qualifying event before that one, with every event before it as input;
    training is every event before the validation target. Events after a user's test target are left out
    (they happened after the request). Users with fewer than two qualifying events, or with none before the
    validation target, train on all their events. ``EvalSet.target_columns`` hold the targets' own columns.
    """
    seqs = data.sequences()
    ok = np.ones(len(seqs.items), dtype=bool)
    names = [n.strip() for n in target_events.split(",") if n.strip()]
    if names:
        if data.events is None:
            raise DataError(f"target_events={target_events!r}: the data has no event column")
        unknown = [n for n in names if n not in data.events]
        if unknown:
            raise DataError(
                f"target_events: unknown event {unknown[0]!r}; the event types are {data.events.to_list()}"
            )
        ok &= np.isin(seqs.column("event"), data.events.to_internal(names))
    if min_rating is not None:
        ok &= seqs.column("rating") >= min_rating
    users = seqs.owners()  # (M,) the user of each event
    idx = np.flatnonzero(ok)  # qualifying events, by user then time
    last = np.r_[users[idx][1:] != users[idx][:-1], True] if len(idx) else np.zeros(0, dtype=bool)
    test_pos = idx[last]  # each user's last qualifying event
    has_two = np.r_[False, users[idx][1:] == users[idx][:-1]][last] if len(idx) else last
    evaluable_rows = (
        has_two & (idx[np.flatnonzero(last) - 1] > seqs.offsets[users[test_pos]]) if len(idx) else last
    )
    test_pos = test_pos[evaluable_rows]
    valid_pos = idx[np.flatnonzero(last)[evaluable_rows] - 1]  # the qualifying event before the test target
    evaluable = users[test_pos]
    if len(evaluable) == 0:
        raise DataError("no user has two qualifying events with an event before them; nothing to evaluate")
    cut_valid = np.full(seqs.n_users, np.iinfo(np.int64).max)
    cut_valid[evaluable] = valid_pos
    cut_test = np.full(seqs.n_users, np.iinfo(np.int64).max)
    cut_test[evaluable] = test_pos
    at = np.arange(len(seqs.items))
    train = seqs.select(at < cut_valid[users])
    before_test = seqs.select(at < cut_test[users])
    valid = _cases(evaluable, train.take(evaluable), seqs, valid_pos)
    test = _cases(evaluable, before_test.take(evaluable), seqs, test_pos)
    # The record names the target types and threshold, so a result says what was predicted ("next buy").
    params: dict[str, float | str] = {"target_events": ",".join(names)} if names else {}
    if min_rating is not None:
        params["min_rating"] = float(min_rating)
    return Split("last-qualifying", train, valid, test, params)


@dataclass(frozen=True)
class SplitSettings:
    """How a log is split: the split's ``name`` (one of :data:`SPLITS`) and the settings that apply to
    it, checked together where they enter, before any data is read.

    ``valid_users`` > 0 (leave-one-out only) validates on that many users drawn with ``seed``.
    ``last-qualifying`` (:func:`leave_last_qualifying_out`) tests each user's last event of the
    ``target_events`` types (comma-separated names) rated at least ``min_rating``: "next buy", "liked".
    """

    name: str = DEFAULT_SPLIT
    valid_users: int = 0
    seed: int = 0
    target_events: str = ""
    min_rating: float | None = None

    def __post_init__(self) -> None:
        if self.name not in SPLITS:
            raise ValueError(f"unknown split {self.name!r}; use {', '.join(SPLITS)}")
        if self.valid_users and self.name != "leave-one-out":
            raise ValueError(
                f"valid_users (--valid-users) applies to the leave-one-out split only, not {self.name}"
            )
        if (self.target_events.strip() or self.min_rating is not None) and self.name != "last-qualifying":
            raise ValueError(
                f"target_events / min_target_rating (--target-events, --min-target-rating) apply to the "
                f"last-qualifying split only, not {self.name}"
            )

    @classmethod
    def described(cls, described: str) -> SplitSettings:
        """The settings that remake a split from its :meth:`Split.describe` string (the default split's
        when the name is not one of :data:`SPLITS`)."""
        name, params = parse_split(described)
        if name not in SPLITS:
            return cls()
        rating = params.get("min_rating")
        return cls(
            name,
            int(params.get("valid_users", 0)),
            int(params.get("seed", 0)),
            str(params.get("target_events", "")),
            None if rating is None else float(rating),
        )

    def make(self, data: Interactions) -> Split:
        """The split of ``data`` these settings name."""
        if self.name == "temporal":
            return temporal_split(data)
        if self.name == "last-qualifying":
            return leave_last_qualifying_out(data, self.target_events, self.min_rating)
        return leave_one_out(data, valid_users=self.valid_users, seed=self.seed)


def make_split(
    data: Interactions,
    name: str = DEFAULT_SPLIT,
    valid_users: int = 0,
    seed: int = 0,
    *,
    target_events: str = "",
    min_rating: float | None = None,
) -> Split:
    """The split named ``name`` (one of :data:`SPLITS`) with the settings of :class:`SplitSettings`."""
    return SplitSettings(name, valid_users, seed, target_events, min_rating).make(data)


def final_split(data: Interactions) -> Split:
    """Every event of ``data`` trains; no validation or test cases (the final fit before deployment)."""
    seqs = data.sequences()
    empty = EvalSet(
        np.zeros(0, dtype=np.int64), seqs.take(np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.int64)
    )
    return Split(FINAL, seqs, empty, empty, {})


def temporal_split(data: Interactions, valid_fraction: float = 0.1, test_fraction: float = 0.1) -> Split:
    """Global temporal split: two time cut-offs taken from the timestamp quantiles.

    Interactions before the validation cut-off train the model. A user with history before a
    cut-off and at least one interaction after it becomes an evaluation case whose target is
    the first item at or after the cut-off and whose input is everything before it; the
    validation cases only use interactions before the test cut-off.
    """
    if data.timestamp is None:
        raise DataError("temporal split needs timestamps; this dataset has none (use leave-one-out)")
    if not (0 < valid_fraction < 1 and 0 < test_fraction < 1 and valid_fraction + test_fraction < 1):
        raise DataError("temporal split: fractions must be in (0, 1) and sum to less than 1")
    ts = data.timestamp
    t_test = float(np.quantile(ts, 1.0 - test_fraction))
    t_valid = float(np.quantile(ts, 1.0 - test_fraction - valid_fraction))
    seqs = data.sequences()
    before_valid = ts < t_valid
    train = seqs.select(before_valid)
    valid = _cases_after(seqs, ts, t_valid, t_test)
    test = _cases_after(seqs, ts, t_test, np.inf)
    if len(test) == 0:
        raise DataError("temporal split: no user has interactions both before and after the test cut-off")
    return Split("temporal", train, valid, test, {"valid_cutoff": t_valid, "test_cutoff": t_test})


def _drop_last(seqs: Sequences, drop: np.ndarray) -> Sequences:
    keep = np.ones(len(seqs.items), dtype=bool)
    ends = seqs.offsets[1:]
    for k in (1, 2):
        rows = np.flatnonzero(drop >= k)
        keep[ends[rows] - k] = False
    return seqs.select(keep)


def _cases(users: np.ndarray, histories: Sequences, seqs: Sequences, target_pos: np.ndarray) -> EvalSet:
    """Cases whose targets are the elements of ``seqs`` at ``target_pos``, with their own columns."""
    columns = {name: values[target_pos] for name, values in seqs.columns.items()}
    return EvalSet(users, histories, seqs.items[target_pos], columns)


def _cases_after(seqs: Sequences, ts: np.ndarray, cut: float, upper: float) -> EvalSet:
    users = seqs.owners()
    history = seqs.select(ts < cut)
    after = np.flatnonzero((ts >= cut) & (ts < upper))
    # First interaction at/after the cut-off per user (the log is chronological per user).
    first_users, first_pos = np.unique(users[after], return_index=True)
    rows = first_users[history.lengths()[first_users] > 0]
    target_pos = after[first_pos][np.isin(first_users, rows)]
    return _cases(rows, history.take(rows), seqs, target_pos)
