"""``attnrec train``: fit a model, select it on validation, test it and save it (on one process or
several, under torchrun)."""

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from attnrec.cli._common import (
    DataOpt,
    DataOptions,
    cli_errors,
    err,
    log_to_stderr,
    option_groups,
    out,
    warn_line,
)
from attnrec.cli._options import (
    ManifestKeyOpt,
    MinTargetRatingOpt,
    ModelNameOpt,
    NegativesOpt,
    SignalOpt,
    TargetEventsOpt,
    choice_option,
    config_option,
    max_epochs_option,
    overrides_option,
    preset_option,
    protocol_option,
    read_signals,
    seed_option,
    time_budget_option,
    valid_users_option,
)
from attnrec.cli._results import print_results
from attnrec.cli._tracking_options import TrackingOptions
from attnrec.cli._warm_options import (
    TRAIN_SPLITS,
    EpochsFromOpt,
    InitFromOpt,
    NewItemRowsOpt,
    NewSinceOpt,
    check_final_fit,
    check_new_since_options,
    fixed_epochs,
    new_since_seconds,
)
from attnrec.cli.main import app
from attnrec.config import ConfigError, resolve_overrides
from attnrec.data.schema import Interactions
from attnrec.data.split import (
    DEFAULT_SPLIT,
    FINAL,
    Split,
    SplitSettings,
    final_split,
    leave_last_new_out,
)
from attnrec.evaluation.protocol import DEFAULT_NEGATIVES, EvalResult, check_single_target, protocol_by_name
from attnrec.experiments.tracking import RunInfo, Trackers
from attnrec.models.registry import get_spec
from attnrec.recommend import Recommender, warm
from attnrec.recommend.persistence import load_policy
from attnrec.training import distributed
from attnrec.training.loop import resolve_device
from attnrec.training.train_config import TrainConfig

TrainSplitOpt = Annotated[
    str,
    choice_option(
        "--split",
        TRAIN_SPLITS,
        help="leave-one-out: last item is the test target, the one before it validation; temporal: global "
        "time cut-offs; last-qualifying: the last event of --target-events rated >= --min-target-rating "
        "(next buy, liked); none: the final fit, every event trains for --max-epochs (or --epochs-from) "
        "epochs, nothing is validated.",
    ),
]
ValidUsersOpt = Annotated[
    int,
    valid_users_option(
        "leave-one-out: validate on this many users (drawn with seed 0); every other "
        "user also trains on its second-to-last item (aprec's protocol; the BERT4Rec code trains on all but "
        "the test item). 0 = all users."
    ),
]


def _training_state_dir(out_dir: Path, resume: bool, main_rank: bool) -> Path:
    """``OUT/train_state``: cleared for a fresh run, kept (or reported missing) for ``--resume``."""
    state_dir = out_dir / "train_state"
    if state_dir.exists() and not resume and main_rank:
        shutil.rmtree(state_dir)
    elif resume and not (state_dir / "train_state.json").exists() and main_rank:
        warn_line(f"--resume: no training state in {state_dir}; starting from scratch")
    distributed.barrier()  # no rank looks for a training state before rank 0 has cleared it
    return state_dir


@app.command(epilog="Example: attnrec train --data demo --model sasrec --preset demo --out runs/demo")
@cli_errors
@option_groups
def train(
    data: DataOpt,
    model: ModelNameOpt = "sasrec",
    preset: Annotated[
        str | None,
        preset_option("Named preset of the model (see 'attnrec models MODEL')."),
    ] = None,
    config: Annotated[Path | None, config_option("TOML file with \\[model] and \\[train] tables.")] = None,
    overrides: Annotated[
        list[str] | None,
        overrides_option(
            "Override one setting, e.g. --set hidden=64 --set train.lr=1e-3 (repeatable; "
            "prefix model. or train. when a key is ambiguous)."
        ),
    ] = None,
    split: TrainSplitOpt = DEFAULT_SPLIT,
    valid_users: ValidUsersOpt = 0,
    target_events: TargetEventsOpt = "",
    min_target_rating: MinTargetRatingOpt = None,
    signal: SignalOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Directory for the trained model.", show_default="runs/MODEL"),
    ] = None,
    init_from: InitFromOpt = None,
    new_since: NewSinceOpt = None,
    new_item_rows: NewItemRowsOpt = "initial",
    epochs_from: EpochsFromOpt = None,
    device: Annotated[
        str | None, typer.Option("--device", help="auto (CUDA when present), cpu, cuda or cuda:N.")
    ] = None,
    seed: Annotated[int | None, seed_option("Seed of initialisation, shuffling and negatives.")] = None,
    max_epochs: Annotated[int | None, max_epochs_option("Stop after this many epochs.")] = None,
    time_budget: Annotated[
        float | None,
        time_budget_option("Stop training after this many seconds (0 = no limit)."),
    ] = None,
    protocols: Annotated[
        list[str] | None, protocol_option("--protocol", "Test protocol(s) besides full ranking (repeatable).")
    ] = None,
    negatives: NegativesOpt = DEFAULT_NEGATIVES,
    auto: Annotated[
        bool,
        typer.Option(
            "--auto/--no-auto",
            help="Without --preset or --config, choose the settings you did not give from the data "
            "(objective, window, dropout, stopping) and print why; --no-auto keeps the model's plain "
            "defaults.",
        ),
    ] = True,
    baseline: Annotated[
        bool,
        typer.Option(
            "--baseline/--no-baseline",
            help="Also score a popularity ranking (training counts) for comparison.",
        ),
    ] = True,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Continue an interrupted run from OUT/train_state instead of starting afresh."
        ),
    ] = False,
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress",
            help="Show a progress bar per epoch.",
            show_default="when in a terminal",
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No per-epoch log lines.")] = False,
    reading: DataOptions = DataOptions(),
    tracking: TrackingOptions = TrackingOptions(),
    manifest_key: ManifestKeyOpt = None,
    nproc: Annotated[
        int,
        typer.Option(
            "--nproc",
            min=1,
            help="Train with N processes on this machine (DistributedDataParallel via torchrun; "
            "gloo on CPU, NCCL on GPUs). For several machines run torchrun yourself: see "
            "docs/how-to/scale.md.",
        ),
    ] = 1,
) -> None:
    """Train a model, select it on validation (full ranking), test it and save it.

    Settings are layered: model defaults < --preset < --config file < --set < the explicit flags
    (--seed, --max-epochs, --time-budget, --device). Early stopping watches the validation split
    only; the test split is scored once, at the end, under full ranking (and any --protocol).
    """
    if nproc > 1 and distributed.env_world_size() == 1:
        raise typer.Exit(_launch_torchrun(nproc))
    spec = get_spec(model)
    settings = resolve_overrides({"model": spec.config_cls, "train": TrainConfig}, overrides or [], config)
    model_over, train_over = settings["model"], settings["train"]
    read_signals(signal, model, spec, model_over)  # before the data is read and the model made
    for key, value in (
        ("device", device),
        ("seed", seed),
        ("max_epochs", max_epochs),
        ("time_budget", time_budget),
    ):
        if value is not None:
            train_over[key] = value
    train_over |= fixed_epochs(epochs_from, max_epochs)
    since = new_since_seconds(new_since)
    check_new_since_options(since, split, init_from, valid_users, protocols or [])
    if new_item_rows != "initial" and init_from is None:  # before any data is read
        raise ConfigError(
            f"--new-item-rows {new_item_rows} seeds the new items of a warm start: add --init-from"
        )
    held_out = None  # the final fit: no held-out events
    if split == FINAL:
        check_final_fit(valid_users, target_events, min_target_rating, protocols or [])
    else:  # checked before any data is read
        held_out = SplitSettings(
            split, valid_users, target_events=target_events, min_rating=min_target_rating
        )
    check_single_target(protocols or [], "attnrec train")
    save_key = load_policy(manifest_key=manifest_key).manifest_key  # a bad key fails before training
    rec = Recommender(model, model_over, train_over, preset, auto=auto and preset is None and config is None)
    out_dir = out_dir or Path("runs") / model
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: exists and is not a directory")

    with tracking.open(model, distributed.is_main()) as trackers:  # a bad store fails before the data is read
        interactions = reading.load(data)
        source = None if init_from is None else rec.warm_source(init_from)
        if (
            source is not None
        ):  # old users and items keep their indices; the split is made on the extended log
            interactions = warm.extend_log(interactions, source)
        sp = _train_split(interactions, held_out, since)
        distributed.init(resolve_device(rec.train_config.device))  # under torchrun: join the process group
        main_rank = distributed.is_main()
        log_to_stderr(not quiet and main_rank)
        if main_rank:
            out.print(
                f"[bold]{escape(model)}[/bold]{f' ({escape(preset)})' if preset else ''} on "
                f"{escape(interactions.source.name)}: {interactions.n_users:,} users, "
                f"{interactions.n_items:,} items, {len(interactions):,} interactions; split {sp.describe()}, "
                f"{len(sp.valid):,} validation / {len(sp.test):,} test users",
                soft_wrap=True,
            )
            rec.choose_settings(interactions, sp)  # logged as what the run trains with
            trackers.log_run(RunInfo.of(rec, interactions, sp))

        state_dir = _training_state_dir(out_dir, resume, main_rank)
        show_progress = out.is_terminal if progress is None else progress
        try:  # closed-form fits keep no state
            rec.fit(
                interactions,
                sp,
                state_dir=state_dir,
                progress=show_progress,
                callbacks=[trackers],
                init_from=source,
                new_since=since,
                new_item_rows=new_item_rows,
            )
        except BaseException:
            distributed.cleanup(sync=False)
            raise
        distributed.cleanup()
        if main_rank:  # rank 0 tests, reports and saves
            names = ["full", *(p for p in dict.fromkeys(protocols or []) if p != "full")]
            _test_save_report(rec, interactions, sp, names, negatives, baseline, out_dir, trackers, save_key)


def _train_split(data: Interactions, settings: SplitSettings | None, since: float | None) -> Split:
    """The split ``--split`` names (``None``: the final fit); with ``--new-since`` and leave-one-out, the
    last new event of each user with new events validates (:func:`~attnrec.data.split.leave_last_new_out`)."""
    if settings is None:
        return final_split(data)
    if since is not None:
        return leave_last_new_out(data, math.floor(since))
    return settings.make(data)


def _test_save_report(
    rec: Recommender,
    interactions: Interactions,
    sp: Split,
    protocols: list[str],
    negatives: int,
    baseline: bool,
    out_dir: Path,
    trackers: Trackers,
    manifest_key: bytes | None = None,
) -> None:
    """Test the fitted ``rec`` under each protocol (beside a popularity baseline), save it (signed with
    ``manifest_key`` when given), print and track it all."""
    model = rec.name
    if not len(sp.test):  # a final fit (or a validated fine-tune) holds nothing out to test
        protocols, baseline = [], False
    # The baseline row is the registered POP model fitted on the same split.
    pop = Recommender("pop").fit(interactions, sp, progress=False) if baseline else None
    rows: list[tuple[str, EvalResult]] = []
    for name in protocols:
        proto = protocol_by_name(name, negatives, rec.train_config.seed)
        rows.append((model, rec.evaluate(sp.test, proto, split=sp.describe(), target="test")))
        trackers.log_test(name, rows[-1][1])
        if pop is not None:
            rows.append(("popularity", pop.evaluate(sp.test, proto, split=sp.describe(), target="test")))
            trackers.log_test(name, rows[-1][1], prefix="popularity/test")
    rec.save(out_dir, manifest_key=manifest_key)

    tr = rec.train_result_
    if tr is not None and sp.name == FINAL:
        out.print(
            f"final fit: trained {tr.epochs} epoch(s) on every event in {tr.seconds:.1f}s", soft_wrap=True
        )
        trackers.log_summary(tr)
    elif tr is not None:
        monitor = rec.train_config.monitor
        out.print(
            f"trained {tr.epochs} epoch(s) in {tr.seconds:.1f}s ({tr.seconds_per_epoch:.2f} s/epoch); "
            f"best epoch {tr.best_epoch} with validation {monitor} {tr.best_value:.4f}; "
            f"stopped: {tr.stopped}",
            soft_wrap=True,
        )
        trackers.log_summary(tr)
    trackers.log_model(out_dir)
    print_results(rows, "model")
    first_user = interactions.users.to_external([0])[0]
    out.print(
        f"saved to [bold]{escape(str(out_dir))}[/bold]  (try: attnrec recommend --model "
        f"{escape(str(out_dir))} --user {escape(first_user)})",
        soft_wrap=True,
    )
    if trackers:
        out.print(f"tracked: {escape(trackers.where)}", soft_wrap=True)


def _launch_torchrun(nproc: int) -> int:
    """Re-run this ``attnrec train`` command under ``torchrun --standalone --nproc_per_node N``."""
    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--nproc":
            skip = True
        elif not a.startswith("--nproc="):
            args.append(a)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        "attnrec",
        *args,
    ]
    err.print(
        f"[dim]launching {nproc} processes: torchrun --standalone --nproc_per_node {nproc} -m attnrec "
        f"{escape(' '.join(args))}[/dim]",
        soft_wrap=True,
    )
    return subprocess.call(cmd)
