"""The ``attnrec`` command line. Thin: every command calls the public API.

Each group of commands lives in its own module that adds itself to :data:`app` on import. The
modules are imported lazily, when their command runs or shows its own help: :data:`COMMANDS`
says which module defines each command and the line ``attnrec --help`` lists it with, so
``attnrec --version`` and ``attnrec --help`` answer without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

from attnrec import __version__


class CommandEntry(NamedTuple):
    """Where a command is defined (a module of :mod:`attnrec.cli`) and its one-line summary."""

    module: str
    summary: str


# In the order `attnrec --help` lists them. Each summary is the first line of the command's
# docstring (tests/cli/test_lazy_cli.py checks that they agree and that no command is missing).
COMMANDS: dict[str, CommandEntry] = {
    "train": CommandEntry(
        "train", "Train a model, select it on validation (full ranking), test it and save it."
    ),
    "evaluate": CommandEntry(
        "evaluate",
        "Score a saved model on a dataset under one or more protocols and print the protocol with the "
        "numbers.",
    ),
    "recommend": CommandEntry(
        "recommend",
        "Top-K items for a known user or for an ad-hoc history of item IDs, with titles when known.",
    ),
    "batch": CommandEntry(
        "batch",
        "Write the top-K items of every user of --data, or of every row of --users, to a Parquet file.",
    ),
    "compare": CommandEntry(
        "compare",
        "Train several models on one dataset under one protocol and write the side-by-side table.",
    ),
    "explain-train": CommandEntry(
        "explain", "Train PETER/PETER+ on review data and save a self-contained checkpoint directory."
    ),
    "explain": CommandEntry(
        "explain", "Predict the rating and generate an explanation for one user and item."
    ),
    "explain-evaluate": CommandEntry(
        "explain", "RMSE, MAE, BLEU, ROUGE, USR, FMR, FCR and DIV on the test part of the data."
    ),
    "data": CommandEntry("info", "Describe a dataset: users, items, interactions, sequence lengths, sha256."),
    "models": CommandEntry("info", "List the registered models and their presets, or one model's settings."),
    "attention": CommandEntry(
        "insight",
        "Average attention weights per layer and head over users, as in the SASRec paper's heat-maps.",
    ),
    "explain-rec": CommandEntry(
        "insight",
        "Recommend for one user and list, per recommended item, the history items behind it with a reason.",
    ),
    "serve": CommandEntry(
        "serve", "Serve recommendations, similar items and explanations over HTTP (docs at /docs)."
    ),
    "ingest": CommandEntry(
        "ingest",
        "Store the events of a file in a history store, for live histories and the next retrain.",
    ),
    "retrain": CommandEntry(
        "retrain",
        "Warm-start a model on its base log plus the events a store gathered, save it, optionally reload a "
        "server.",
    ),
    "plan-retrain": CommandEntry(
        "plan_retrain",
        "Choose the nightly retrain's fine-tune by replaying the log's last periods with each candidate.",
    ),
    "tune": CommandEntry(
        "tune",
        "Search a model's hyper-parameters on validation (full ranking), then test the best trial once.",
    ),
}


def command_name(info: typer.models.CommandInfo) -> str:
    """The name typer gives a registered command (its ``name`` or its function's, dashed)."""
    assert info.callback is not None
    return info.name or typer.main.get_command_name(info.callback.__name__)


class _LazyGroup(TyperGroup):
    """The command group: a command's module is imported when the command is looked up to run.

    While the group's own help is written, a command not yet imported is shown by a stand-in
    carrying its :data:`COMMANDS` summary.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False

    # The context and formatter are typer's click objects (typed Any: typer may vendor its own click).
    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(name for name in self.commands if name not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in COMMANDS:
            return self.commands.get(cmd_name)
        entry = COMMANDS[cmd_name]
        if self._listing:
            return TyperCommand(cmd_name, help=entry.summary, short_help=entry.summary)
        importlib.import_module(f"attnrec.cli.{entry.module}")
        info = next(c for c in app.registered_commands if command_name(c) == cmd_name)
        command = typer.main.get_command_from_info(
            info,
            pretty_exceptions_short=app.pretty_exceptions_short,
            rich_markup_mode=app.rich_markup_mode,
        )
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="attnrec",
    cls=_LazyGroup,
    help="Transformer-based recommendation: train, evaluate, recommend, explain and serve.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"attnrec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the installed attnrec version and exit.",
    ),
) -> None:
    """Transformer-based recommendation: train, evaluate, recommend, explain and serve."""


def load_all() -> None:
    """Import every command module (what the lazy group does one command at a time)."""
    for module in dict.fromkeys(entry.module for entry in COMMANDS.values()):
        importlib.import_module(f"attnrec.cli.{module}")


def main() -> None:
    app()
