"""``attnrec train / evaluate / recommend``: thin commands over the public API."""

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any  # make_split's keyword arguments

import typer
from rich.markup import escape
from rich.table import Table

from attnrec.cli._common import (
    MANIFEST_KEY_HELP,
    PROTOCOL_METAVAR,
    SPLIT_METAVAR,
    DataOpt,
    DataOptions,
    LoadOptions,
    MinTargetRatingOpt,
    QueryOptions,
    TargetEventsOpt,
    cli_errors,
    err,
    log_to_stderr,
    option_groups,
    out,
    parse_ks,
    parse_protocol_name,
    parse_split_name,
    split_list,
    warn_line,
)
from attnrec.cli._metrics import (
    MetricsOpt,
    WindowOpt,
    list_inputs,
    parse_metric_options,
    protocol_cases,
    protocol_for,
)
from attnrec.cli._output import (
    JsonOpt,
    JsonOutOpt,
    print_json,
    progress_display,
    show_progress,
    write_json_file,
)
from attnrec.cli._reasons import METHOD_HELP, EventVerbOpt, ReasonVerb, check_verb, parse_event_verbs
from attnrec.cli._tracking import TrackingOptions
from attnrec.cli._warm import EpochsFromOpt, InitFromOpt, check_final_fit, fixed_epochs, parse_train_split
from attnrec.cli.main import app
from attnrec.config import ConfigError, resolve_overrides
from attnrec.data.schema import Interactions
from attnrec.data.split import (
    DEFAULT_SPLIT,
    FINAL,
    SPLITS,
    Split,
    check_split_settings,
    final_split,
    make_split,
    parse_split,
    split_settings,
)
from attnrec.evaluation.alignment import align_cases
from attnrec.evaluation.protocol import (
    DEFAULT_NEGATIVES,
    EvalResult,
    check_single_target,
    evaluate,
    protocol_by_name,
)
from attnrec.experiments.tracking import RunInfo, Trackers
from attnrec.models.registry import get_spec
from attnrec.recommend import Recommender, warm
from attnrec.recommend.persistence import load_policy
from attnrec.recommend.reasons import check_method
from attnrec.training import distributed
from attnrec.training.config import TrainConfig
from attnrec.training.loop import resolve_device

# -- option types of these commands ----------------------------------------------------------------
TrainSplitOpt = Annotated[
    str,
    typer.Option(
        "--split",
        parser=parse_train_split,
        metavar="[" + "|".join((*SPLITS, FINAL)) + "]",
        help="leave-one-out: last item is the test target, the one before it validation; temporal: global "
        "time cut-offs; last-qualifying: the last event of --target-events rated >= --min-target-rating "
        "(next buy, liked); none: the final fit, every event trains for --max-epochs (or --epochs-from) "
        "epochs, nothing is validated.",
    ),
]
ValidUsersOpt = Annotated[
    int,
    typer.Option(
        "--valid-users",
        min=0,
        help="leave-one-out: validate on this many users (drawn with seed 0); every other "
        "user also trains on its second-to-last item (aprec's protocol; the BERT4Rec code trains on all but "
        "the test item). 0 = all users.",
    ),
]
ModelDirOpt = Annotated[
    Path, typer.Option("--model", "-m", help="A model directory written by 'attnrec train'.")
]
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


WIDE_TABLE = 8  # more metrics than this are printed one per row (a terminal cannot show them as columns)


def _metrics_table(rows: list[tuple[str, EvalResult]], title: str) -> Table:
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


def _print_results(rows: list[tuple[str, EvalResult]], title: str) -> None:
    """A metrics table per protocol, each followed by its protocol line."""
    groups: dict[str, list[tuple[str, EvalResult]]] = {}
    for label, res in rows:
        groups.setdefault(res.describe(), []).append((label, res))
    for desc, group in groups.items():
        out.print(_metrics_table(group, title))
        out.print(f"[dim]protocol:[/dim] {escape(desc)}", soft_wrap=True)


def _training_state_dir(out_dir: Path, resume: bool, main_rank: bool) -> Path:
    """``OUT/train_state``: cleared for a fresh run, kept (or reported missing) for ``--resume``."""
    state_dir = out_dir / "train_state"
    if state_dir.exists() and not resume and main_rank:
        shutil.rmtree(state_dir)
    elif resume and not (state_dir / "train_state.json").exists() and main_rank:
        warn_line(f"--resume: no training state in {state_dir}; starting from scratch")
    distributed.barrier()  # no rank looks for a training state before rank 0 has cleared it
    return state_dir


# -- train -----------------------------------------------------------------------------------------
@app.command(epilog="Example: attnrec train --data demo --model sasrec --preset demo --out runs/demo")
@cli_errors
@option_groups
def train(
    data: DataOpt,
    model: Annotated[
        str, typer.Option("--model", "-m", help="Registered model name (see 'attnrec models').")
    ] = "sasrec",
    preset: Annotated[
        str | None,
        typer.Option("--preset", "-p", help="Named preset of the model (see 'attnrec models MODEL')."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="TOML file with \\[model] and \\[train] tables.")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override one setting, e.g. --set hidden=64 --set train.lr=1e-3 (repeatable; "
            "prefix model. or train. when a key is ambiguous).",
        ),
    ] = None,
    split: TrainSplitOpt = DEFAULT_SPLIT,
    valid_users: ValidUsersOpt = 0,
    target_events: TargetEventsOpt = "",
    min_target_rating: MinTargetRatingOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Directory for the trained model.", show_default="runs/MODEL"),
    ] = None,
    init_from: InitFromOpt = None,
    epochs_from: EpochsFromOpt = None,
    device: Annotated[
        str | None, typer.Option("--device", help="auto (CUDA when present), cpu, cuda or cuda:N.")
    ] = None,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed of initialisation, shuffling and negatives.")
    ] = None,
    max_epochs: Annotated[
        int | None, typer.Option("--max-epochs", min=1, help="Stop after this many epochs.")
    ] = None,
    time_budget: Annotated[
        float | None,
        typer.Option("--time-budget", min=0, help="Stop training after this many seconds (0 = no limit)."),
    ] = None,
    protocols: Annotated[
        list[str] | None,
        typer.Option(
            "--protocol",
            parser=parse_protocol_name,
            metavar=PROTOCOL_METAVAR,
            help="Test protocol(s) besides full ranking (repeatable).",
        ),
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
    manifest_key: Annotated[
        str | None,
        typer.Option(
            "--manifest-key", envvar="ATTNREC_MANIFEST_KEY", show_default=False, help=MANIFEST_KEY_HELP
        ),
    ] = None,
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
    for key, value in (
        ("device", device),
        ("seed", seed),
        ("max_epochs", max_epochs),
        ("time_budget", time_budget),
    ):
        if value is not None:
            train_over[key] = value
    train_over |= fixed_epochs(epochs_from, max_epochs)
    if split == FINAL:
        check_final_fit(valid_users, target_events, min_target_rating, protocols or [])
    else:
        check_split_settings(split, valid_users, target_events, min_target_rating)  # before any data is read
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
        sp = (
            final_split(interactions)
            if split == FINAL
            else make_split(
                interactions, split, valid_users, target_events=target_events, min_rating=min_target_rating
            )
        )
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
            )
        except BaseException:
            distributed.cleanup(sync=False)
            raise
        distributed.cleanup()
        if main_rank:  # rank 0 tests, reports and saves
            names = ["full", *(p for p in dict.fromkeys(protocols or []) if p != "full")]
            _test_save_report(rec, interactions, sp, names, negatives, baseline, out_dir, trackers, save_key)


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
    if sp.name == FINAL:  # a final fit holds nothing out: nothing to test
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
    _print_results(rows, "model")
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


# -- evaluate --------------------------------------------------------------------------------------
def _default_split(rec: Recommender) -> dict[str, Any]:
    """The :func:`make_split` arguments of the split the model was tested on (its target events too)."""
    recorded = (str(ev.get("split", "")) for ev in rec.evaluations_)
    return next((split_settings(s) for s in recorded if parse_split(s)[0] in SPLITS), {"name": DEFAULT_SPLIT})


@app.command(
    name="evaluate",
    epilog="Example: attnrec evaluate --model runs/demo --data demo "
    "--protocol full --protocol sampled-popularity",
)
@cli_errors
@option_groups
def evaluate_cmd(
    model_dir: ModelDirOpt,
    data: DataOpt,
    protocols: Annotated[
        list[str] | None,
        typer.Option(
            "--protocol",
            parser=parse_protocol_name,
            metavar=PROTOCOL_METAVAR,
            help="Ranking protocol (repeatable).",
            show_default="full",
        ),
    ] = None,
    negatives: NegativesOpt = DEFAULT_NEGATIVES,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampled negatives.")] = 0,
    ks: Annotated[
        str, typer.Option("--ks", help="Cut-offs K of HR@K and NDCG@K, comma-separated.")
    ] = "1,5,10",
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            parser=parse_split_name,
            metavar=SPLIT_METAVAR,
            help="How to re-split the data.",
            show_default="the split the model was tested on",
        ),
    ] = None,
    target_events: TargetEventsOpt = "",
    min_target_rating: MinTargetRatingOpt = None,
    target: Annotated[
        str, typer.Option("--target", help="Which held-out split to score: test or valid.")
    ] = "test",
    include_seen: Annotated[
        bool,
        typer.Option("--include-seen", help="Full ranking: keep the user's history among the candidates."),
    ] = False,
    as_json: JsonOpt = False,
    json_out: JsonOutOpt = None,
    legacy_json_path: Annotated[list[str] | None, typer.Argument(hidden=True)] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress display (it shows only on a terminal).")
    ] = False,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "auto",
    metrics: MetricsOpt = None,
    window: WindowOpt = None,
    reading: DataOptions = DataOptions(),
    loading: LoadOptions = LoadOptions(),
) -> None:
    """Score a saved model on a dataset under one or more protocols and print the protocol with the numbers.

    The data is re-split exactly as in training; if its sha256 differs from the one the model was
    trained on, a warning says so (items and users the model does not know are then left out).
    """
    if target not in ("test", "valid"):
        raise ValueError(f"--target must be test or valid, not {target!r}")
    json_out = _legacy_json_path(as_json, legacy_json_path, json_out)
    as_json = as_json and not legacy_json_path
    cut_offs = parse_ks(ks)
    families, window_seconds = parse_metric_options(metrics, window, protocols or [])
    if split:
        check_split_settings(split, 0, target_events, min_target_rating)
    elif target_events or min_target_rating is not None:
        raise ValueError("--target-events / --min-target-rating need --split last-qualifying")
    rec = loading.recommender(model_dir, device)
    interactions = reading.load(data, spinner=show_progress(quiet, as_json))
    want, got = rec.source_.sha256, interactions.source.sha256
    if want and got and want != got:
        warn_line(
            f"DATA MISMATCH: {interactions.source.name} has sha256 {got[:12]}, but the model was trained "
            f"on {rec.source_.name} with sha256 {want[:12]}; these numbers are not comparable to its "
            "training-time results"
        )
    elif not (want and got):
        warn_line("cannot verify that this is the data the model was trained on (no sha256 recorded)")
    sp = (
        make_split(interactions, split, target_events=target_events, min_rating=min_target_rating)
        if split
        else make_split(interactions, **_default_split(rec))
    )
    assert rec.users_ is not None and rec.items_ is not None  # set by load()
    cases, dropped = align_cases(
        sp.test if target == "test" else sp.valid,
        interactions.users,
        interactions.items,
        rec.users_,
        rec.items_,
    )
    if dropped:
        warn_line(
            f"{dropped} of {dropped + len(cases)} {target} cases left out: their user or target item "
            "is unknown to the model"
        )
    results = []
    names = list(dict.fromkeys(protocols or ["full"]))
    with progress_display(show_progress(quiet, as_json), "scoring", len(names)) as steps:
        for done, name in enumerate(names):
            steps.update(done, what=f"scoring {len(cases):,} {target} cases: {name}")
            proto = protocol_for(
                name, negatives, seed, cut_offs, window_seconds, exclude_seen=not include_seen
            )
            results.append(
                evaluate(
                    rec.score_histories,
                    protocol_cases(rec, interactions, sp, proto, target, cases),
                    proto,
                    metrics=families,
                    **list_inputs(rec, interactions, sp, families),
                    popularity=rec.popularity_,
                    data=interactions.source,
                    split=sp.describe(),
                    target=target,
                    candidate_scorer=rec.score_candidates,
                )
            )  # sampled: score just the candidates
        steps.update(len(names), what=f"scored {len(cases):,} {target} cases")
    payload = {
        "model_dir": str(model_dir),
        "model": rec.name,
        "data_sha256_matches": want == got,
        "dropped_cases": dropped,
        "results": [r.to_dict() for r in results],
    }
    if as_json:
        print_json(payload)
    else:
        _print_results([(rec.name, r) for r in results], "model")
    if json_out is not None:
        write_json_file(json_out, payload)


def _legacy_json_path(as_json: bool, extra: list[str] | None, json_out: Path | None) -> Path | None:
    """``evaluate --json PATH`` (before --json-out) still writes PATH, with a warning; one release only."""
    if not extra:
        return json_out
    if not as_json or len(extra) > 1 or json_out is not None:
        raise ValueError(f"unexpected argument(s): {' '.join(extra)}")
    warn_line(
        f"--json PATH is deprecated and will be removed in the next release: write the file with "
        f"--json-out {extra[0]} (--json alone prints the results as JSON on stdout)"
    )
    return Path(extra[0])


# -- recommend -------------------------------------------------------------------------------------
@app.command(
    epilog="Examples: attnrec recommend --model runs/demo --user 1 -k 5\n\n"
    'attnrec recommend --model runs/demo --history "12,40,7"'
)
@cli_errors
@option_groups
def recommend(
    model_dir: ModelDirOpt,
    query: QueryOptions = QueryOptions(),
    include_seen: IncludeSeenOpt = False,
    exclude: ExcludeOpt = None,
    include: IncludeOpt = None,
    as_json: JsonOpt = False,
    device: Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")] = "cpu",
    explain: Annotated[
        bool,
        typer.Option(
            "--explain", help="Add a reason per item (the first 20) and, with --json, its history events."
        ),
    ] = False,
    explain_method: Annotated[
        str, typer.Option("--explain-method", help=f"With --explain. {METHOD_HELP}")
    ] = "greedy",
    reason_verb: ReasonVerb = "interacted with",
    event_verb: EventVerbOpt = None,
    loading: LoadOptions = LoadOptions(),
) -> None:
    """Top-K items for a known user or for an ad-hoc history of item IDs, with titles when known.

    Unknown items in --history are reported and ignored. A user the model does not know (and no
    history) gets the most popular items, and the output says so. --explain adds, per item, the
    history items that raised its score and a short reason.
    """
    if query.user is None and query.history is None:
        raise ValueError("give --user USER or --history 'ITEM,ITEM,...'")
    method, verb, verbs = check_method(explain_method), check_verb(reason_verb), parse_event_verbs(event_verb)
    rec = loading.recommender(model_dir, device)
    hist = query.history_items()
    allowed: list[object] | None = [*split_list(include)] if include else None
    banned: list[object] | None = [*split_list(exclude)] if exclude else None
    r = rec.recommend(
        user=query.user,
        history=hist,
        k=query.k,
        exclude_seen=not include_seen,
        include=allowed,
        exclude=banned,
        explain=method if explain else False,
        reason_verb=verb,
        event_verbs=verbs,
    )
    if as_json:
        print_json(dataclasses.asdict(r))
        return
    if r.unknown_items:
        warn_line(
            f"ignored {len(r.unknown_items)} item(s) unknown to the model: {', '.join(r.unknown_items)}"
        )
    if r.fallback:
        warn_line(f"not personalised: {r.fallback}")
    if hist:
        known = [str(i) for i in hist if str(i) not in set(r.unknown_items)]
        shown = [f"{i} ({rec.titles_[i]})" if i in rec.titles_ else i for i in known[-10:]]
        more = f" (last 10 of {len(known)})" if len(known) > 10 else ""
        out.print(f"history{more}: {', '.join(shown) or '-'}", soft_wrap=True, markup=False, highlight=False)
    who = (
        f"user {query.user}"
        if hist is None
        else f"a history of {len(hist or []) - len(r.unknown_items)} known item(s)"
    )
    seen = "seen items included" if include_seen else "seen items excluded"
    out.print(f"top {len(r.items)} for {who} from {rec.name} ({seen})", soft_wrap=True, markup=False)
    table = Table()
    table.add_column("#", justify="right")
    table.add_column("item")
    if any(t for t in r.titles):
        table.add_column("title")
    table.add_column("score", justify="right")
    if r.explanations is not None:
        table.add_column(f"why ({explain_method})")
    for i, (item, score) in enumerate(zip(r.items, r.scores, strict=True)):
        title = r.titles[i] if i < len(r.titles) else None
        cells = [str(i + 1), item] + ([title or ""] if any(t for t in r.titles) else []) + [f"{score:.4f}"]
        if r.explanations is not None:
            ex = r.explanations[i]
            cells.append(escape(ex.reason or ex.note or "-") if ex else "")
        table.add_row(*cells)
    out.print(table)
