"""Per-item explanations in the CLI's rich output: shared by ``attnrec explain-rec`` and ``attnrec recommend --explain``."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from attnrec.cli._common import out
from attnrec.evaluation.attribution import METHODS
from attnrec.recommend.reasons import ItemExplanation

ReasonVerb = Annotated[str, typer.Option(
    "--reason-verb", help="The verb of each reason: 'Because you VERB *A* and *B*' (e.g. watched, bought).")]
METHOD_HELP = f"Attribution method: {', '.join(METHODS)} (default greedy: the most faithful in benchmarks/results/faithfulness.md)."


def check_verb(verb: str) -> str:
    """``verb`` stripped; a clear error when it is empty or has control characters."""
    v = verb.strip()
    if not v or not v.isprintable():
        raise ValueError(f"--reason-verb must be printable words such as 'watched', not {verb!r}")
    return v


def print_item_explanations(explanations: list[ItemExplanation | None], titles: list[str | None], top: int) -> None:
    """One block per explained item: its reason, then its ``top`` strongest history events with values."""
    for n, (ex, title) in enumerate(zip(explanations, titles, strict=False), 1):
        if ex is None:
            continue
        name = f"{ex.item} ({title})" if title else ex.item
        out.print(f"#{n} {name}: {ex.reason or ex.note or 'no history event raised its score'}",
                  soft_wrap=True, markup=False, highlight=False)
        if not ex.events:
            continue
        table = Table(show_header=True, box=None, padding=(0, 2))
        for col in ("history item", "title", "items back", ex.method):
            table.add_column(col, justify="right" if col in ("items back", ex.method) else "left")
        for e in ex.events[:top]:
            table.add_row(escape(e.item), escape(e.title or ""), str(e.back), f"{e.value:.4f}")
        out.print(table)


__all__ = ["METHOD_HELP", "ReasonVerb", "check_verb", "print_item_explanations"]
