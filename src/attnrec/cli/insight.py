"""``attnrec attention`` and ``attnrec explain-rec``: what the self-attention models look at, and per-item
reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from attnrec.cli._common import (
    QueryOptions,
    cli_errors,
    data_option,
    err,
    load_data,
    option_groups,
    out,
    warn_line,
)
from attnrec.cli._item_explanations import METHOD_HELP, ReasonOptions, print_item_explanations
from attnrec.cli._options import DeviceOpt, seed_option
from attnrec.cli._output import JsonOpt, print_json
from attnrec.cli.main import app
from attnrec.evaluation.attention import attention_summary, histories_from_data, plot_attention
from attnrec.recommend import Recommender
from attnrec.recommend.explain_rec import explain_recommendation
from attnrec.recommend.reasons import DEFAULT_METHOD, check_method

ModelDir = Annotated[Path, typer.Option("--model", "-m", help="A SASRec or BERT4Rec model directory.")]


@app.command(epilog="Example: attnrec attention --model runs/demo --out runs/demo/attention --users 500")
@cli_errors
def attention(
    model_dir: ModelDir,
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", help="Directory for attention.json/.npz and the PNGs.")
    ],
    data: Annotated[
        str | None,
        data_option(
            "Histories to feed the model: 'demo', a named dataset or a file "
            "[default: the histories stored with the model]."
        ),
    ] = None,
    users: Annotated[
        int, typer.Option("--users", "-n", min=1, help="How many users to average over.")
    ] = 1000,
    window: Annotated[
        int, typer.Option("--window", min=2, help="Most recent positions shown in plots/JSON.")
    ] = 15,
    seed: Annotated[int, seed_option("Seed of the user sample.")] = 0,
    no_plot: Annotated[
        bool, typer.Option("--no-plot", help="Write JSON/NPZ only (no matplotlib needed).")
    ] = False,
    device: DeviceOpt = "cpu",
) -> None:
    """Average attention weights per layer and head over users, as in the SASRec paper's heat-maps.

    Writes attention.json (the last --window positions and offsets), attention.npz (full matrices) and, unless --no-plot, attention_heatmap.png (query x key position, 0 = the predicting position) and attention_offsets.png (attention mass by key offset).
    """  # noqa: E501  # --help prints a paragraph's line breaks as written (typer's rich mode): one line each
    rec = Recommender.load(model_dir, device=device)
    assert rec.histories_ is not None and rec.users_ is not None and rec.items_ is not None
    hist, names = rec.histories_, rec.users_.to_list()
    if data is not None:
        hist, names = histories_from_data(rec.items_, load_data(data))
    summary = attention_summary(
        rec.core,
        hist,
        names,
        name=rec.name,
        max_len=rec.max_len or 0,
        device=rec.device,
        n_users=users,
        seed=seed,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "attention.json").write_text(json.dumps(summary.to_dict(window), indent=1) + "\n")
    np.savez_compressed(
        out_dir / "attention.npz",
        absolute=summary.absolute,
        relative=summary.relative,
        offsets=summary.offsets(),
        query_counts=summary.query_counts,
    )
    written = [out_dir / "attention.json", out_dir / "attention.npz"]
    if not no_plot:
        try:
            written += plot_attention(summary, out_dir, window)
        except RuntimeError as e:
            warn_line(f"{e}; wrote the JSON and NPZ only")
    table = Table(
        title=escape(
            f"{summary.model}: attention of the predicting position ({summary.predicting}), "
            f"mean over {summary.n_users} users"
        )
    )
    table.add_column("layer")
    table.add_column("head")
    for k in (1, 5, 20):
        table.add_column(f"on last {k}", justify="right")
    table.add_column("peak offset (all queries)", justify="right")
    offs = summary.offsets()
    for layer in range(summary.absolute.shape[0]):
        for h in range(summary.absolute.shape[1]):
            row = summary.absolute[layer, h, -1]
            shares = [f"{row[-k:].sum():.3f}" for k in (1, 5, 20)]
            table.add_row(
                str(layer + 1), str(h + 1), *shares, str(int(offs[summary.relative[layer, h].argmax()]))
            )
    out.print(table)
    out.print(
        "positions count back from the predicting one (0); 'on last k' includes position 0 itself; "
        "the peak offset is over every real query, not only the predicting one"
    )
    for p in written:
        out.print(f"wrote {p}")


@app.command(
    name="explain-rec",
    epilog="Examples: attnrec explain-rec --model runs/demo --user 1\n\n"
    'attnrec explain-rec --model runs/demo --history "12,40,7" --method greedy --reason-verb watched\n\n'
    "attnrec explain-rec --model runs/shop --user 1 --event-verb buy=purchased\n\n"
    "attnrec explain-rec --model runs/demo --user 1 --method occlusion --item 42",
)
@cli_errors
@option_groups
def explain_rec(
    model_dir: ModelDir,
    query: QueryOptions = QueryOptions(),
    top: Annotated[int, typer.Option("--top", min=1, help="How many history items to list (per item).")] = 10,
    method: Annotated[str, typer.Option("--method", help=METHOD_HELP)] = DEFAULT_METHOD,
    item: Annotated[
        str | None,
        typer.Option("--item", help="Explain this item's score instead of the top-K (it may rank anywhere)."),
    ] = None,
    reasoning: ReasonOptions = ReasonOptions(),
    as_json: JsonOpt = False,
    device: DeviceOpt = "cpu",
) -> None:
    """Recommend for one user and list, per recommended item, the history items behind it with a reason.

    'attention' is the last layer's weight from the predicting position (mean over heads); 'rollout' follows the attention through all layers: both are shared by the whole list. 'greedy' (the default: history items chosen in rounds, each the one whose removal lowers the score most given those chosen before), 'occlusion' (exact: the score drop without each history item) and 'integrated_gradients' explain each item on its own.
    """  # noqa: E501  # --help prints a paragraph's line breaks as written (typer's rich mode): one line each
    if (query.user is None) == (query.history is None):
        raise ValueError("give exactly one of --user USER or --history 'ITEM,ITEM,...'")
    check_method(method)  # before loading the model: a typo costs nothing
    wording = reasoning.wording()
    rec = Recommender.load(model_dir, device=device)
    ex = explain_recommendation(
        rec,
        user=query.user,
        history=query.history_items(),
        k=query.k,
        top=top,
        method=method,
        item=item,
        **wording,
    )
    if as_json:
        print_json(ex.to_dict())
        return
    r = ex.recommendation
    if r.unknown_items:
        warn_line(
            f"ignored {len(r.unknown_items)} item(s) unknown to the model: {', '.join(r.unknown_items)}"
        )
    who = f"user {ex.user}" if ex.user else "the history"
    what = f"item {item} for {who}" if item is not None else f"top {len(r.items)} for {who}"
    recs = Table(title=escape(f"{ex.model}: {what}"))
    for col in ("#", "item", "title", "score", f"why ({ex.method})"):
        recs.add_column(col, justify="right" if col in ("#", "score") else "left")
    for i, (it, title, score, why) in enumerate(
        zip(r.items, r.titles, r.scores, ex.explanations, strict=True), 1
    ):
        recs.add_row(
            str(i), escape(it), escape(title or ""), f"{score:.3f}", escape(why.reason or why.note or "-")
        )
    out.print(recs)
    if ex.method == "attention":
        att = Table(
            title=escape(
                f"most attended history items (from {ex.predicting}; the model saw the last "
                f"{ex.window} of {ex.history_length} items; shared by every item)"
            )
        )
        for col in ("item", "title", "items back", "attention", "rollout"):
            att.add_column(col, justify="right" if col in ("items back", "attention", "rollout") else "left")
        for a in ex.attended:
            att.add_row(
                escape(a.item), escape(a.title or ""), str(a.back), f"{a.weight:.3f}", f"{a.rollout:.3f}"
            )
        out.print(att)
    else:
        shared = "; one list shared by every item" if ex.shared else ""
        out.print(
            f"per item, the history items behind it by {ex.method} (the model saw the last {ex.window} of "
            f"{ex.history_length} items{shared}):",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        print_item_explanations(list(ex.explanations), r.titles, top)
    if ex.self_weight:
        err.print(
            escape(f"the [mask] position kept {ex.self_weight:.3f} of its last-layer attention on itself")
        )
