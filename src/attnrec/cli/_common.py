"""Pieces shared by the command modules: consoles, the error wrapper, data loading, protocols, overrides.

Every command is wrapped in :func:`cli_errors`, so bad input ends with one red line on stderr and
exit code 2, never a traceback (set ``ATTNREC_DEBUG=1`` to see the traceback anyway).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from attnrec.checkpoint import CheckpointError
from attnrec.config import ConfigError, load_toml, parse_overrides
from attnrec.data.datasets import load_dataset
from attnrec.data.schema import DataError, Interactions
from attnrec.data.split import Split, leave_one_out, temporal_split
from attnrec.evaluation.protocol import Protocol
from attnrec.training.config import TrainConfig

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])

# What a user can get wrong; anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    DataError, ConfigError, CheckpointError, ValueError, KeyError, FileNotFoundError, OSError,
    FloatingPointError,
)


def error_line(message: str) -> None:
    """Print ``error: message`` in red on stderr (no markup interpretation, no hard wrapping)."""
    err.print(Text.assemble(("error: ", "bold red"), (message, "red")), soft_wrap=True)


def warn_line(message: str) -> None:
    err.print(Text.assemble(("warning: ", "bold yellow"), (message, "yellow")), soft_wrap=True)


def _message(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    if isinstance(e, FileNotFoundError) and e.filename:
        return f"{e.filename}: file not found"
    return str(e) or type(e).__name__


def cli_errors(func: F) -> F:
    """Turn user errors into one red line and exit code 2; Ctrl-C into exit code 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except USER_ERRORS as e:
            if os.environ.get("ATTNREC_DEBUG"):
                raise
            error_line(_message(e))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            error_line("interrupted")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def split_list(values: Iterable[str] | None) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``: repeatable options that also accept commas."""
    return [v.strip() for val in values or [] for v in val.split(",") if v.strip()]


# -- data ------------------------------------------------------------------------------------------
def load_data(
    spec: str, fmt: str = "auto", *, min_rating: float | None = None, k_core: int = 0,
    data_dir: str | None = None, columns: str | None = None, titles: str | None = None,
) -> Interactions:
    """Load ``spec`` ("demo", a named dataset such as "ml-1m", or a path) as an interaction log.

    ``columns`` maps roles to table columns as ``"user=uid,item=iid,timestamp=ts"`` (names or
    0-based positions); ``titles`` is an item-title file.
    """
    return load_dataset(spec, format=fmt, columns=parse_columns(columns), min_rating=min_rating,
                        k_core=k_core, data_dir=data_dir, titles=titles)


def parse_columns(text: str | None) -> dict[str, str | int] | None:
    """``"user=uid,item=2"`` -> ``{"user": "uid", "item": 2}``."""
    if not text:
        return None
    out: dict[str, str | int] = {}
    for part in split_list([text]):
        role, sep, col = part.partition("=")
        if not sep or not role.strip() or not col.strip():
            raise DataError(f"--columns: {part!r} is not of the form role=column (e.g. user=userId)")
        col = col.strip()
        out[role.strip()] = int(col) if col.isdigit() else col
    return out


class SplitName(str, Enum):
    leave_one_out = "leave-one-out"
    temporal = "temporal"


def make_split(data: Interactions, name: SplitName | str, valid_users: int = 0, seed: int = 0) -> Split:
    """The named split; ``valid_users`` > 0 (leave-one-out only) validates on that many users drawn with ``seed``."""
    name = name.value if isinstance(name, SplitName) else name
    if valid_users and name != "leave-one-out":
        raise ValueError("--valid-users applies to the leave-one-out split only")
    if name == "leave-one-out":
        return leave_one_out(data, valid_users=valid_users, seed=seed)
    if name == "temporal":
        return temporal_split(data)
    raise ValueError(f"unknown split {name!r}; use leave-one-out or temporal")


# -- protocols -------------------------------------------------------------------------------------
class ProtocolName(str, Enum):
    full = "full"
    sampled_uniform = "sampled-uniform"
    sampled_popularity = "sampled-popularity"


def make_protocol(name: ProtocolName | str, negatives: int = 100, seed: int = 0,
                  ks: tuple[int, ...] = (1, 5, 10)) -> Protocol:
    name = name.value if isinstance(name, ProtocolName) else name
    if name == "full":
        return Protocol("full", seed=seed, ks=ks)
    if name in ("sampled-uniform", "sampled-popularity"):
        return Protocol("sampled", n_negatives=negatives, sampler=name.split("-")[1], seed=seed, ks=ks)
    raise ValueError(f"unknown protocol {name!r}; use full, sampled-uniform or sampled-popularity")


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in split_list([text])}))
    except ValueError:
        raise ValueError(f"--ks must be comma-separated positive integers, not {text!r}") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--ks must be comma-separated positive integers, not {text!r}")
    return ks


# -- configuration ---------------------------------------------------------------------------------
def resolve_overrides(
    model_config_cls: type, pairs: list[str], toml_path: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Model and train settings from a TOML file (``[model]``/``[train]``) and ``key=value`` overrides.

    Keys may be prefixed ``model.`` or ``train.``; an unprefixed key is accepted when exactly one of
    the two configs has it. Unknown keys are errors that list every valid key. Overrides win over
    the file.
    """
    model_keys = {f.name for f in dataclasses.fields(model_config_cls)}
    train_keys = {f.name for f in dataclasses.fields(TrainConfig)}
    model_over: dict[str, Any] = {}
    train_over: dict[str, Any] = {}
    if toml_path is not None:
        tables = load_toml(toml_path, ("model", "train"))
        model_over.update(tables["model"])
        train_over.update(tables["train"])
    valid = ", ".join([f"model.{k}" for k in sorted(model_keys)] + [f"train.{k}" for k in sorted(train_keys)])
    for key, value in parse_overrides(pairs).items():
        section, _, name = key.rpartition(".")
        if section == "model" or (not section and name in model_keys and name not in train_keys):
            if name not in model_keys:
                raise ConfigError(f"--set {key}: unknown model key {name!r}; valid keys: {valid}")
            model_over[name] = value
        elif section == "train" or (not section and name in train_keys and name not in model_keys):
            if name not in train_keys:
                raise ConfigError(f"--set {key}: unknown train key {name!r}; valid keys: {valid}")
            train_over[name] = value
        elif not section and name in model_keys and name in train_keys:
            raise ConfigError(f"--set {key}: ambiguous, both configs have it; write model.{name} or train.{name}")
        else:
            raise ConfigError(f"--set {key}: unknown key; valid keys: {valid}")
    return model_over, train_over
