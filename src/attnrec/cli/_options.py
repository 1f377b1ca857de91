"""Option types that several commands declare alike: the model (a registered name or a saved
directory), the device, the sampled negatives, the candidate filters (an option group), the manifest
key, the repeatable ``--signal`` option with the handlers that declare its signals, and the
``--protocol`` and ``--split`` options with their parsers (each command words its own
help for those two). The choices of ``--protocol`` and ``--split`` are the library's own declarations
(:data:`attnrec.evaluation.protocol.PROTOCOLS`, :data:`attnrec.data.split.SPLITS`)."""

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from attnrec.cli._common import MANIFEST_KEY_HELP, split_list
from attnrec.config import ConfigError
from attnrec.data.signals import declare_option
from attnrec.data.split import SPLITS
from attnrec.evaluation.protocol import PROTOCOLS

if TYPE_CHECKING:
    from attnrec.models.registry import ModelSpec


# -- choices --------------------------------------------------------------------------------
def choice(names: Sequence[str]) -> Callable[[str], str]:
    """A typer ``parser`` that accepts exactly ``names`` (click reports anything else as a usage error)."""

    def parse(value: str) -> str:
        if value not in names:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(map(repr, names))}")
        return value

    return parse


def choice_option(flag: str, names: Sequence[str], help: str, **settings: Any) -> Any:
    """An option that takes one of ``names``, checked as it is parsed and listed as its metavar."""
    return typer.Option(
        flag, parser=choice(names), metavar="[" + "|".join(names) + "]", help=help, **settings
    )


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def duration(text: str) -> int:
    """A typer ``parser`` of a length of time: seconds, or a number with a unit (``90s``, ``30m``,
    ``12h``, ``1d``, ``2w``); at least one second."""
    value, unit = (text[:-1], text[-1]) if text[-1:].lower() in DURATION_UNITS else (text, "s")
    try:
        seconds = float(value) * DURATION_UNITS[unit.lower()]
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a length of time such as 3600, 12h, 1d or 2w") from None
    if not 1 <= seconds < float("inf"):
        raise typer.BadParameter(f"{text!r}: a length of time is at least one second")
    return round(seconds)


TargetEventsOpt = Annotated[
    str,
    typer.Option(
        "--target-events",
        help="last-qualifying split: the event types whose last one per user is the target, "
        "comma-separated names (e.g. buy for 'next buy').",
    ),
]
MinTargetRatingOpt = Annotated[
    float | None,
    typer.Option(
        "--min-target-rating",
        help="last-qualifying split: only events rated at least this are targets (e.g. 4 for 'liked').",
    ),
]


ModelNameOpt = Annotated[
    str, typer.Option("--model", "-m", help="Registered model name (see 'attnrec models').")
]
ModelDirOpt = Annotated[
    Path, typer.Option("--model", "-m", help="A model directory written by 'attnrec train'.")
]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
NegativesOpt = Annotated[
    int, typer.Option("--negatives", min=1, help="Negatives per case for sampled protocols.")
]


@dataclass(frozen=True)
class CandidateOptions:
    """The candidate filters of ``recommend`` and ``batch`` (the same request options, the same words)."""

    include_seen: Annotated[
        bool, typer.Option("--include-seen", help="Allow items already in the history.")
    ] = False
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="Item IDs never to recommend (repeatable or comma-separated)."),
    ] = None
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include", help="Recommend only among these item IDs (repeatable or comma-separated)."
        ),
    ] = None

    def allowed(self) -> list[object] | None:
        """The ``--include`` item IDs (None: every item)."""
        return [*split_list(self.include)] if self.include else None

    def banned(self) -> list[object] | None:
        """The ``--exclude`` item IDs (None: none)."""
        return [*split_list(self.exclude)] if self.exclude else None

    def filters(self) -> dict[str, Any]:
        """The keywords of these filters in :meth:`attnrec.recommend.Recommender.recommend` and
        :func:`attnrec.recommend.batch_scoring.score_to_parquet`."""
        return {"exclude_seen": not self.include_seen, "include": self.allowed(), "exclude": self.banned()}


ManifestKeyOpt = Annotated[
    str | None,
    typer.Option("--manifest-key", envvar="ATTNREC_MANIFEST_KEY", show_default=False, help=MANIFEST_KEY_HELP),
]
SignalOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--signal",
        metavar="NAME:KIND",
        help="Declare a per-event column for this run, e.g. device:categorical or price:numeric "
        "(repeatable). The data's NAME column is read (or map it with --columns NAME=col). train and tune: "
        "the model reads it and the saved model keeps the declaration, so serving it needs nothing more; "
        "ingest: the store keeps it with each event.",
    ),
]


def declare_signals(texts: Sequence[str] | None) -> list[str]:
    """Declare each ``--signal NAME:KIND`` (:func:`attnrec.data.signals.declare_option`); their names. A bad
    one is a one-line :class:`ConfigError`."""
    try:
        return [declare_option(text).name for text in texts or ()]
    except ValueError as e:
        raise ConfigError(f"--signal: {e}") from None


def read_signals(
    texts: Sequence[str] | None, model: str, spec: "ModelSpec", model_over: dict[str, object]
) -> None:
    """Declare each ``--signal NAME:KIND`` and add its name to the model's ``signals`` setting
    (``model_over``); a model without that setting is a one-line :class:`ConfigError`."""
    if not texts:
        return
    if not dataclasses.is_dataclass(spec.config_cls) or "signals" not in {
        f.name for f in dataclasses.fields(spec.config_cls)
    }:
        raise ConfigError(f"--signal: {model} reads no per-event signals (sasrec, bert4rec and their kin do)")
    names = declare_signals(texts)
    listed = str(model_over.get("signals", "")).split(",")
    model_over["signals"] = ",".join(dict.fromkeys(n.strip() for n in [*listed, *names] if n.strip()))


def protocol_option(flag: str, help: str, **settings: Any) -> Any:
    """An option naming a ranking protocol (``--protocol``, ``compare --also``), checked as it is parsed."""
    return choice_option(flag, tuple(PROTOCOLS), help, **settings)


def split_option(help: str, **settings: Any) -> Any:
    """The ``--split`` option of the commands that re-split a log, checked as it is parsed."""
    return choice_option("--split", SPLITS, help, **settings)


# -- options the training commands share (train, tune, compare, retrain, explain-train): each flag and its
# bounds once; each command words the help for what the option means there, as for --protocol and --split.
def preset_option(help: str) -> Any:
    """``--preset``/``-p``: a named preset of the model."""
    return typer.Option("--preset", "-p", help=help)


def config_option(help: str) -> Any:
    """``--config``/``-c``: a TOML file of settings."""
    return typer.Option("--config", "-c", help=help)


def seed_option(help: str) -> Any:
    """``--seed``: a seed of a random generator, at least 0."""
    return typer.Option("--seed", min=0, help=help)


def overrides_option(help: str) -> Any:
    """``--set``: one ``key=value`` setting (repeatable)."""
    return typer.Option("--set", help=help)


def max_epochs_option(help: str) -> Any:
    """``--max-epochs``: an epoch cap, at least 1."""
    return typer.Option("--max-epochs", min=1, help=help)


def time_budget_option(help: str) -> Any:
    """``--time-budget``: seconds, at least 0."""
    return typer.Option("--time-budget", min=0, help=help)


def valid_users_option(help: str) -> Any:
    """``--valid-users``: how many users leave-one-out validates on (0 = all), at least 0."""
    return typer.Option("--valid-users", min=0, help=help)
