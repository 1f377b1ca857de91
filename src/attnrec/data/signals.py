"""Per-event signals: each column that travels with the events of a log, declared once.

A :class:`Signal` says everything attnrec needs to carry one per-event field from a file to a model
and back from a request: its name (the column of the data containers and sequences), its request
field and batch key, its kind (``categorical``, ``numeric`` or ``time``), the column names the
readers guess for it, how a request value is checked, and a line of help for the HTTP schema and
the CLI. The readers, :class:`~attnrec.data.schema.Interactions`, the model batches, the recommend
requests, the HTTP request bodies and the explanations all read this registry, so a new field is
one :func:`register_signal` call::

    from attnrec.data.signals import Signal, register_signal

    register_signal(Signal("device", "categorical", help="The device the event came from."))

The built-in signals (``timestamp``, ``event``, ``rating``) keep their own request keys
(``timestamps``, ``events``, ``ratings``) and encodings; a declared signal uses its name everywhere.
A categorical signal's values get a vocabulary from the training data (code 0 is padding, 1 an
unknown value, ``2..`` the values seen); a numeric one is read as a float (``NaN``: not known).
:mod:`attnrec.models.event_context` has what a model does with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Literal, cast

import numpy as np

Kind = Literal["categorical", "numeric", "time"]
KINDS: tuple[Kind, ...] = ("categorical", "numeric", "time")
#: Code of a categorical value the model's vocabulary does not hold (0 is padding).
UNKNOWN_CODE = 1
#: The batch key of the time of the request (not a per-event column, but a per-event model input).
REQUEST_TIME = "request_time"
_DTYPES: dict[Kind, np.dtype[np.generic]] = {
    "categorical": np.dtype(np.int64),
    "numeric": np.dtype(np.float32),
    "time": np.dtype(np.int64),
}


@dataclass(frozen=True)
class Signal:
    """The declaration of one per-event field.

    Parameters
    ----------
    name : str
        The column name in :class:`~attnrec.data.schema.Interactions` and
        :class:`~attnrec.data.schema.Sequences`, and the model setting ``signals`` lists.
    kind : {"categorical", "numeric", "time"}
        Categorical values are text (codes of a vocabulary learnt from the training data); numeric ones
        finite numbers; ``time`` is the log's timestamp (one per log).
    key : str
        The request field and batch key; ``""`` means ``name`` (the built-ins keep their plural keys).
    aliases : tuple of str
        Lower-case column names the readers look for when the caller maps no column; ``name`` is
        always one of them.
    minimum : float, optional
        Numeric signals: the smallest value a request may send.
    help : str
        One line for the HTTP schema and the documentation.
    encoder : str
        The model-side encoder (:func:`attnrec.models.event_context.register_encoder`); ``""`` means
        the kind's (an embedding table for categorical, a linear projection for numeric).
    builtin : bool
        One of attnrec's own signals, whose code paths predate the registry (set for those only).
    """

    name: str
    kind: Kind
    key: str = ""
    aliases: tuple[str, ...] = ()
    minimum: float | None = None
    help: str = ""
    encoder: str = ""
    builtin: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"a signal name must be an identifier, not {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(
                f"signal {self.name!r}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}"
            )
        object.__setattr__(self, "aliases", tuple(dict.fromkeys((self.name, *map(str.lower, self.aliases)))))

    @property
    def batch_key(self) -> str:
        """The request field and batch key of the signal."""
        return self.key or self.name

    @property
    def encoder_name(self) -> str:
        """The model-side encoder that reads the signal: ``encoder``, else the kind's."""
        return self.encoder or self.kind

    @property
    def dtype(self) -> np.dtype[np.generic]:
        """The dtype of the signal's column in the sequences: int64 codes or seconds, float32 numbers."""
        return _DTYPES[self.kind]

    @property
    def hidden_value(self) -> float:
        """What a position whose value is not known holds (BERT4Rec's [mask]): 0 for codes, NaN otherwise."""
        return 0.0 if self.kind == "categorical" else math.nan

    def request_values(self, values: Sequence[object]) -> np.ndarray:
        """A request's values as an array (text for categorical, float64 otherwise); a one-line
        ``ValueError`` for a value of the wrong type or below ``minimum``."""
        if self.kind == "categorical":
            if any(not isinstance(v, str) for v in values):
                raise ValueError(f"{self.batch_key} must be text values")
            return np.asarray(values, dtype=object)
        if any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values
        ):
            raise ValueError(f"{self.batch_key} must be finite numbers")
        arr = np.asarray(values, dtype=np.float64)
        if self.minimum is not None and len(arr) and arr.min() < self.minimum:
            raise ValueError(f"{self.batch_key} must be at least {self.minimum:g}")
        return arr

    def declaration(self) -> dict[str, object]:
        """The declaration as JSON, all but its name (a model directory's ``signals.json`` keeps those of
        the signals the model reads; :meth:`from_declaration` reads it back)."""
        return {f.name: _json(getattr(self, f.name)) for f in fields(self) if f.name in _DECLARED}

    @classmethod
    def from_declaration(cls, name: str, obj: object) -> Signal:
        """The signal ``name`` declared by ``obj`` (:meth:`declaration`'s JSON); a one-line ``ValueError``
        for anything else."""
        if not isinstance(obj, Mapping):
            raise ValueError(f"signal {name!r}: the declaration is not a JSON object")
        unknown = sorted(set(obj) - set(_DECLARED))
        if unknown:
            raise ValueError(f"signal {name!r}: unknown declaration field {unknown[0]!r}")
        for key, value in obj.items():
            if not _DECLARED[key](value):
                raise ValueError(f"signal {name!r}: {key} {str(value)[:40]!r} is not valid")
        values = dict(obj)
        if "aliases" in values:
            values["aliases"] = tuple(values["aliases"])
        return cls(name, **values)


def _json(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _text(value: object) -> bool:
    return isinstance(value, str)


def _number(value: object) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _texts(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# the fields a declaration saves, each with the check of its JSON value (``builtin`` stays in the code)
_DECLARED = {
    "kind": _text,
    "key": _text,
    "aliases": _texts,
    "minimum": _number,
    "help": _text,
    "encoder": _text,
}


_REGISTRY: dict[str, Signal] = {}


def register_signal(signal: Signal) -> Signal:
    """Declare ``signal``; a name or key another signal already uses is a ``ValueError``."""
    for other in _REGISTRY.values():
        taken = {other.name, other.batch_key} & {signal.name, signal.batch_key}
        if taken:
            raise ValueError(f"signal {signal.name!r}: {sorted(taken)[0]!r} is already declared")
    _REGISTRY[signal.name] = signal
    return signal


def adopt_signal(signal: Signal) -> Signal:
    """Declare ``signal`` unless the same declaration is already there (a saved model's declarations are
    adopted when it loads); a one-line ``ValueError`` when a different one of that name is."""
    known = _REGISTRY.get(signal.name)
    if known is None:
        return register_signal(signal)
    differ = [f.name for f in fields(signal) if getattr(known, f.name) != getattr(signal, f.name)]
    if differ:
        raise ValueError(
            f"signal {signal.name!r} is already declared with another {', '.join(differ)}; "
            "declare it as the model was trained (or not at all: the model declares it)"
        )
    return known


def declare_option(text: str) -> Signal:
    """Declare the signal of a command-line ``NAME:KIND`` (``device:categorical``, ``price:numeric``) unless a
    signal of that name and kind is declared already; returns the declaration. A one-line ``ValueError``
    for another form, a kind other than categorical or numeric, a built-in name or a name declared with
    another kind."""
    name, sep, kind = (part.strip() for part in text.partition(":"))
    if not sep or kind not in ("categorical", "numeric"):
        raise ValueError(f"{text!r} is not NAME:categorical or NAME:numeric (e.g. device:categorical)")
    known = find_signal(name) or by_key(name)
    if known is None:
        return register_signal(Signal(name, cast(Kind, kind)))
    if known.builtin or known.name != name:
        raise ValueError(
            f"{name!r} is built in: it has its own setting (event_input, rating_input, time_features)"
        )
    if known.kind != kind:
        raise ValueError(f"{name!r} is already declared as {known.kind}, not {kind}")
    return known


def unregister_signal(name: str) -> None:
    """Remove the declaration of ``name`` (a built-in cannot be removed)."""
    sig = get_signal(name)
    if sig.builtin:
        raise ValueError(f"{name!r} is a built-in signal")
    del _REGISTRY[name]


def get_signal(name: str) -> Signal:
    """The declaration named ``name``; a one-line ``KeyError`` listing the declared ones otherwise."""
    sig = _REGISTRY.get(name)
    if sig is None:
        raise KeyError(f"no signal {name!r} is declared (declared: {', '.join(_REGISTRY)})")
    return sig


def find_signal(name: str) -> Signal | None:
    """The declaration named ``name``, or ``None``."""
    return _REGISTRY.get(name)


def signals() -> Iterator[Signal]:
    """Every declared signal, built-ins first, then in declaration order."""
    return iter(tuple(_REGISTRY.values()))


def declared() -> Iterator[Signal]:
    """The signals declared beyond the built-ins (each carried by the generic path)."""
    return (s for s in signals() if not s.builtin)


def by_key(key: str) -> Signal | None:
    """The signal whose request field / batch key is ``key``, or ``None``."""
    return next((s for s in signals() if s.batch_key == key), None)


def batch_keys() -> frozenset[str]:
    """Every per-event model input key: each signal's batch key and the request time."""
    return frozenset({s.batch_key for s in signals()} | {REQUEST_TIME})


TIMESTAMP = register_signal(
    Signal(
        "timestamp",
        "time",
        key="timestamps",
        aliases=("time", "ts", "datetime", "date", "unixreviewtime", "event_time", "t_dat"),
        help="When the event happened (unix seconds, not decreasing).",
        builtin=True,
    )
)
EVENT = register_signal(
    Signal(
        "event",
        "categorical",
        key="events",
        aliases=("event_type", "type", "action", "behavior", "behaviour"),
        help="The event type, a name of the training log's event types (e.g. `view`, `buy`).",
        builtin=True,
    )
)
RATING = register_signal(
    Signal(
        "rating",
        "numeric",
        key="ratings",
        aliases=("overall", "score", "stars"),
        minimum=0.0,
        help="The rating (>= 0; half stars 0..5 as trained).",
        builtin=True,
    )
)

__all__ = [
    "EVENT",
    "KINDS",
    "RATING",
    "REQUEST_TIME",
    "TIMESTAMP",
    "UNKNOWN_CODE",
    "Kind",
    "Signal",
    "adopt_signal",
    "declare_option",
    "batch_keys",
    "by_key",
    "declared",
    "find_signal",
    "get_signal",
    "register_signal",
    "signals",
    "unregister_signal",
]
