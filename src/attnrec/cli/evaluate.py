"""``attnrec evaluate``: score a saved model on a dataset under one or more protocols.

Its metric options, ``--metrics`` (which families) and ``--window`` (the time-window protocol's
length), come with the inputs they need: the window's cases, the training counts, the item vectors."""

import dataclasses
from pathlib import Path
from typing import Annotated, Any  # make_split's keyword arguments

import numpy as np
import typer

from attnrec.cli._common import (
    DataOpt,
    DataOptions,
    LoadOptions,
    cli_errors,
    option_groups,
    parse_ks,
    warn_line,
)
from attnrec.cli._options import (
    DeviceOpt,
    MinTargetRatingOpt,
    ModelDirOpt,
    NegativesOpt,
    TargetEventsOpt,
    choice_option,
    protocol_option,
    seed_option,
    split_option,
)
from attnrec.cli._output import (
    JsonOpt,
    JsonOutOpt,
    print_json,
    progress_display,
    show_progress,
    write_json_file,
)
from attnrec.cli._results import print_results
from attnrec.cli.main import app
from attnrec.data.schema import Interactions
from attnrec.data.split import (
    SPLITS,
    EvalSet,
    Split,
    SplitSettings,
    parse_split,
)
from attnrec.evaluation.alignment import align_cases
from attnrec.evaluation.list_metrics import item_vectors_of, training_counts
from attnrec.evaluation.metrics import FAMILIES, LIST_FAMILIES, parse_families
from attnrec.evaluation.protocol import DEFAULT_NEGATIVES, PROTOCOLS, Protocol, evaluate, protocol_by_name
from attnrec.evaluation.window import TargetSets, align_target_sets, parse_window, split_window_cases
from attnrec.recommend import Recommender

HELD_OUT = ("test", "valid")  # the held-out parts of a split that --target scores

MetricsOpt = Annotated[
    str | None,
    typer.Option(
        "--metrics",
        help=f"Metrics to report, comma-separated: {', '.join(f.lower() for f in FAMILIES)}.",
        show_default="hr,ndcg,mrr; with --protocol time-window also recall,precision,map",
    ),
]
WindowOpt = Annotated[
    str | None,
    typer.Option(
        "--window",
        help="--protocol time-window: the window after the split's test cut-off whose items are the targets "
        "(7d, 12h, 2w, or seconds).",
        show_default="7d",
    ),
]


def parse_metric_options(
    metrics: str | None, window: str | None, protocols: list[str]
) -> tuple[Any, float | None]:
    """``(families or None for each protocol's default, window seconds or None)``, checked before any data is
    read."""
    if window is not None and not any(PROTOCOLS[p].window for p in protocols):
        raise ValueError("--window applies to --protocol time-window")
    return (None if metrics is None else parse_families(metrics)), (
        None if window is None else parse_window(window)
    )


def protocol_for(
    name: str, negatives: int, seed: int, ks: tuple[int, ...], window: float | None, exclude_seen: bool
) -> Protocol:
    """The named protocol with the command's settings; ``window`` (``--window``) sets a time window's
    length."""
    proto = protocol_by_name(name, negatives, seed, ks, window if PROTOCOLS[name].window else None)
    return dataclasses.replace(proto, exclude_seen=exclude_seen)


def protocol_cases(
    rec: Recommender,
    interactions: Interactions,
    split: Split,
    protocol: Protocol,
    target: str,
    single: EvalSet,
) -> EvalSet | TargetSets:
    """The cases ``protocol`` ranks in the model's indices: ``single`` (already aligned), or under a time
    window every item of the window after the split's cut (a warning names cases the model cannot rank)."""
    if protocol.window <= 0:
        return single
    assert rec.users_ is not None and rec.items_ is not None  # a loaded model
    cases = split_window_cases(
        interactions, split, protocol.window, target, exclude_seen=protocol.exclude_seen
    )
    aligned, dropped = align_target_sets(
        cases, interactions.users, interactions.items, rec.users_, rec.items_
    )
    if dropped:
        warn_line(
            f"{dropped} of {len(cases)} time-window cases left out: their user or every target is unknown to "
            "the model"
        )
    return aligned


def list_inputs(
    rec: Recommender, interactions: Interactions, split: Split, families: tuple[str, ...] | None
) -> dict[str, Any]:
    """``train_counts`` and ``item_vectors`` for :func:`attnrec.evaluation.protocol.evaluate` when list
    metrics are asked for: the split's training counts in the model's item indices, and the model's item
    features (else embeddings); a model with neither cannot report diversity."""
    if not families or not any(f in LIST_FAMILIES for f in families):
        return {}
    assert rec.items_ is not None
    counts = training_counts(split.train)  # in the data's item indices
    mapped = np.zeros(len(rec.items_) + 1, dtype=np.int64)
    model_index = np.array([rec.items_.get(i) or 0 for i in interactions.items.to_list()], dtype=np.int64)
    np.add.at(mapped, model_index, counts[1:])
    mapped[0] = 0  # items the model does not know
    context = rec.context_
    vectors = item_vectors_of(rec.core, None if context is None else context.item_features)
    if "Diversity" in families and vectors is None:
        raise ValueError(
            f"diversity compares item features or item embeddings; the {rec.name} model has neither"
        )
    return {"train_counts": mapped, "item_vectors": vectors}


__all__ = ["MetricsOpt", "WindowOpt", "list_inputs", "parse_metric_options", "protocol_cases", "protocol_for"]


def _default_split(rec: Recommender) -> SplitSettings:
    """The settings of the split the model was tested on (its target events too)."""
    recorded = (str(ev.get("split", "")) for ev in rec.evaluations_)
    return next(
        (SplitSettings.described(s) for s in recorded if parse_split(s)[0] in SPLITS), SplitSettings()
    )


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
        list[str] | None, protocol_option("--protocol", "Ranking protocol (repeatable).", show_default="full")
    ] = None,
    negatives: NegativesOpt = DEFAULT_NEGATIVES,
    seed: Annotated[int, seed_option("Seed of the sampled negatives.")] = 0,
    ks: Annotated[
        str, typer.Option("--ks", help="Cut-offs K of HR@K and NDCG@K, comma-separated.")
    ] = "1,5,10",
    split: Annotated[
        str | None,
        split_option("How to re-split the data.", show_default="the split the model was tested on"),
    ] = None,
    target_events: TargetEventsOpt = "",
    min_target_rating: MinTargetRatingOpt = None,
    target: Annotated[
        str, choice_option("--target", HELD_OUT, help="Which held-out split to score.")
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
    device: DeviceOpt = "auto",
    metrics: MetricsOpt = None,
    window: WindowOpt = None,
    reading: DataOptions = DataOptions(),
    loading: LoadOptions = LoadOptions(),
) -> None:
    """Score a saved model on a dataset under one or more protocols and print the protocol with the numbers.

    The data is re-split exactly as in training; if its sha256 differs from the one the model was
    trained on, a warning says so (items and users the model does not know are then left out).
    """
    json_out = _legacy_json_path(as_json, legacy_json_path, json_out)
    as_json = as_json and not legacy_json_path
    cut_offs = parse_ks(ks)
    families, window_seconds = parse_metric_options(metrics, window, protocols or [])
    chosen = None  # the split the model was tested on
    if split:
        chosen = SplitSettings(split, target_events=target_events, min_rating=min_target_rating)
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
    sp = (chosen or _default_split(rec)).make(interactions)
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
        print_results([(rec.name, r) for r in results], "model")
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
