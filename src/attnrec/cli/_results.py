"""The results tables ``attnrec train`` and ``attnrec evaluate`` print: one per protocol."""

from rich.markup import escape
from rich.table import Table

from attnrec.cli._common import out
from attnrec.evaluation.protocol import EvalResult

WIDE_TABLE = 8  # more metrics than this are printed one per row (a terminal cannot show them as columns)


def metrics_table(rows: list[tuple[str, EvalResult]], title: str) -> Table:
    """The metrics of labelled results: one column per metric, or one row per metric when they are many."""
    keys: list[str] = []
    for _, res in rows:
        keys += [k for k in res.metrics if k not in keys]
    if len(keys) > WIDE_TABLE:  # many metrics (--metrics): one row per metric, one column per model
        table = Table()
        table.add_column("metric")
        for label, _ in rows:
            table.add_column(label, justify="right")
        for k in keys:
            table.add_row(k, *(f"{res.metrics[k]:.4f}" if k in res.metrics else "" for _, res in rows))
        return table
    table = Table()
    table.add_column(title)
    for k in keys:
        table.add_column(k, justify="right")
    for label, res in rows:
        table.add_row(label, *(f"{res.metrics[k]:.4f}" if k in res.metrics else "" for k in keys))
    return table


def print_results(rows: list[tuple[str, EvalResult]], title: str) -> None:
    """A metrics table per protocol, each followed by its protocol line."""
    groups: dict[str, list[tuple[str, EvalResult]]] = {}
    for label, res in rows:
        groups.setdefault(res.describe(), []).append((label, res))
    for desc, group in groups.items():
        out.print(metrics_table(group, title))
        out.print(f"[dim]protocol:[/dim] {escape(desc)}", soft_wrap=True)
