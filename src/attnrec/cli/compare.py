"""``attnrec compare``: the papers' comparison tables on any dataset (a thin layer over
:func:`attnrec.experiments.comparison.compare`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attnrec.cli._common import cli_errors, data_option, err, load_data, log_to_stderr, out, split_list
from attnrec.cli._options import (
    NegativesOpt,
    max_epochs_option,
    preset_option,
    protocol_option,
    seed_option,
    split_option,
    time_budget_option,
    valid_users_option,
)
from attnrec.cli._output import progress_display, show_progress
from attnrec.cli.main import app
from attnrec.data.split import DEFAULT_SPLIT, make_split
from attnrec.evaluation.protocol import DEFAULT_NEGATIVES, check_single_target, protocol_by_name
from attnrec.experiments.comparison import Comparison, compare, default_models, empty_comparison
from attnrec.models.registry import get_spec


@app.command(
    "compare",
    epilog="Example: attnrec compare --data ml-1m --protocol sampled-popularity --also full --time-budget "
    "600 --out results/ml-1m",
)
@cli_errors
def compare_cmd(
    data: Annotated[
        str | None,
        data_option("Dataset: 'demo', a named dataset (ml-1m, beauty, ...) or a file path."),
    ] = None,
    models: Annotated[
        list[str] | None,
        typer.Option(
            "--models",
            "-m",
            help="Models to compare, comma-separated or repeated (default: every sequential model).",
        ),
    ] = None,
    protocol: Annotated[
        str,
        protocol_option(
            "--protocol", "Test (and validation) protocol: full ranking or --negatives sampled negatives."
        ),
    ] = "full",
    also: Annotated[
        list[str] | None,
        protocol_option(
            "--also",
            "Also test the same fitted models under this protocol (repeatable); one more table each.",
        ),
    ] = None,
    negatives: NegativesOpt = DEFAULT_NEGATIVES,
    preset: Annotated[
        str,
        preset_option(
            "Preset for every model: 'auto' (named after the dataset: ml-1m, beauty, demo), "
            "'none' (defaults) or a preset name."
        ),
    ] = "auto",
    time_budget: Annotated[
        float | None,
        time_budget_option("Seconds of training per model, 0 = no limit (default: the preset's)."),
    ] = None,
    max_epochs: Annotated[int | None, max_epochs_option("Epoch cap per model.")] = None,
    split: Annotated[str, split_option("How test and validation cases are held out.")] = DEFAULT_SPLIT,
    valid_users: Annotated[
        int,
        valid_users_option(
            "leave-one-out: validate on this many users (seed 0); the others also train "
            "on their second-to-last item. 0 = all users."
        ),
    ] = 0,
    seed: Annotated[int, seed_option("Seed of training and of the sampled negatives.")] = 0,
    device: Annotated[
        str, typer.Option("--device", help="auto (CUDA when present), cpu, cuda or cuda:N.")
    ] = "auto",
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Directory for comparison.md and comparison.json (rewritten after every model).",
        ),
    ] = Path("runs/compare"),
    notes: Annotated[
        Path | None,
        typer.Option(
            "--notes",
            help="A markdown file of explanations (e.g. of a shortfall against the paper) to include.",
        ),
    ] = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Merge into the comparison.json already in --out: the given models' rows are replaced "
            "(or added) and the others kept; each new row records its own settings (e.g. a larger "
            "--time-budget).",
        ),
    ] = False,
    render: Annotated[
        bool,
        typer.Option(
            "--render",
            help="Train nothing: rewrite comparison.md from the comparison.json in --out (with --notes).",
        ),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every epoch.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress display (it shows only on a terminal).")
    ] = False,
) -> None:
    """Train several models on one dataset under one protocol and write the side-by-side table.

    HR@1/5/10, NDCG@5/10, MRR, training time and parameter count per model, as markdown and JSON.

    The published figures (BERT4Rec paper, Table 2) are shown beside ours only when the data file
    (by sha256), the split and the protocol are the paper's: ml-1m.txt or beauty.txt,
    leave-one-out, --protocol sampled-popularity with 100 negatives.
    """
    log_to_stderr(verbose)
    text = notes.read_text(encoding="utf-8") if notes else ""
    if render:
        saved = out_dir / "comparison.json"
        if not saved.is_file():
            raise FileNotFoundError(f"--render: no {saved}; run the comparison first")
        result = Comparison.read(saved)
        result.notes = text or result.notes
        md, _ = result.write(out_dir)
        out.print(f"wrote {md}")
        return
    if data is None:
        raise ValueError("--data is required (unless --render)")
    names = split_list(models)
    for name in names:
        get_spec(name)
    check_single_target([protocol, *(also or [])], "attnrec compare")
    proto = protocol_by_name(protocol, negatives, seed)
    others = [protocol_by_name(p, negatives, seed) for p in dict.fromkeys(also or [])]
    with err.status(f"loading {data} ..."):
        interactions = load_data(data)
    names = names or default_models(interactions)
    sp = make_split(interactions, split, valid_users)
    train = {"seed": seed, "device": device} | ({"max_epochs": max_epochs} if max_epochs else {})
    out.print(
        f"comparing {', '.join(names)} on {interactions.source.name} ({interactions.n_users:,} users, "
        f"{interactions.n_items:,} items); protocol: {proto.describe()}",
        soft_wrap=True,
    )

    saved = out_dir / "comparison.json"
    if update:
        if not saved.is_file():
            raise FileNotFoundError(
                f"--update: no {saved} to merge into; run the comparison without --update first"
            )
        # Refuse an incompatible merge before any training.
        planned = empty_comparison(interactions, sp, proto, proto)
        planned.others = [empty_comparison(interactions, sp, p, proto) for p in others if p != proto]
        Comparison.read(saved).merge(planned)

    def merged(result: Comparison) -> Comparison:
        if not update:
            return result
        # Read again at every write: another `--update` run may have merged its rows meanwhile.
        latest = Comparison.read(saved)
        full = latest.merge(result)
        full.notes = text or latest.notes
        return full

    def written(result: Comparison) -> None:
        steps.update(len(result.runs), what=f"comparing: {len(result.runs)} of {len(names)} models done")
        md, _ = merged(result).write(out_dir)
        run = result.runs[-1]
        status = run.error or "  ".join(
            f"{k} {run.metrics[k]:.4f}" for k in ("HR@10", "NDCG@10") if k in run.metrics
        )
        out.print(f"  {run.model}: {status}  ({run.train_seconds:.0f}s)  -> {md}", soft_wrap=True)

    with progress_display(show_progress(quiet), "comparing", len(names)) as steps:
        result = compare(
            interactions,
            names,
            protocol=proto,
            preset=None if preset == "none" else preset,
            time_budget=time_budget,
            train=train,
            split=sp,
            progress=False,
            on_run=written,
            also=others,
            notes=text,
        )
    result = merged(result)
    md, js = result.write(out_dir)
    out.print(result.to_markdown(), soft_wrap=True, markup=False)
    out.print(f"wrote {md} and {js}")
