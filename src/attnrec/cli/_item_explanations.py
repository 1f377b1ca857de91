"""Per-item explanations in the CLI's rich output: shared by ``attnrec explain-rec`` and
``attnrec recommend --explain``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from attnrec.cli._common import out
from attnrec.evaluation.attribution import METHODS
from attnrec.recommend import reasons
from attnrec.recommend.reasons import ItemExplanation, check_event_verbs

EVENT_VERB_EXAMPLE = f"buy=purchased or 'cart=added {reasons.ITEM} to your cart'"
EVENT_VERB_HELP = (
    f"The verb of an event type in reasons, e.g. {EVENT_VERB_EXAMPLE} ({reasons.ITEM}: where the item "
    f"goes); repeatable. Defaults exist for {', '.join(reasons.DEFAULT_EVENT_VERBS)} (the Taobao and OTTO "
    "event types)."
)
EventVerbOpt = Annotated[
    list[str] | None, typer.Option("--event-verb", metavar="NAME=VERB", help=EVENT_VERB_HELP)
]
METHOD_HELP = (
    f"Attribution method: {', '.join(METHODS)} (default greedy: the most faithful in "
    "benchmarks/results/faithfulness.md)."
)


def check_verb(verb: str) -> str:
    """``--reason-verb`` stripped; the one rule of :func:`attnrec.recommend.reasons.check_verb`."""
    return reasons.check_verb(verb, "--reason-verb")


def parse_event_verbs(specs: list[str] | None) -> dict[str, str]:
    """``["NAME=VERB", ...]`` -> ``{name: verb}``; a one-line ``ValueError`` for a malformed one."""
    verbs: dict[str, str] = {}
    for spec in specs or []:
        name, sep, verb = spec.partition("=")
        if not sep or not name.strip() or not verb.strip():
            raise ValueError(f"--event-verb {spec!r}: expected NAME=VERB, e.g. {EVENT_VERB_EXAMPLE}")
        verbs[name.strip()] = verb
    try:
        return check_event_verbs(verbs)
    except ValueError as e:
        raise ValueError(f"--event-verb: {e}") from None


@dataclass(frozen=True)
class ReasonOptions:
    """How ``recommend --explain`` and ``explain-rec`` word a reason: its verb, the verbs of event types."""

    reason_verb: Annotated[
        str,
        typer.Option(
            "--reason-verb",
            help="The verb of each reason: 'Because you VERB *A* and *B*' (e.g. watched, bought).",
        ),
    ] = reasons.DEFAULT_VERB
    event_verb: EventVerbOpt = None

    def wording(self) -> dict[str, Any]:
        """The checked ``reason_verb`` and ``event_verbs`` keywords of
        :meth:`attnrec.recommend.Recommender.recommend` and
        :func:`attnrec.recommend.explain_rec.explain_recommendation` (a one-line ``ValueError`` for a bad
        one)."""
        return {
            "reason_verb": check_verb(self.reason_verb),
            "event_verbs": parse_event_verbs(self.event_verb),
        }


def _when(timestamp: float | None) -> str:
    """``timestamp`` as a UTC date and time (the number itself when out of the calendar's range)."""
    if timestamp is None:
        return ""
    try:
        return datetime.fromtimestamp(timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, ValueError, OSError):
        return f"{timestamp:.0f}"


def print_item_explanations(
    explanations: list[ItemExplanation | None], titles: list[str | None], top: int
) -> None:
    """One block per explained item: its reason, then its ``top`` strongest history events with values (and
    their event types and UTC times when the history has them)."""
    for n, (ex, title) in enumerate(zip(explanations, titles, strict=False), 1):
        if ex is None:
            continue
        name = f"{ex.item} ({title})" if title else ex.item
        out.print(
            f"#{n} {name}: {ex.reason or ex.note or 'no history event raised its score'}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        if not ex.events:
            continue
        shown = ex.events[:top]
        kinds, times = any(e.event for e in shown), any(e.timestamp is not None for e in shown)
        table = Table(show_header=True, box=None, padding=(0, 2))
        cols = ["history item", "title", *(["event"] if kinds else []), *(["when (UTC)"] if times else [])]
        for col in (*cols, "items back", ex.method):
            table.add_column(
                col,
                justify="right" if col in ("items back", ex.method) else "left",
                no_wrap=col in ("event", "when (UTC)"),
            )
        for e in shown:
            context = [*([escape(e.event or "")] if kinds else []), *([_when(e.timestamp)] if times else [])]
            table.add_row(escape(e.item), escape(e.title or ""), *context, str(e.back), f"{e.value:.4f}")
        out.print(table)


__all__ = [
    "METHOD_HELP",
    "EventVerbOpt",
    "ReasonOptions",
    "check_verb",
    "parse_event_verbs",
    "print_item_explanations",
]
