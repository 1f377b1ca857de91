"""Per-event context of a recommendation request: the history's timestamps, event types and ratings, and
the time of the request (issue #19; :mod:`attnrec.models.event_context` has what the models do with them).

A request may send ``timestamps``, ``events`` (names of the model's event vocabulary), ``ratings`` and
every declared signal under its key (:mod:`attnrec.data.signals`), each aligned with its ``history``,
and a ``request_time``. :func:`request_columns` checks them (one-line
``ValueError``: lengths, types, order, ranges) and keeps the values of the known history items only, so a
column stays aligned with the items the model scores. A known user without a given history is scored
with its stored history's columns (:func:`stored_columns`). Models that read none of them ignore them;
the answer lists what was ignored (``Recommendation.ignored_inputs``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any  # request values are caller input of any type

import numpy as np
import torch

from attnrec.checkpoint import CheckpointError
from attnrec.data.schema import TIMESTAMP, DataError, IdMap, Sequences, signal_codes, signal_vocabulary
from attnrec.data.signals import EVENT, REQUEST_TIME, Signal, adopt_signal, by_key, get_signal, signals
from attnrec.models.event_context import EventFields
from attnrec.recommend.persistence import open_model_dir

VOCABULARIES = "signals"  # <model dir>/signals.json: the declarations of the signals the model reads
MAX_SECONDS = 2**53  # timestamps beyond this are not exact in a JSON number (nor a float64)


def event_keys() -> dict[str, str]:
    """Request key -> the per-event column it fills, for every declared signal (the request key is also
    the batch key a model reads it under, so the two cannot drift apart)."""
    return {s.batch_key: s.name for s in signals()}


def request_columns(
    request: Mapping[str, Any],
    history: Sequence[object] | None,
    keep: np.ndarray,
    events: IdMap | None,
    vocabularies: Mapping[str, IdMap] | None = None,
) -> dict[str, np.ndarray]:
    """The per-event columns a request sends for its ``history``, of the known items only (``keep`` ``(T,)``).

    Events without an event vocabulary (a model trained on a log without event types) are dropped: the
    model cannot read them; so is a categorical signal without its vocabulary in ``vocabularies``, and a
    value its vocabulary lacks gets the unknown code. Raises ``ValueError`` (one line) for a column
    without a history, a length other than the history's, a non-number, decreasing timestamps, a
    negative rating or an unknown event.
    """
    keys = event_keys()
    given = {key: request.get(key) for key in keys if request.get(key) is not None}
    if given and history is None:
        raise ValueError(f"{', '.join(given)} describe the events of `history`: send them with a history")
    out: dict[str, np.ndarray] = {}
    for key, values in given.items():
        if not isinstance(values, (list, tuple)) or len(values) != len(history or ()):
            n = len(values) if isinstance(values, (list, tuple)) else "no list of"
            raise ValueError(f"{key} has {n} values for a history of {len(history or ())} items")
        signal = by_key(key)
        assert signal is not None  # keys come from the declarations
        if signal is EVENT:
            if events is None:
                continue  # the model knows no event types: ignored (and reported as such)
            col = _event_codes(values, events)
        elif signal.builtin:
            col = _numbers(key, values)
        elif signal.kind == "categorical":
            vocabulary = (vocabularies or {}).get(signal.name)
            if vocabulary is None:
                continue  # the model reads no such signal: ignored (and reported as such)
            col = signal_codes(vocabulary, signal.request_values(values))
        else:
            col = signal.request_values(values)
        out[signal.name] = col[keep].astype(signal.dtype)
    return out


def _numbers(key: str, values: Sequence[object]) -> np.ndarray:
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        raise ValueError(f"{key} must be finite numbers")
    arr = np.asarray(values, dtype=np.float64)
    if key == "timestamps":
        if len(arr) and (np.abs(arr).max() > MAX_SECONDS):
            raise ValueError(f"timestamps must be seconds within +-2**53, not {arr[np.abs(arr).argmax()]:g}")
        if (np.diff(arr) < 0).any():
            raise ValueError("timestamps must not decrease: the history is oldest first")
        return np.floor(arr)
    if (arr < 0).any():
        raise ValueError(f"{key} must not be negative")
    return arr


def _event_codes(values: Sequence[object], events: IdMap) -> np.ndarray:
    codes = [events.get(v) if isinstance(v, str) else None for v in values]
    for v, c in zip(values, codes, strict=True):
        if c is None:
            raise ValueError(f"unknown event {v!r}; the model's event types are {events.to_list()}")
    return np.asarray(codes, dtype=np.int64)


def request_time_of(request: Mapping[str, Any], columns: Mapping[str, np.ndarray]) -> int | None:
    """The request's ``request_time`` (whole seconds), checked: a finite number, not before the history's
    last timestamp. ``None`` when not sent."""
    when = request.get(REQUEST_TIME)
    if when is None:
        return None
    if (
        isinstance(when, bool)
        or not isinstance(when, (int, float))
        or not math.isfinite(when)
        or abs(when) > MAX_SECONDS
    ):
        raise ValueError(f"request_time must be a number of seconds within +-2**53, not {when!r}")
    ts = columns.get(TIMESTAMP)
    if ts is not None and len(ts) and math.floor(when) < int(ts[-1]):
        raise ValueError(f"request_time {when:g} is before the history's last timestamp {int(ts[-1])}")
    return int(math.floor(when))


def stored_columns(histories: Sequences, user: int) -> dict[str, np.ndarray]:
    """The stored history's per-event columns of internal ``user`` (none when the model stored none)."""
    lo, hi = int(histories.offsets[user]), int(histories.offsets[user + 1])
    return {name: values[lo:hi] for name, values in histories.columns.items()}


def ignored_inputs(sent: Iterable[str], batch_keys: set[str]) -> list[str]:
    """The per-event request fields ``sent`` that the model's batch (``batch_keys``) does not read."""
    known = [*event_keys(), REQUEST_TIME]
    return [key for key in known if key in set(sent) and key not in batch_keys]


def history_arrays(histories: Sequences) -> dict[str, torch.Tensor]:
    """The stored histories as the 1-D arrays of a model directory: offsets, items and any per-event
    columns."""
    arrays = {
        "history_offsets": torch.as_tensor(histories.offsets),
        "history_items": torch.as_tensor(histories.items.astype(np.int32)),
    }
    return arrays | {f"history_{name}": torch.as_tensor(values) for name, values in histories.columns.items()}


def histories_from_arrays(arrays: Mapping[str, torch.Tensor], n_items: int, path: Path) -> Sequences:
    """The inverse of :func:`history_arrays` (a directory saved before columns were stored has none);
    a column that does not fit the items is a :class:`CheckpointError` naming ``path``."""
    columns = {
        s.name: arrays[f"history_{s.name}"].numpy() for s in signals() if f"history_{s.name}" in arrays
    }
    try:
        return Sequences(
            arrays["history_offsets"].numpy(),
            arrays["history_items"].numpy().astype(np.int64),
            n_items,
            columns,
        )
    except DataError as e:
        raise CheckpointError(f"{path}: stored history {e}") from None


def request_values(
    column: str, values: np.ndarray, events: IdMap | None, vocabularies: Mapping[str, IdMap]
) -> list[object]:
    """A stored column's ``values`` as a request sends them: event and categorical signal codes as their
    names (an unknown code as ``""``), numbers as they are."""
    signal = get_signal(column)
    vocabulary = events if signal is EVENT else vocabularies.get(column)
    if signal.kind != "categorical" or vocabulary is None:
        return list(values.tolist())
    names = vocabulary.to_list()
    return [names[c - vocabulary.offset] if c >= vocabulary.offset else "" for c in values.tolist()]


def signals_read(config: object) -> tuple[str, ...]:
    """The declared signals a model with ``config`` reads (its ``signals`` setting; none for a model
    without one)."""
    return config.signal_names() if isinstance(config, EventFields) else ()


def unsent_signals(columns: Mapping[str, np.ndarray], n: int, reads: Sequence[str]) -> dict[str, np.ndarray]:
    """``columns`` (of a history of ``n`` events) with each declared signal of ``reads`` they lack filled
    as "not known" (:attr:`~attnrec.data.signals.Signal.hidden_value`): a request need not send them."""
    fill = {name: get_signal(name) for name in reads if name not in columns}
    return dict(columns) | {name: np.full(n, s.hidden_value).astype(s.dtype) for name, s in fill.items()}


def signal_files(config: object, vocabularies: Mapping[str, IdMap]) -> dict[str, object]:
    """The JSON file of a model directory that declares the signals a model with ``config`` reads (its
    ``signals`` setting) with the vocabularies of the categorical ones: ``{name: declaration | {"values":
    [...]}}`` (none when the model reads no signal)."""
    out: dict[str, object] = {}
    for name in signals_read(config):
        values = {"values": vocabularies[name].to_list()} if name in vocabularies else {}
        out[name] = get_signal(name).declaration() | values
    return {VOCABULARIES: out} if out else {}


def signals_from_json(obj: object, path: Path) -> dict[str, IdMap]:
    """Declare the signals of :func:`signal_files` that are not declared yet and return the vocabularies
    (``{}`` when the file is absent). A malformed file, or a declaration other than the one this process
    already holds under that name, is a :class:`CheckpointError` naming ``path``. (A file written before
    declarations were saved holds the vocabularies only: ``{name: [values]}``.)"""
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: not a map of signal names to declarations")
    vocabularies = {}
    try:
        for name, entry in obj.items():
            if isinstance(entry, dict):
                entry = dict(entry)
                values = entry.pop("values", None)
                adopt_signal(Signal.from_declaration(str(name), entry))
            else:
                values = entry
            if values is not None:
                if not isinstance(values, list) or not all(isinstance(x, str) for x in values):
                    raise ValueError(f"signal {name!r}: values is not a list of text")
                vocabularies[str(name)] = signal_vocabulary(values)
    except (ValueError, DataError) as e:
        raise CheckpointError(f"{path}: {e}") from None
    return vocabularies


def declare_saved_signals(path: str | Path) -> dict[str, IdMap]:
    """Declare the signals the model directory ``path`` reads (as loading it does), e.g. before reading a
    log for it; returns their vocabularies."""
    saved = open_model_dir(path)
    return signals_from_json(saved.json(VOCABULARIES, default={}), saved.path / f"{VOCABULARIES}.json")


__all__ = [
    "REQUEST_TIME",
    "VOCABULARIES",
    "declare_saved_signals",
    "event_keys",
    "histories_from_arrays",
    "history_arrays",
    "ignored_inputs",
    "request_columns",
    "request_time_of",
    "request_values",
    "signal_files",
    "signals_from_json",
    "signals_read",
    "stored_columns",
    "unsent_signals",
]
