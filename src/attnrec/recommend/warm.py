"""Warm starts: a new fit that begins from a fitted model's weights, its ID maps extended.

A warm start never renumbers: the old users and items keep their internal indices and the IDs the
new log adds are appended (:func:`extend_log`). The model's tables grow for them
(:func:`grown_core`): a model built from item features encodes the new items with its training
codes (as :meth:`~attnrec.recommend.Recommender.add_items` does); every other new row is the one the
model's own initialisation gives at the start of training, from the seeded generator. Every other
weight is copied; settings whose weights cannot be copied (another hidden size, another number of
layers) are refused in one line that names them.

A warm start may fine-tune on the new events only (``new_since``, :func:`new_events`): the users with an
event at or after that time train, each on the events from there on with the history before them as the
input context, and only those events are targets; so a nightly fine-tune costs what the day's events
cost, not what the whole log costs. Its number of epochs can be validated: with the leave-one-out split
each user with new events holds their last event out (:func:`~attnrec.data.split.leave_last_new_out`), the
fine-tune stops early on those cases and keeps its best epoch, which the final fit then trains for.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any  # settings dicts

import numpy as np
import torch

from attnrec.config import ConfigError, config_to_dict
from attnrec.data.schema import TIMESTAMP, IdMap, Interactions, Sequences
from attnrec.data.split import DEFAULT_SPLIT, FINAL, Split
from attnrec.models.batches.builders import targets_since
from attnrec.models.contracts import Factorised
from attnrec.models.event_context import EventFields
from attnrec.models.item_context import ModelContext
from attnrec.models.registry import ModelSpec
from attnrec.recommend import cold_items
from attnrec.recommend.model_core import ModelCore, build_core
from attnrec.training.train_config import TrainConfig

#: Where a new item's row starts in a warm start (``fit(new_item_rows=...)``): the model's initialisation (the
#: default), or the histories that led to it (:func:`seed_new_items`).
NEW_ITEM_ROWS = ("initial", "histories")


@dataclass(frozen=True)
class WarmSource:
    """What a warm start takes from the old model: its name, settings, ID maps, weights and context."""

    model: str
    config: object
    train: Mapping[str, Any]  # its training settings (a fine-tune starts from them)
    users: IdMap
    items: IdMap
    events: IdMap | None
    core: ModelCore
    context: ModelContext | None
    where: str  # the old model as the errors name it (a directory, or "init_from")


def extended(old: IdMap, ids: np.ndarray) -> IdMap:
    """``old`` with the IDs of ``ids`` it does not know appended, in their order (old indices kept)."""
    new = [str(x) for x in ids if x not in old]
    return IdMap(np.concatenate([old.external, np.array(new, dtype=object)]), old.offset)


def extend_log(data: Interactions, source: WarmSource) -> Interactions:
    """``data`` indexed through ``source``'s ID maps, extended with its new users, items and event types.

    Old IDs keep their internal index; new ones follow in order of first appearance in ``data``. The
    log is re-sorted by the new user index (stable, so each user's events keep their time order).
    """
    users, items = extended(source.users, data.users.external), extended(source.items, data.items.external)
    user_of = users.to_internal(list(data.users.external))  # data's user index -> extended index
    item_of = items.to_internal(list(data.items.external))
    user = user_of[data.user - data.users.offset]
    item = item_of[data.item - data.items.offset]
    order = np.argsort(user, kind="stable")

    def taken(values: np.ndarray | None) -> np.ndarray | None:
        return None if values is None else np.asarray(values)[order]

    events = data.events
    if data.event is not None and source.events is not None:
        events = extended(source.events, np.array(sorted({str(x) for x in data.event}), dtype=object))
    # a declared signal the old model reads keeps its vocabulary (a value it never saw: the unknown code)
    read = source.context.vocabularies if source.context is not None else {}
    vocabularies = {**data.vocabularies, **{k: v for k, v in read.items() if k in data.signals}}
    return dataclasses.replace(
        data,
        user=user[order],
        item=item[order],
        users=users,
        items=items,
        timestamp=taken(data.timestamp),
        rating=taken(data.rating),
        event=taken(data.event),
        events=events,
        signals={k: np.asarray(v)[order] for k, v in data.signals.items()},
        vocabularies=vocabularies,
    )


def indexed_like(data: Interactions, source: WarmSource) -> bool:
    """Whether ``data``'s ID maps already begin with ``source``'s (so :func:`extend_log` renumbers
    nothing)."""
    return all(
        len(ids) >= len(old) and bool(np.array_equal(ids.external[: len(old)], old.external))
        for ids, old in ((data.users, source.users), (data.items, source.items))
    )


def settings(source: WarmSource, model: str, given: Mapping[str, Any], config_cls: type) -> dict[str, Any]:
    """The settings of the warm-started model: the old model's, with the ones the caller ``given`` over them.

    A model of another type is refused (its weights mean something else).
    """
    if source.model != model:
        raise ConfigError(f"{source.where}: a {source.model} model; a {model} model cannot start from it")
    old = config_to_dict(source.config)
    unknown = sorted(set(given) - set(old))
    if unknown:
        raise ConfigError(f"{model}: unknown settings {', '.join(unknown)}")
    return old | dict(given)


def check_events(source: WarmSource, config: object, events: IdMap | None) -> None:
    """A model that reads event types cannot read types its table has no row for: refused in one line."""
    if not isinstance(config, EventFields) or not config.event_input or events is None:
        return
    if config.n_events and len(events) > config.n_events:
        new = events.to_list()[config.n_events :]
        raise ConfigError(
            f"{source.where}: the log has event types the model has no embedding for "
            f"({', '.join(new[:5])}; it reads n_events={config.n_events}); retrain it from scratch"
        )


def grown_core(
    spec: ModelSpec,
    config: object,
    source: WarmSource,
    data: Interactions,
    seed: int,
    context: ModelContext | None,
) -> tuple[ModelCore, ModelContext | None]:
    """The old weights in a model sized for ``data`` (whose ID maps extend the old ones), and its context.

    New item rows come from item features when the model builds its item table from them, else from
    the initialisation of a fresh model of the new size seeded with ``seed``; so do new user rows.
    """
    core = source.core
    n_old_items = len(source.items)
    new_items = data.items.to_list()[n_old_items:]
    if source.context is not None and source.context.item_features is not None:
        # The item table is built from features: the new items get rows from their training codes.
        core = copy.deepcopy(core).cpu()  # grown in place: the old model stays as it was
        if new_items and not cold_items.takes_new_items(core, source.context, config):
            raise ConfigError(
                f"{source.where}: the model reads item features only beside the item IDs, so the "
                f"{len(new_items):,} new items get no rows from them; train it from scratch"
            )
        if new_items:
            if data.item_features is None:
                raise ConfigError(f"{source.where}: the model reads item features; the new log has none")
            table = data.item_features.rekey({i: i for i in new_items})
            cold_items.extend_items(core, source.context, source.items, table)
        events = data.events if source.context.events is not None else None
        context = dataclasses.replace(source.context, events=events)
        fresh_state: Mapping[str, torch.Tensor] = {}
    else:
        fresh = build_core(spec, config, data.n_users, data.n_items, seed=seed, context=context)
        fresh_state = fresh.state_dict()
    old_state = core.state_dict()
    target = fresh_state or old_state
    merged = {key: _grown(key, old_state[key], target.get(key), source, data, config) for key in old_state}
    missing = sorted(set(target) - set(old_state))
    if missing:
        raise ConfigError(
            f"{source.where}: the settings add weights the old model lacks ({', '.join(missing[:3])})"
        )
    if fresh_state:
        core = fresh
    core.load_state_dict(merged)
    return core, context


def _grown(
    key: str,
    old: torch.Tensor,
    new: torch.Tensor | None,
    source: WarmSource,
    data: Interactions,
    config: object,
) -> torch.Tensor:
    """The old tensor ``old`` in the shape of the fresh ``new``: equal shapes copy; a table whose first
    dimension grew by the new items (or users) keeps its old rows at their indices, its trailing rows
    past the catalog (BERT4Rec's [mask]) at the end, and the fresh rows between."""
    if new is None:
        raise ConfigError(f"{source.where}: weight {key} of the old model has no place in the new one")
    if old.shape == new.shape:
        return old.detach().clone()
    grow_items = len(data.items) - len(source.items)
    grow_users = len(data.users) - len(source.users)
    if old.shape[1:] == new.shape[1:] and new.shape[0] > old.shape[0]:
        grew = int(new.shape[0] - old.shape[0])
        item_rows = len(source.items) + source.items.offset
        if grew == grow_items and (grew != grow_users or 0 <= old.shape[0] - item_rows <= 2):
            base = min(item_rows, int(old.shape[0]))
        elif grew == grow_users:
            base = min(len(source.users), int(old.shape[0]))
        else:
            base = -1
        if base >= 0:
            out = new.detach().clone()
            out[:base] = old[:base]
            tail = int(old.shape[0]) - base
            if tail:
                out[-tail:] = old[base:]
            return out
    raise ConfigError(
        f"{source.where}: weight {key} is {list(old.shape)} in the old model and {list(new.shape)} with "
        f"these settings; {_differing(source.config, config) or 'the settings do not fit its weights'}"
    )


def _differing(old: object, new: object) -> str:
    """The settings that differ between ``old`` and ``new``, as ``name=new (the old model has old)``."""
    a, b = config_to_dict(old), config_to_dict(new)
    diffs = [f"{k}={b[k]!r} (the old model has {a.get(k)!r})" for k in b if a.get(k) != b[k]]
    return "settings that differ: " + ", ".join(diffs) if diffs else ""


def check_new_since(new_since: object, data: Interactions, warm: bool, split: object) -> int:
    """``new_since`` as whole Unix seconds, after checking a fine-tune on new events can use it: a warm
    start (``warm``) on a timestamped log with an event at or after it, and a split that trains on every
    new event (``"none"``, the final fit) or validates on the new users' last events (``"leave-one-out"``
    or ``None``, made by :func:`~attnrec.data.split.leave_last_new_out`, or such a :class:`Split` made
    with the same time). Anything else is a one-line :class:`ConfigError`."""
    if isinstance(new_since, bool) or not isinstance(new_since, int | float | np.integer | np.floating):
        raise ConfigError(f"new_since must be a time in Unix seconds, not {type(new_since).__name__}")
    if not math.isfinite(new_since):
        raise ConfigError(f"new_since must be a finite time in Unix seconds, not {new_since}")
    if not warm:
        raise ConfigError("new_since fine-tunes a warm start on the new events: give init_from too")
    since = math.floor(new_since)
    if isinstance(split, Split):
        if split.name != FINAL and split.params.get("new_since") != since:
            raise ConfigError(
                f"new_since: the split {split.describe()} validates users without new events; give the split "
                "by name ('leave-one-out' or 'none') or make it with leave_last_new_out"
            )
    elif split not in (None, FINAL, DEFAULT_SPLIT):
        raise ConfigError(
            f"new_since trains on every new event or validates on the new users' last ones: use split "
            f"'none' or 'leave-one-out', not {split!r}"
        )
    if data.timestamp is None:
        raise ConfigError("new_since needs timestamps; this log has none")
    if not len(data.timestamp) or float(np.max(data.timestamp)) < since:
        raise ConfigError(f"new_since={new_since:g}: no event at or after it, so nothing new to train on")
    return since


STOPPING = ("patience", "min_epochs", "smooth")
"""The stopping settings a validated fine-tune takes from the library's defaults, not from the old model."""


def fine_tune_stopping(cfg: TrainConfig, given: Mapping[str, Any]) -> TrainConfig:
    """``cfg`` with the library's default :data:`STOPPING` settings where the caller ``given`` none: the old
    model's were chosen for a fit from scratch (settings chosen from the data ask for 20 epochs or more),
    while a fine-tune on a day's events may be best after one."""
    default = TrainConfig()
    return dataclasses.replace(cfg, **{k: getattr(default, k) for k in STOPPING if k not in given})


def new_events(train: Sequences, since: int, context: int | None) -> Sequences:
    """The training sequences of a fine-tune on the events at or after ``since`` (Unix seconds).

    Every user with such an event keeps those events and the ``context`` events before the first of
    them (what the model reads as their input; ``None``: the whole history); every other user's sequence
    is empty, so the users keep their row (and index) but give no training row. The targets before
    ``since`` are taken out by the model's batches (:func:`only_new_targets`).
    """
    times = train.column(TIMESTAMP)
    users = train.owners()  # (M,) the user of each event
    new = np.flatnonzero(times >= since)
    first = np.full(train.n_users, len(train.items), dtype=np.int64)  # each user's first new event
    np.minimum.at(first, users[new], new)
    has_new = first < len(train.items)
    start = np.where(has_new, first - (len(train.items) if context is None else context), len(train.items))
    return train.select(np.arange(len(train.items)) >= start[users])


def seed_new_items(
    core: ModelCore, train: Sequences, n_old_items: int, max_len: int | None, batch_size: int = 256
) -> int:
    """Rows for the new items (indices past ``n_old_items``) from the histories that led to them.

    Each new item's row in the model's output table becomes the mean of the model's query vectors over
    the histories in ``train`` that it followed (its occurrences with at least one event before them),
    scaled to the mean norm of the old items' rows: where a softmax would first move the row, and at a
    trained row's size. A freshly initialised row is near zero, so a fine-tune on a few new events
    leaves a new item far below the trained ones in every ranking; seeded, it ranks where users like
    those who took it would find it. Only for a factorised model whose item vectors are one of its
    weights (SASRec, gSASRec, eSASRec, BERT4Rec, the factor models; not HSTU's normalised or a feature
    model's fused table); returns how many rows were set (0 when the model has no such table).
    """
    if not isinstance(core, Factorised) or not isinstance(core, torch.nn.Module):
        return 0
    vectors = core.item_vectors()
    table = next(
        (
            p
            for p in core.parameters()
            if p.data_ptr() == vectors.data_ptr() and p.shape[1:] == vectors.shape[1:] and p.dim() == 2
        ),
        None,
    )
    users = train.owners()  # (M,)
    first = train.offsets[:-1][users]  # (M,) each event's user's first position
    at = np.flatnonzero((train.items > n_old_items) & (np.arange(len(train.items)) > first))
    if table is None or not len(at):
        return 0
    starts = first[at] if max_len is None else np.maximum(first[at], at - max_len)
    when = train.columns.get(TIMESTAMP)
    sums = torch.zeros(int(table.shape[0]), table.shape[1], dtype=torch.float64)
    counts = torch.zeros(int(table.shape[0]), dtype=torch.float64)
    was_training = core.training
    core.eval()
    try:
        with torch.no_grad():
            for lo in range(0, len(at), batch_size):
                ends = at[lo : lo + batch_size]  # the occurrences; each history ends just before one
                inputs = core.score_inputs(
                    users[ends],
                    train.spans(starts[lo : lo + batch_size], ends),
                    None if when is None else when[ends],
                )
                query = core.query_vectors({k: v.to(table.device) for k, v in inputs.items()})  # (B, D)
                targets = torch.from_numpy(train.items[ends])
                sums.index_add_(0, targets, query.double().cpu())
                counts.index_add_(0, targets, torch.ones(len(ends), dtype=torch.float64))
    finally:
        core.train(was_training)
    seen = torch.nonzero(counts > 0).flatten()
    mean = sums[seen] / counts[seen, None]  # (S, D)
    scale = table.detach()[1 : n_old_items + 1].double().norm(dim=1).mean()
    seeded = mean / mean.norm(dim=1, keepdim=True).clamp_min(1e-12) * scale
    with torch.no_grad():
        table[seen.to(table.device)] = seeded.to(table.dtype).to(table.device)
    return len(seen)


@contextmanager
def only_new_targets(core: ModelCore, since: int | None) -> Iterator[None]:
    """While the block runs, ``core``'s training batches take targets only at or after ``since`` (``None``:
    every target, nothing changes); a model that does not train on next-item targets is refused in one
    line."""
    if since is None:
        yield
        return
    builder = getattr(core, "builder", None)  # the next-item models' batch builder
    limited = targets_since(builder, since)
    if limited is None:
        raise ConfigError(
            f"new_since: {type(core).__name__} does not train on next-item targets; fine-tune it on every "
            "event (leave new_since out)"
        )
    core.builder = limited  # type: ignore[attr-defined]  # a next-item model, checked above
    try:
        yield
    finally:
        core.builder = builder  # type: ignore[attr-defined]


__all__ = [
    "NEW_ITEM_ROWS",
    "WarmSource",
    "check_events",
    "check_new_since",
    "extend_log",
    "extended",
    "fine_tune_stopping",
    "grown_core",
    "indexed_like",
    "new_events",
    "only_new_targets",
    "seed_new_items",
    "settings",
]
