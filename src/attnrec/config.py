"""Config dataclasses from dicts, TOML files and ``key=value`` overrides; unknown keys are errors."""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

C = TypeVar("C")


class ConfigError(ValueError):
    """An invalid configuration: unknown key, wrong type or bad value."""


def config_from_dict(cls: type[C], values: dict[str, Any], *, base: C | None = None) -> C:
    """Instantiate dataclass ``cls`` from ``values`` (over ``base`` or the defaults).

    Unknown keys raise :class:`ConfigError` listing the valid ones; strings are converted to the
    field's type, so CLI overrides like ``hidden=64`` work.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(
            f"{cls.__name__}: unknown key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    kwargs = dataclasses.asdict(base) if base is not None else {}  # type: ignore[call-overload]
    for key, val in values.items():
        kwargs[key] = _coerce(cls.__name__, key, val, hints[key])
    try:
        cfg = cls(**kwargs)
        check_finite(cfg)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{cls.__name__}: {e}") from e
    return cfg


def check_finite(cfg: object) -> None:
    """A one-line ``ValueError`` naming the number settings of config dataclass ``cfg`` that are NaN or
    infinite (``lr=nan`` passed "must be positive", as nan <= 0 is false, and trained NaN weights; a
    model's ``reg=nan`` or ``init_std=inf`` likewise); settings that are None are not numbers."""
    hints = typing.get_type_hints(type(cfg))
    names = [f.name for f in dataclasses.fields(cfg)]  # type: ignore[arg-type]
    floats = [n for n in names if float in (hints[n], *typing.get_args(hints[n]))]
    odd = [n for n in floats if getattr(cfg, n) is not None and not math.isfinite(getattr(cfg, n))]
    if odd:
        raise ValueError(f"{', '.join(odd)} must be a finite number, not {getattr(cfg, odd[0])}")


def config_to_dict(cfg: object) -> dict[str, Any]:
    """Plain JSON-ready dict of a config dataclass."""
    if not dataclasses.is_dataclass(cfg) or isinstance(cfg, type):
        raise TypeError(f"{type(cfg).__name__} is not a config dataclass instance")
    return dataclasses.asdict(cfg)


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """``["a=1", "b=x"]`` -> ``{"a": "1", "b": "x"}``."""
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise ConfigError(f"override {p!r} is not of the form key=value")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load_toml(path: str | Path, sections: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Read a TOML config whose top-level tables must be among ``sections``."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e})") from e
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {', '.join(unknown)}; valid: {', '.join(sections)}")
    for s in sections:  # model = 3 at the top was a TypeError traceback
        if not isinstance(data.get(s, {}), dict):
            raise ConfigError(f"{path}: {s} must be a table ([{s}] with key = value lines), not {data[s]!r}")
    return {s: dict(data.get(s, {})) for s in sections}


def resolve_overrides(
    sections: Mapping[str, type], pairs: list[str], toml_path: str | Path | None = None
) -> dict[str, dict[str, Any]]:
    """Settings per section from a TOML file (one table per section) and ``key=value`` overrides.

    ``sections`` names the config dataclass of each section, e.g. ``{"model": SASRecConfig,
    "train": TrainConfig}``. Keys may be prefixed ``<section>.``; an unprefixed key is accepted
    when exactly one section has it. Unknown keys are errors that list every valid key. Overrides
    win over the file. The values stay as written (strings from ``pairs``): the config classes
    convert them (:func:`config_from_dict`).
    """
    keys = {name: {f.name for f in dataclasses.fields(cls)} for name, cls in sections.items()}
    found: dict[str, dict[str, Any]] = {name: {} for name in sections}
    if toml_path is not None:
        found |= load_toml(toml_path, tuple(sections))
    valid = ", ".join(f"{name}.{k}" for name in sections for k in sorted(keys[name]))
    for key, value in parse_overrides(pairs).items():
        section, _, name = key.rpartition(".")
        owners = [s for s in sections if name in keys[s]] if not section else [section]
        if section and section not in sections:
            raise ConfigError(f"--set {key}: unknown key; valid keys: {valid}")
        if section and name not in keys[section]:
            raise ConfigError(f"--set {key}: unknown {section} key {name!r}; valid keys: {valid}")
        if not owners:
            raise ConfigError(f"--set {key}: unknown key; valid keys: {valid}")
        if len(owners) > 1:
            raise ConfigError(
                f"--set {key}: ambiguous, both configs have it; write "
                + " or ".join(f"{s}.{name}" for s in owners)
            )
        found[owners[0]][name] = value
    return found


def _coerce(owner: str, key: str, val: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if val is None or (isinstance(val, str) and val.lower() in ("none", "null")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(owner, key, val, inner[0])
    if origin in (tuple, list):
        if isinstance(val, str):
            val = [v for v in val.replace(",", " ").split() if v]
        elif not isinstance(val, (list, tuple)):  # 64 for (64,) was a TypeError traceback
            raise ConfigError(f"{owner}.{key}: {val!r} is not a list")
        elem = args[0] if args else str
        seq = [_coerce(owner, key, v, elem) for v in val]
        return tuple(seq) if origin is tuple else seq
    convert = _SCALARS.get(hint)
    if convert is None:
        return val
    name = hint.__name__ if isinstance(hint, type) else str(hint)
    if not isinstance(val, str) and not _TAKES[hint](val):
        # hidden = true was 1, a list where a name goes was its text, compile = 2 was True
        raise ConfigError(f"{owner}.{key}: {val!r} is not a valid {name}")
    try:
        return convert(val)
    except (TypeError, ValueError):
        raise ConfigError(f"{owner}.{key}: {val!r} is not a valid {name}") from None


def _to_bool(val: Any) -> bool:
    if not isinstance(val, str):
        return bool(val)
    low = val.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(val)


def _to_int(val: Any) -> int:
    if isinstance(val, float) and not val.is_integer():  # 2.5 is not an int setting; 2.0 is
        raise ValueError(val)
    return int(val)


# The scalar types a config field may have, each with its one conversion from TOML or --set text.
_SCALARS: dict[object, typing.Callable[[Any], Any]] = {bool: _to_bool, int: _to_int, float: float, str: str}


def _number(val: Any) -> bool:
    return isinstance(val, numbers.Real) and not isinstance(val, bool)


# The values other than text each scalar type takes from TOML or Python: a bool is no number, and a
# number, list or table no bool or name (a path names a file).
_TAKES: dict[object, typing.Callable[[Any], bool]] = {
    bool: lambda val: isinstance(val, bool),
    int: _number,
    float: _number,
    str: lambda val: isinstance(val, os.PathLike),
}
