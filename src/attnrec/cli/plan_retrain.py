"""``attnrec plan-retrain``: choose the fine-tune of the nightly ``attnrec retrain`` on the log's own last
periods (:mod:`attnrec.experiments.retrain_plan`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from attnrec.cli._common import DataOptions, cli_errors, err, log_to_stderr, option_groups, out
from attnrec.cli._options import choice_option, duration, time_budget_option
from attnrec.cli._output import JsonOpt, print_json
from attnrec.cli.main import app
from attnrec.config import ConfigError
from attnrec.experiments.retrain_plan import (
    CPU_SHARE,
    EPOCHS,
    PERIODS,
    RetrainPlan,
    plan_retrain,
)
from attnrec.recommend import Recommender
from attnrec.recommend.event_requests import declare_saved_signals
from attnrec.recommend.warm import NEW_ITEM_ROWS

REPEATS = ("exclude", "keep")


def _epochs(text: str) -> list[int]:
    """``--epochs``: comma-separated whole numbers, each at least 1."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--epochs {text!r}: give comma-separated whole numbers, e.g. 1,2,4") from None
    if not values or min(values) < 1:
        raise ConfigError(f"--epochs {text!r}: give at least one number of epochs, each at least 1")
    return values


@app.command(
    name="plan-retrain",
    epilog="Example: attnrec plan-retrain --model runs/shop --data shop.parquet --every 1d",
)
@cli_errors
@option_groups
def plan_retrain_command(
    model: Annotated[
        Path, typer.Option("--model", "-m", help="The saved model the nightly retrain starts from.")
    ],
    data: Annotated[str, typer.Option("--data", help="Its timestamped log, newest events included.")],
    every: Annotated[
        int,
        typer.Option(
            "--every",
            parser=duration,
            metavar="TIME",
            help="How often the retrain runs: seconds, or e.g. 12h, 1d, 1w (each replayed period's length).",
        ),
    ],
    reading: DataOptions = DataOptions(),
    periods: Annotated[
        int,
        typer.Option(
            "--periods",
            min=2,
            help="Periods replayed before the log's end; the first is answered by the scratch model, each "
            "later one by every candidate.",
        ),
    ] = PERIODS,
    epochs: Annotated[
        str,
        typer.Option("--epochs", help="Lengths of the new-events fine-tunes compared, comma-separated."),
    ] = ",".join(map(str, EPOCHS)),
    rows: Annotated[
        list[str] | None,
        choice_option(
            "--rows",
            NEW_ITEM_ROWS,
            help="New item rows compared (repeatable; default: both), as --new-item-rows of retrain.",
        ),
    ] = None,
    cpu_share: Annotated[
        float,
        typer.Option(
            "--cpu-share",
            min=0.0,
            max=1.0,
            help="The most CPU a retrain may take, as a share of a retrain from scratch.",
        ),
    ] = CPU_SHARE,
    repeats: Annotated[
        str,
        choice_option(
            "--repeats",
            REPEATS,
            help="exclude: each next event of a new item to the user is answered, the history left out of "
            "the answer; keep: every next event is, repeats included (logs where users come back to items).",
        ),
    ] = "exclude",
    time_budget: Annotated[
        float,
        time_budget_option(
            "Wall seconds after which no more fine-tunes start (0: none); the choice is then among those "
            "measured, cheapest first."
        ),
    ] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Choose the nightly retrain's fine-tune by replaying the log's last periods with each candidate.

    A model of --model's settings is trained from scratch on the events before the last --periods
    periods of --every; each candidate fine-tune (on the period's new events for each of --epochs, or on
    every event for a fifth of the model's epochs; with each new-item-rows choice) warm-starts it at
    every period start and answers the period's next events. The best NDCG@10 among the candidates
    within --cpu-share of a scratch retrain's CPU wins; the command prints the attnrec retrain options
    that run it.
    """
    log_to_stderr(True)
    declare_saved_signals(model)
    recommender = Recommender.load(model, device="cpu")
    log = reading.load(data)
    plan = plan_retrain(
        recommender,
        log,
        every,
        periods=periods,
        epochs=_epochs(epochs),
        rows=rows or NEW_ITEM_ROWS,
        cpu_share=cpu_share,
        keep_repeats=repeats == "keep",
        time_budget=time_budget,
    )
    if as_json:
        print_json(plan.to_dict())
        return
    out.print(_table(plan))
    out.print(
        f"{plan.candidates[0].cases:,} events answered by each in {periods - 1} periods of {every / 86400:g} "
        f"days from "
        f"{_date(plan.bounds[1])}; scratch retrain {plan.scratch_cpu:.1f} CPU seconds, limit "
        f"{plan.cpu_limit:.1f} a retrain; the plan took {plan.cpu_seconds:.0f} CPU seconds"
    )
    out.print(
        "on the same events: "
        + "; ".join(f"{r.name} NDCG@10 {r.ndcg:.4f}" for r in plan.references)
        + " (no retrain: the scratch model throughout; the baselines refitted each period)",
        soft_wrap=True,
        markup=False,
    )
    err.print(f"chosen: attnrec retrain ... {plan.chosen.flags()}", soft_wrap=True, markup=False)


def _table(plan: RetrainPlan) -> Table:
    table = Table(title="fine-tunes replayed")
    for name in (
        "fine-tune",
        "epochs",
        "new item rows",
        "HR@10",
        "NDCG@10",
        "CPU s a retrain",
        "within limit",
    ):
        table.add_column(name, justify="left" if name in ("fine-tune", "new item rows") else "right")
    for c in plan.candidates:
        chosen = " (chosen)" if c.fine_tune == plan.chosen else ""
        table.add_row(
            ("new events" if c.fine_tune.scope == "new" else "all events") + chosen,
            str(c.fine_tune.epochs),
            c.fine_tune.rows,
            f"{c.hr:.4f}",
            f"{c.ndcg:.4f}",
            f"{c.cpu_per_retrain:.1f}",
            "yes" if c.within_limit else "no",
        )
    return table


def _date(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
