"""Option types that several commands declare alike: the model (a registered name or a saved
directory), the device, the sampled negatives, the candidate filters, the manifest key, and the
``--protocol`` and ``--split`` options with their parsers (each command words its own help for those
two)."""

from pathlib import Path
from typing import Annotated, Any

import typer

from attnrec.cli._common import (
    MANIFEST_KEY_HELP,
    PROTOCOL_METAVAR,
    SPLIT_METAVAR,
    parse_protocol_name,
    parse_split_name,
)

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
# The candidate filters of `recommend` and `batch` (the same request options, the same words).
IncludeSeenOpt = Annotated[bool, typer.Option("--include-seen", help="Allow items already in the history.")]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option("--exclude", help="Item IDs never to recommend (repeatable or comma-separated)."),
]
IncludeOpt = Annotated[
    list[str] | None,
    typer.Option("--include", help="Recommend only among these item IDs (repeatable or comma-separated)."),
]

ManifestKeyOpt = Annotated[
    str | None,
    typer.Option("--manifest-key", envvar="ATTNREC_MANIFEST_KEY", show_default=False, help=MANIFEST_KEY_HELP),
]
SignalOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--signal",
        metavar="NAME:KIND",
        help="Declare a per-event column for this run and let the model read it, e.g. device:categorical or "
        "price:numeric (repeatable). The data's NAME column is read (or map it with --columns NAME=col); the "
        "saved model keeps the declaration, so serving it needs nothing more.",
    ),
]


def protocol_option(flag: str, help: str, **settings: Any) -> Any:
    """An option naming a ranking protocol (``--protocol``, ``compare --also``), checked as it is parsed."""
    return typer.Option(flag, parser=parse_protocol_name, metavar=PROTOCOL_METAVAR, help=help, **settings)


def split_option(help: str, **settings: Any) -> Any:
    """The ``--split`` option of the commands that re-split a log, checked as it is parsed."""
    return typer.Option("--split", parser=parse_split_name, metavar=SPLIT_METAVAR, help=help, **settings)
