"""``attnrec tune``: hyper-parameter search with Optuna (a thin layer over
:func:`attnrec.experiments.tuning.tune`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from attnrec.cli._common import (
    DataOpt,
    DataOptions,
    cli_errors,
    log_to_stderr,
    option_groups,
    out,
    warn_line,
)
from attnrec.cli._options import (
    ModelNameOpt,
    SignalOpt,
    config_option,
    max_epochs_option,
    overrides_option,
    preset_option,
    read_signals,
    seed_option,
    split_option,
    time_budget_option,
    valid_users_option,
)
from attnrec.cli._output import progress_display, show_progress
from attnrec.cli.main import app
from attnrec.config import ConfigError, resolve_overrides
from attnrec.data.split import DEFAULT_SPLIT, make_split
from attnrec.evaluation.metrics import METRICS
from attnrec.models.registry import get_spec
from attnrec.training.train_config import TrainConfig

if TYPE_CHECKING:  # Optuna is an extra (attnrec[tune]): imported when the command runs, not with the CLI
    from attnrec.experiments.tuning_output import TuneOutcome


@app.command(
    name="tune",
    epilog="Example: attnrec tune --data ml-1m --model sasrec --set loss=ce --trials 20 --time-budget 3600 "
    "--trial-budget 300 --out runs/tune-sasrec",
)
@cli_errors
@option_groups
def tune_cmd(
    data: DataOpt,
    model: ModelNameOpt = "sasrec",
    preset: Annotated[
        str | None, preset_option("Preset the unsearched settings start from (see 'attnrec models MODEL').")
    ] = None,
    config: Annotated[
        Path | None,
        config_option("TOML file with \\[model] and \\[train] tables: settings fixed, not searched."),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        overrides_option(
            "Fix one setting, e.g. --set loss=ce (repeatable); a fixed setting is not searched."
        ),
    ] = None,
    space: Annotated[
        Path | None,
        typer.Option(
            "--space",
            help="TOML file of ranges, \\[model] and \\[train] tables of {low=, high=, log=} or "
            "{choices=[...]} entries, over the model's default search space (see docs/how-to/tuning.md).",
        ),
    ] = None,
    trials: Annotated[
        int, typer.Option("--trials", "-n", min=1, help="Finished trials the study should have.")
    ] = 20,
    time_budget: Annotated[
        float,
        time_budget_option("Seconds for all trials of this session; no trial starts after it (0 = none)."),
    ] = 0.0,
    trial_budget: Annotated[
        float,
        typer.Option(
            "--trial-budget", min=0, help="Seconds of training per trial (0 = the base config's time_budget)."
        ),
    ] = 0.0,
    max_epochs: Annotated[int | None, max_epochs_option("Epoch cap per trial.")] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Trials in parallel: worker processes on the shared storage, 1 thread each.",
        ),
    ] = 1,
    storage: Annotated[
        str | None,
        typer.Option(
            "--storage",
            help="Optuna storage URL; the study resumes from it.",
            show_default="sqlite:///OUT/tune.db",
        ),
    ] = None,
    study: Annotated[
        str | None, typer.Option("--study", help="Study name in the storage.", show_default="MODEL-DATAFILE")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Directory for trials/, best.toml, summary.json and the plots.",
            show_default="runs/tune-MODEL",
        ),
    ] = None,
    metric: Annotated[
        str,
        typer.Option("--metric", help=f"Validation metric to maximise (full ranking): {', '.join(METRICS)}."),
    ] = "NDCG@10",
    pruner: Annotated[
        str,
        typer.Option(
            "--pruner", help="Stop poor trials early after a validated epoch: median, halving or none."
        ),
    ] = "median",
    seed: Annotated[int, seed_option("Seed of the TPE sampler (trials train with train.seed).")] = 0,
    split: Annotated[str, split_option("How validation and test cases are held out.")] = DEFAULT_SPLIT,
    valid_users: Annotated[
        int, valid_users_option("leave-one-out: validate on this many users (seed 0); 0 = all.")
    ] = 0,
    signal: SignalOpt = None,
    keep_trials: Annotated[
        bool, typer.Option("--keep-trials", help="Keep every trial's model, not only the best one's.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No per-trial / per-epoch log lines.")] = False,
    reading: DataOptions = DataOptions(),
) -> None:
    """Search a model's hyper-parameters on validation (full ranking), then test the best trial once.

    Trials sample the model's search space (its defaults, --space entries over them, less the
    settings fixed by --config/--set) with the seeded TPE sampler; every validated epoch goes to
    the pruner. The study is kept in --storage: run the same command again to resume it (finished
    trials are kept, an interrupted one is retried). Writes OUT/best.toml (for 'attnrec train
    --config'), OUT/summary.json, the plots and the best trial's model in OUT/trials/N.
    """
    try:  # Optuna is an extra (attnrec[tune]): imported when the command runs, not with the CLI
        from attnrec.experiments.tuning import TuneSettings, open_storage, plan_search, tune
    except ModuleNotFoundError as e:
        _missing_extra(e)
    spec = get_spec(model)
    settings_by_table = resolve_overrides(
        {"model": spec.config_cls, "train": TrainConfig}, overrides or [], config
    )
    read_signals(signal, model, spec, settings_by_table["model"])  # a fixed setting: not searched
    train_fixed = dict(settings_by_table["train"])
    if max_epochs is not None:
        train_fixed["max_epochs"] = max_epochs
    out_dir = out_dir or Path("runs") / f"tune-{model}"
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir}: exists and is not a directory")
    settings = TuneSettings(
        model=model,
        out=out_dir,
        storage=storage or f"sqlite:///{out_dir / 'tune.db'}",
        study=study or f"{model}-{Path(data).name}",
        preset=preset,
        model_settings=settings_by_table["model"],
        train_settings=train_fixed,
        space_file=space,
        trials=trials,
        time_budget=time_budget,
        trial_budget=trial_budget,
        jobs=jobs,
        metric=metric,
        pruner=pruner,
        seed=seed,
        keep_trials=keep_trials,
        verbose=not quiet,
    )
    plan = plan_search(settings)  # bad settings or space fail before the data is read
    out_dir.mkdir(parents=True, exist_ok=True)
    open_storage(settings.storage)
    fixed = [f"{t}.{k}" for t, keys in plan.fixed.items() for k in keys]
    out.print(
        f"tuning [bold]{escape(model)}[/bold]: {len(plan.space)} setting(s) searched"
        + (f", fixed: {escape(', '.join(fixed))}" if fixed else "")
        + f"; study {escape(settings.study)!r} in {escape(settings.storage)}",
        soft_wrap=True,
    )

    interactions = reading.load(data)
    sp = make_split(interactions, split, valid_users)
    log_to_stderr(not quiet)
    with progress_display(show_progress(quiet), f"tuning {model}: trials", None) as steps:
        outcome = tune(settings, interactions, sp, on_trial=lambda done, planned: steps.update(done, planned))
    _report(outcome)


def _missing_extra(e: ModuleNotFoundError) -> NoReturn:
    """A clear error when Optuna (the ``tune`` extra) is what is missing; any other missing module is a
    bug."""
    if (e.name or "").split(".")[0] not in ("optuna", "sqlalchemy"):
        raise e
    raise ConfigError(
        f"attnrec tune needs Optuna ({e.name} is not installed): pip install 'attnrec[tune]'"
    ) from None


def _report(o: TuneOutcome) -> None:
    """The trials table, the best trial's test result with its protocol line, the files written."""
    table = Table(title=f"study {o.study}: trials", title_justify="left")
    for col, justify in (
        ("#", "right"),
        ("state", "left"),
        (f"valid {o.metric}", "right"),
        ("epochs", "right"),
        ("s", "right"),
        ("parameters", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in o.trials:
        mark = " *" if r.number == o.best_trial else ""
        table.add_row(
            f"{r.number}{mark}",
            r.state + (f" ({r.note})" if r.note else ""),
            "" if r.value is None else f"{r.value:.4f}",
            "" if r.epochs is None else str(r.epochs),
            "" if r.seconds is None else f"{r.seconds:.0f}",
            escape(_params(r.params)),
        )
    out.print(table)
    counts = ", ".join(f"{n} {state}" for state, n in o.counts.items() if n)
    out.print(
        f"{len(o.trials)} trial(s): {counts or 'none'}; {o.wall_seconds:.0f}s this session", soft_wrap=True
    )
    for note in o.notes:
        warn_line(note)
    if o.test is not None and o.best_value is not None:
        out.print(
            f"best: trial {o.best_trial} with validation {o.metric} {o.best_value:.4f}; on the test split "
            "(scored once):",
            soft_wrap=True,
        )
        test = Table()
        for k in o.test.metrics:
            test.add_column(k, justify="right")
        test.add_row(*(f"{v:.4f}" for v in o.test.metrics.values()))
        out.print(test)
        out.print(f"[dim]protocol:[/dim] {escape(o.test.describe())}", soft_wrap=True)
    for path in o.files:
        out.print(f"wrote {escape(str(path))}", soft_wrap=True)


def _params(params: dict[str, Any]) -> str:
    """``model.dropout=0.1234..., train.lr=...`` -> ``dropout=0.123 lr=0.00123``."""

    def fmt(v: Any) -> str:
        return f"{v:.3g}" if isinstance(v, float) else str(v)

    return " ".join(f"{k.split('.', 1)[-1]}={fmt(v)}" for k, v in params.items())
