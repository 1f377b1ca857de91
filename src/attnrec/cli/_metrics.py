"""``attnrec evaluate``'s metric options: ``--metrics`` (which families) and ``--window`` (the time-window
protocol's length), and the inputs they need: the window's cases, the training counts, the item vectors."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import numpy as np
import typer

from attnrec.cli._common import warn_line
from attnrec.data.schema import Interactions
from attnrec.data.split import EvalSet, Split
from attnrec.evaluation.list_metrics import item_vectors_of, training_counts
from attnrec.evaluation.metrics import FAMILIES, LIST_FAMILIES, parse_families
from attnrec.evaluation.protocol import PROTOCOLS, Protocol, protocol_by_name
from attnrec.evaluation.window import TargetSets, align_target_sets, parse_window, split_window_cases
from attnrec.recommend import Recommender

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
