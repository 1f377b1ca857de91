"""The ``attnrec`` command line. Thin: every command calls the public API.

Each group of commands lives in its own module that adds itself to :data:`app` on import.
"""

from __future__ import annotations

import typer

from attnrec import __version__

app = typer.Typer(
    name="attnrec",
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


# Command modules register themselves on `app`; keep one import per module.
from attnrec.cli import batch as _batch  # noqa: E402,F401
from attnrec.cli import compare as _compare  # noqa: E402,F401
from attnrec.cli import core as _core  # noqa: E402,F401
from attnrec.cli import explain as _explain  # noqa: E402,F401
from attnrec.cli import info as _info  # noqa: E402,F401
from attnrec.cli import ingest as _ingest  # noqa: E402,F401
from attnrec.cli import insight as _insight  # noqa: E402,F401
from attnrec.cli import serve as _serve  # noqa: E402,F401
from attnrec.cli import tune as _tune  # noqa: E402,F401


def main() -> None:
    app()
