"""What commands print besides their tables: ``--json`` / ``--json-out`` results and the progress display.

``--json`` means one thing in every command: the result as JSON on stdout, and nothing else there
(messages and warnings go to stderr); ``--json-out PATH`` writes it to a file. The progress display
shows on stderr only on a terminal, never with ``--quiet`` or ``--json``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from attnrec.cli import _common  # its ``err`` console, looked up when used


class Steps:
    """A progress display's handle: ``steps.update(done, total, what)`` (each part optional); a no-op when
    off."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress

    def update(self, done: int | None = None, total: int | None = None, what: str | None = None) -> None:
        if self.progress is not None:
            self.progress.update(self.progress.task_ids[0], completed=done, total=total, description=what)


def show_progress(quiet: bool = False, as_json: bool = False) -> bool:
    """Whether a command shows a progress display: on a terminal (stderr), unless --quiet or --json."""
    return _common.err.is_terminal and not quiet and not as_json


@contextmanager
def progress_display(enabled: bool, what: str, total: int | None) -> Iterator[Steps]:
    """A progress display on stderr (spinner, ``what``, bar, ``done/total``, time) while the block runs.

    Log lines and prints during the block appear above it; it disappears when the block ends.
    """
    if not enabled:
        yield Steps()
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=_common.err, transient=True) as progress:
        progress.add_task(what, total=total)
        yield Steps(progress)


# --json means one thing in every command: the result as JSON on stdout, and nothing else there
# (messages and warnings go to stderr). A file is written with --json-out PATH.
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the result as JSON on stdout (nothing else goes there).")
]
JsonOutOpt = Annotated[
    Path | None, typer.Option("--json-out", help="Also write the result as JSON to this file.")
]


def print_json(obj: Any) -> None:
    """``obj`` as indented JSON on stdout (plain text: no markup, no wrapping)."""
    typer.echo(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


def write_json_file(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON in ``path`` (its folder made), said on stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    _common.err.print(f"wrote {path}", soft_wrap=True, markup=False)
