"""Pieces shared by the command modules: consoles, logging, the error wrapper, data loading.

Every command is wrapped in :func:`cli_errors`, so bad input ends with one red line on stderr and
exit code 2, never a traceback (set ``ATTNREC_DEBUG=1`` to see the traceback anyway). The option
types several commands declare, with the choices of ``--protocol`` and ``--split``, are in
:mod:`attnrec.cli._options`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_type_hints

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.text import Text

from attnrec.checkpoint import CheckpointError
from attnrec.config import ConfigError
from attnrec.data.datasets import load_dataset
from attnrec.data.feature_files import parse_feature_columns
from attnrec.data.schema import DataError, Interactions
from attnrec.data.signals import signals
from attnrec.store import StoreUnavailable

if TYPE_CHECKING:
    from attnrec.recommend import Recommender

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

# What a user can get wrong; anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    DataError,
    ConfigError,
    CheckpointError,
    ValueError,
    KeyError,
    FileNotFoundError,
    OSError,
    FloatingPointError,
    StoreUnavailable,  # a history store that cannot be reached (a Redis server down, a file locked)
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


class _CliLogHandler(RichHandler):
    """The CLI's log handler on stderr (a class of its own, so it is added once however often asked)."""


def log_to_stderr(verbose: bool) -> None:
    """attnrec's log lines (e.g. per epoch) on stderr when ``verbose``, else warnings only."""
    logger = logging.getLogger("attnrec")
    if not any(isinstance(h, _CliLogHandler) for h in logger.handlers):
        logger.addHandler(
            _CliLogHandler(console=err, show_path=False, show_level=False, show_time=False, markup=False)
        )
    logger.setLevel(logging.INFO if verbose else logging.WARNING)


def split_list(values: Iterable[str] | None) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``: repeatable options that also accept commas."""
    return [v.strip() for val in values or [] for v in val.split(",") if v.strip()]


# -- data ------------------------------------------------------------------------------------------
def load_data(spec: str) -> Interactions:
    """Load ``spec`` ("demo", a named dataset such as "ml-1m", or a path) as an interaction log, read with
    the defaults of the ``--data`` options (:meth:`DataOptions.load` reads it as a command's options say)."""
    return DataOptions().load(spec, spinner=False)


def data_option(help: str) -> Any:
    """``--data``/``-d``: what a command reads (each command words what it reads it for)."""
    return typer.Option("--data", "-d", help=help)


DataOpt = Annotated[
    str,
    data_option(
        "Dataset: 'demo' (built in), a named dataset (ml-1m, ml-20m, ml-100k, "
        "ml-latest-small, beauty, steam, amazon-toys, amazon-sports, taobao-sample, otto-sample) or a file "
        "path (CSV/TSV/Parquet, 'user item' pairs, MovieLens, Amazon JSON; .gz ok)."
    ),
]


MANIFEST_KEY_HELP = (
    "Key of signed model directories (at least 16 characters; also $ATTNREC_MANIFEST_KEY): a model "
    "saved is signed with it, a model loaded must verify with it (edited after saving: refused)."
)


@dataclass(frozen=True)
class LoadOptions:
    """How a saved model directory is opened: the options every model-loading command shares."""

    allow_unsigned: Annotated[
        bool,
        typer.Option(
            "--allow-unsigned",
            help="Load a model directory without manifest.json (saved by an old version; nothing tells an "
            "edited file from the saved one), or an unsigned one under --manifest-key.",
        ),
    ] = False
    manifest_key: Annotated[
        str | None,
        typer.Option(
            "--manifest-key", envvar="ATTNREC_MANIFEST_KEY", show_default=False, help=MANIFEST_KEY_HELP
        ),
    ] = None

    def recommender(self, model_dir: Path, device: str) -> Recommender:
        """The recommender saved in ``model_dir``, opened under these options."""
        from attnrec.recommend import Recommender

        return Recommender.load(
            model_dir, device=device, allow_unsigned=self.allow_unsigned, manifest_key=self.manifest_key
        )


@dataclass(frozen=True)
class DataOptions:
    """How ``--data`` is read: the options every data-reading command shares (see :func:`option_groups`)."""

    fmt: Annotated[
        str,
        typer.Option(
            "--format", "-f", help="File format of --data; 'auto' guesses from the name and content."
        ),
    ] = "auto"
    min_rating: Annotated[
        float | None,
        typer.Option(
            "--min-rating",
            help="Keep only interactions rated at least this (implicit feedback from ratings).",
        ),
    ] = None
    k_core: Annotated[
        int,
        typer.Option(
            "--k-core",
            min=0,
            help="Repeatedly drop users and items with fewer interactions than this (0 = off).",
        ),
    ] = 0
    data_dir: Annotated[
        str | None,
        typer.Option(
            "--data-dir",
            help="Where named datasets are looked for and downloaded to.",
            show_default="$ATTNREC_DATA or ~/.cache/attnrec",
        ),
    ] = None
    columns: Annotated[
        str | None,
        typer.Option(
            "--columns",
            help="Table columns (or JSON-lines keys) for each role, e.g. "
            "'user=userId,item=movieId,timestamp=ts' "
            f"(names or 0-based positions; roles: user, item, {', '.join(s.name for s in signals())}).",
        ),
    ] = None
    titles: Annotated[
        str | None,
        typer.Option(
            "--titles", help="Item-title file (movies.dat, u.item, movies.csv or 'item<TAB>title' lines)."
        ),
    ] = None
    item_features: Annotated[
        str | None,
        typer.Option(
            "--item-features",
            help="Item feature table, one row per item (CSV/TSV/Parquet/JSON; e.g. genres, category, price).",
        ),
    ] = None
    user_features: Annotated[
        str | None,
        typer.Option("--user-features", help="User feature table, one row per user (CSV/TSV/Parquet/JSON)."),
    ] = None
    feature_columns: Annotated[
        str | None,
        typer.Option(
            "--feature-columns",
            help="Feature file columns: 'id=movieId,genres=multi,year=numeric' (kinds: "
            "categorical, multi, numeric, text, auto); prefix item./user. for one file only.",
        ),
    ] = None
    missing_features: Annotated[
        str,
        typer.Option(
            "--missing-features",
            help="Items/users without a feature row: 'error' or 'empty' (empty features).",
        ),
    ] = "error"
    time_format: Annotated[
        str | None,
        typer.Option(
            "--time-format",
            help="How a table's text dates are written: 'dayfirst' (03/04/2020 is 3 April), 'monthfirst' "
            "(4 March) or a strptime pattern such as '%d/%m/%Y %H:%M'. Needed for dd/mm vs mm/dd dates.",
        ),
    ] = None

    def load(self, spec: str, spinner: bool = True) -> Interactions:
        """``spec`` ("demo", a named dataset such as "ml-1m", or a path) as an interaction log read with these
        options, with a spinner on stderr while it reads (on a terminal)."""
        if self.feature_columns and self.item_features is None and self.user_features is None:
            raise DataError("--feature-columns needs --item-features or --user-features")
        item_cols, user_cols = parse_feature_columns(
            self.feature_columns, self.item_features is not None, self.user_features is not None
        )
        as_given = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _PARSED_DATA_OPTIONS}
        with err.status(f"loading {spec} ...") if spinner else nullcontext():
            return load_dataset(
                spec,
                format=self.fmt,
                columns=parse_columns(self.columns),
                item_feature_columns=item_cols,
                user_feature_columns=user_cols,
                **as_given,
            )


# The DataOptions fields load_dataset takes under another name or parsed; each other field is the
# load_dataset keyword of its name.
_PARSED_DATA_OPTIONS = ("fmt", "columns", "feature_columns")


@dataclass(frozen=True)
class QueryOptions:
    """Whom to recommend for: a known user or an ad-hoc history, and how many items."""

    user: Annotated[str | None, typer.Option("--user", "-u", help="External ID of a known user.")] = None
    history: Annotated[
        str | None,
        typer.Option("--history", help="Ad-hoc history: comma-separated external item IDs, oldest first."),
    ] = None
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="Number of items to recommend.")] = 10

    def history_items(self) -> list[object] | None:
        """``--history "12, 40,7"`` -> ``["12", "40", "7"]``; ``None`` without ``--history``."""
        return [*split_list([self.history])] if self.history is not None else None


def option_groups(func: Callable[..., T]) -> Callable[..., T]:
    """Let a command take a group of options (:class:`DataOptions`, :class:`QueryOptions`) as one parameter.

    A parameter annotated with such a frozen dataclass is shown to typer as the dataclass's fields,
    in its place (typer reads ``inspect.signature``); the command receives them packed into one object.
    """
    sig = inspect.signature(func, eval_str=True)
    groups: dict[str, tuple[type[Any], list[inspect.Parameter]]] = {}
    params: list[inspect.Parameter] = []  # all keyword-only: typer passes every option by name
    for p in sig.parameters.values():
        if isinstance(p.annotation, type) and is_dataclass(p.annotation):
            hints = get_type_hints(p.annotation, include_extras=True)
            options = [
                inspect.Parameter(
                    f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name]
                )
                for f in fields(p.annotation)
            ]
            groups[p.name] = (p.annotation, options)
            params += options
        else:
            params.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> T:
        for name, (cls, options) in groups.items():
            kwargs[name] = cls(**{o.name: kwargs.pop(o.name) for o in options})
        return func(**kwargs)

    wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    return wrapper


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


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in split_list([text])}))
    except ValueError:
        raise ValueError(f"--ks must be comma-separated positive integers, not {text!r}") from None
    if not ks or ks[0] < 1:
        raise ValueError(f"--ks must be comma-separated positive integers, not {text!r}")
    return ks
