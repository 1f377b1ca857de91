"""Hyper-parameter search spaces as data: ``Float``, ``Int`` and ``Choice`` ranges over config fields.

A :class:`SearchSpace` has a ``model`` and a ``train`` table, each mapping a field of the model's
config dataclass (or of ``TrainConfig``) to a range. Models declare their default space beside
their config (``register(..., search_space=...)``); a TOML file overrides it entry by entry::

    [model]
    dropout = {low = 0.0, high = 0.5}
    hidden = {choices = [32, 64, 128]}
    n_negatives = {low = 32, high = 1024, log = true, when = {loss = ["sampled_ce"]}}

    [train]
    lr = {low = 1e-4, high = 1e-2, log = true}

``{low, high}`` is an :class:`Int` range on an integer field (``step`` allowed) and a
:class:`Float` range on a float field; ``{choices = [...]}`` is a :class:`Choice`. ``when`` makes
an entry conditional on another key of the same table (its sampled value, or its fixed value
when it is not searched; that key may not be conditional itself), so a parameter that means
nothing in a trial is not sampled there.
Unknown tables, keys and fields are errors naming the file and the key.

This module knows nothing of Optuna: :func:`sample` draws from any object with Optuna's
``suggest_*`` methods (:class:`Suggester`).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from attnrec.config import ConfigError, config_from_dict, load_toml

Scalar = bool | int | float | str
Condition = Mapping[str, tuple[Scalar, ...]]
TABLES: tuple[str, ...] = ("model", "train")


@dataclass(frozen=True)
class Float:
    """A float in ``[low, high]``, sampled on a log scale when ``log``."""

    low: float
    high: float
    log: bool = False
    when: Condition = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ConfigError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low <= 0:
            raise ConfigError(f"a log range needs low > 0, not {self.low}")


@dataclass(frozen=True)
class Int:
    """An integer in ``[low, high]`` in steps of ``step`` (log scale when ``log``, which needs step 1)."""

    low: int
    high: int
    step: int = 1
    log: bool = False
    when: Condition = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ConfigError(f"low ({self.low}) must be below high ({self.high})")
        if self.step < 1:
            raise ConfigError(f"step must be >= 1, not {self.step}")
        if self.log and (self.low < 1 or self.step != 1):
            raise ConfigError("a log range of integers needs low >= 1 and step 1")


@dataclass(frozen=True)
class Choice:
    """One of ``choices`` (scalars: bool, int, float or str)."""

    choices: tuple[Scalar, ...]
    when: Condition = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.choices:
            raise ConfigError("choices must not be empty")
        bad = [c for c in self.choices if not isinstance(c, bool | int | float | str)]
        if bad:
            raise ConfigError(f"choices must be numbers, strings or booleans, not {bad[0]!r}")


Dimension = Float | Int | Choice


@dataclass(frozen=True)
class SearchSpace:
    """The ranges searched, per table: ``model`` (the model's config) and ``train`` (``TrainConfig``)."""

    model: Mapping[str, Dimension] = field(default_factory=dict)
    train: Mapping[str, Dimension] = field(default_factory=dict)

    def tables(self) -> dict[str, Mapping[str, Dimension]]:
        return {"model": self.model, "train": self.train}

    def __len__(self) -> int:
        return len(self.model) + len(self.train)

    def merged(self, other: SearchSpace) -> SearchSpace:
        """This space with ``other``'s entries added, replacing those of the same key."""
        return SearchSpace({**self.model, **other.model}, {**self.train, **other.train})

    def without(self, fixed: Mapping[str, Sequence[str]]) -> SearchSpace:
        """The space less the keys in ``fixed`` (per table): settings the user fixed are not searched."""
        keep = {
            t: {k: d for k, d in dims.items() if k not in fixed.get(t, ())}
            for t, dims in self.tables().items()
        }
        return SearchSpace(keep["model"], keep["train"])

    def reachable(self, fixed: Mapping[str, Mapping[str, Any]]) -> SearchSpace:
        """The space less the entries whose ``when`` can never hold: on a fixed value (``fixed[table]``)
        outside its list, or on a searched choice none of whose values is in it."""

        def can_hold(dims: Mapping[str, Dimension], key: str, values: tuple[Scalar, ...], table: str) -> bool:
            dim = dims.get(key)
            if dim is None:
                return fixed.get(table, {}).get(key) in values
            return not isinstance(dim, Choice) or any(c in values for c in dim.choices)

        keep = {
            t: {k: d for k, d in dims.items() if all(can_hold(dims, c, v, t) for c, v in d.when.items())}
            for t, dims in self.tables().items()
        }
        return SearchSpace(keep["model"], keep["train"])

    def to_dict(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The space in the TOML file's shape (JSON-ready)."""
        return {t: {k: _entry(d) for k, d in dims.items()} for t, dims in self.tables().items()}

    def check(self, classes: Mapping[str, type], where: str) -> None:
        """Every key is a field of its table's config class (``classes["model"]``, ``classes["train"]``)
        of a type its range fits, and every ``when`` names a field of the same table that is not conditional
        itself."""
        for table, dims in self.tables().items():
            hints = _field_types(classes[table])
            for key, dim in dims.items():
                if key not in hints:
                    raise ConfigError(
                        f"{where}: unknown [{table}] key {key!r}; valid keys: {', '.join(sorted(hints))}"
                    )
                _check_kind(dim, hints[key], f"{where}: [{table}] {key}")
                for cond in dim.when:
                    if cond not in hints or (cond in dims and dims[cond].when):
                        raise ConfigError(
                            f"{where}: [{table}] {key}: 'when' names {cond!r}, which must be a "
                            f"{table} setting, searched unconditionally or not at all"
                        )

    def check_values(self, bases: Mapping[str, object], where: str) -> None:
        """Every choice and range end is a valid setting on its own over the base config of its table."""
        for table, dims in self.tables().items():
            for key, dim in dims.items():
                ends: tuple[Scalar, ...] = dim.choices if isinstance(dim, Choice) else (dim.low, dim.high)
                for value in ends:
                    try:
                        config_from_dict(type(bases[table]), {key: value}, base=bases[table])
                    except ConfigError as e:
                        raise ConfigError(
                            f"{where}: [{table}] {key} = {value!r} is not a valid setting ({e})"
                        ) from None


class Suggester(Protocol):
    """What :func:`sample` draws from: the ``suggest_*`` methods of an ``optuna.trial.Trial``."""

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float: ...

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int: ...

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


def sample(
    space: SearchSpace, trial: Suggester, fixed: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """One draw of every entry whose ``when`` holds, as ``{"model": {...}, "train": {...}}``.

    Parameters are named ``model.KEY`` / ``train.KEY``. ``fixed`` holds each table's settings that
    are not searched (a ``when`` on such a key reads it there).
    """
    drawn: dict[str, dict[str, Any]] = {}
    for table, dims in space.tables().items():
        chosen: dict[str, Any] = {}
        # unconditional entries first: the conditions read them (a condition never names a conditional entry)
        for key, dim in sorted(dims.items(), key=lambda kv: bool(kv[1].when)):
            if all(chosen.get(k, fixed.get(table, {}).get(k)) in values for k, values in dim.when.items()):
                chosen[key] = _suggest(trial, f"{table}.{key}", dim)
        drawn[table] = chosen
    return drawn


def space_from_toml(path: str | Path, classes: Mapping[str, type]) -> SearchSpace:
    """The space of a TOML file with ``[model]`` / ``[train]`` tables (see the module doc); errors name file
    and key."""
    data = load_toml(path, TABLES)
    tables: dict[str, dict[str, Dimension]] = {}
    for table in TABLES:
        hints = _field_types(classes[table])
        tables[table] = {}
        for key, entry in data[table].items():
            where = f"{path}: [{table}] {key}"
            if key not in hints:
                raise ConfigError(
                    f"{path}: unknown [{table}] key {key!r}; valid keys: {', '.join(sorted(hints))}"
                )
            try:
                tables[table][key] = _dimension(entry, hints[key])
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from None
    space = SearchSpace(tables["model"], tables["train"])
    space.check(classes, str(path))
    return space


# -- helpers ---------------------------------------------------------------------------------------
_ENTRY_KEYS = {"low", "high", "log", "step", "choices", "when"}


def _dimension(entry: object, hint: type) -> Dimension:
    """One TOML entry as a range of a field of type ``hint``."""
    if not isinstance(entry, dict):
        raise ConfigError(
            f"expected a table such as {{low = 0.1, high = 0.5}} or {{choices = [...]}}, not {entry!r}"
        )
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown entry key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_ENTRY_KEYS))}"
        )
    when = _condition(entry.get("when", {}))
    if "choices" in entry:
        extra = sorted(set(entry) - {"choices", "when"})
        if extra or not isinstance(entry["choices"], list):
            raise ConfigError("choices must be a list, and alone (besides when)")
        return Choice(tuple(entry["choices"]), when)
    if "low" not in entry or "high" not in entry:
        raise ConfigError("needs low and high (a range) or choices")
    log = entry.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"log must be true or false, not {log!r}")
    if hint is int:
        low, high, step = (_integer(entry.get(k, 1), k) for k in ("low", "high", "step"))
        return Int(low, high, step, log, when)
    if hint is float:
        if "step" in entry:
            raise ConfigError("step applies to integer settings only")
        low_f, high_f = (_number(entry[k], k) for k in ("low", "high"))
        return Float(low_f, high_f, log, when)
    raise ConfigError(f"a {hint.__name__} setting takes choices, not a range")


def _condition(value: object) -> dict[str, tuple[Scalar, ...]]:
    if not isinstance(value, dict) or not all(isinstance(v, list) and v for v in value.values()):
        raise ConfigError(
            f'when must be a table of non-empty lists, e.g. when = {{loss = ["sampled_ce"]}}, not {value!r}'
        )
    return {str(k): tuple(v) for k, v in value.items()}


def _integer(value: object, name: str) -> int:
    number = _number(value, name, "an integer")  # inf was an OverflowError traceback, nan a bare ValueError
    if int(number) != number:
        raise ConfigError(f"{name} must be an integer, not {value!r}")
    return int(number)


def _number(value: object, name: str, what: str = "a finite number") -> float:
    """``value`` of the range end or step ``name``: a TOML number, not inf or nan (``high = nan`` was
    "low must be below high (nan)")."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be {what}, not {value!r}")
    return float(value)


def _field_types(cls: type) -> dict[str, type]:
    """Each field's scalar type (``float | None`` -> ``float``; anything else not scalar -> ``object``)."""
    hints = typing.get_type_hints(cls)
    out: dict[str, type] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = (
            [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) else [hint]
        )
        scalar = args[0] if len(args) == 1 and args[0] in (bool, int, float, str) else object
        out[f.name] = scalar
    return out


def _check_kind(dim: Dimension, hint: type, where: str) -> None:
    """A declared range fits its field: ``Int`` on int fields, ``Float`` on float fields, choices on any
    scalar."""
    ok = (
        isinstance(dim, Choice)
        and hint is not object
        or isinstance(dim, Int)
        and hint is int
        or isinstance(dim, Float)
        and hint is float
    )
    if not ok:
        raise ConfigError(f"{where}: a {type(dim).__name__} range does not fit a {hint.__name__} setting")


def _suggest(trial: Suggester, name: str, dim: Dimension) -> Any:
    if isinstance(dim, Float):
        return trial.suggest_float(name, dim.low, dim.high, log=dim.log)
    if isinstance(dim, Int):
        return trial.suggest_int(name, dim.low, dim.high, step=dim.step, log=dim.log)
    return trial.suggest_categorical(name, list(dim.choices))


def _entry(dim: Dimension) -> dict[str, Any]:
    out: dict[str, Any]
    if isinstance(dim, Choice):
        out = {"choices": list(dim.choices)}
    elif isinstance(dim, Int):
        out = {"low": dim.low, "high": dim.high, "step": dim.step, "log": dim.log}
    else:
        out = {"low": dim.low, "high": dim.high, "log": dim.log}
    if dim.when:
        out["when"] = {k: list(v) for k, v in dim.when.items()}
    return out


__all__ = ["Choice", "Dimension", "Float", "Int", "SearchSpace", "Suggester", "sample", "space_from_toml"]
