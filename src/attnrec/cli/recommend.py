"""``attnrec recommend``: the top-K items for one user or one ad-hoc history, optionally explained."""

import dataclasses
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from attnrec.cli._common import (
    LoadOptions,
    QueryOptions,
    cli_errors,
    option_groups,
    out,
    warn_line,
)
from attnrec.cli._item_explanations import METHOD_HELP, ReasonOptions
from attnrec.cli._options import CandidateOptions, DeviceOpt, ModelDirOpt
from attnrec.cli._output import JsonOpt, print_json
from attnrec.cli.main import app
from attnrec.recommend.reasons import check_method


@app.command(
    epilog="Examples: attnrec recommend --model runs/demo --user 1 -k 5\n\n"
    'attnrec recommend --model runs/demo --history "12,40,7"'
)
@cli_errors
@option_groups
def recommend(
    model_dir: ModelDirOpt,
    query: QueryOptions = QueryOptions(),
    candidates: CandidateOptions = CandidateOptions(),
    as_json: JsonOpt = False,
    device: DeviceOpt = "cpu",
    explain: Annotated[
        bool,
        typer.Option(
            "--explain", help="Add a reason per item (the first 20) and, with --json, its history events."
        ),
    ] = False,
    explain_method: Annotated[
        str, typer.Option("--explain-method", help=f"With --explain. {METHOD_HELP}")
    ] = "greedy",
    reasoning: ReasonOptions = ReasonOptions(),
    loading: LoadOptions = LoadOptions(),
) -> None:
    """Top-K items for a known user or for an ad-hoc history of item IDs, with titles when known.

    Unknown items in --history are reported and ignored. A user the model does not know (and no
    history) gets the most popular items, and the output says so. --explain adds, per item, the
    history items that raised its score and a short reason.
    """
    if query.user is None and query.history is None:
        raise ValueError("give --user USER or --history 'ITEM,ITEM,...'")
    method, wording = check_method(explain_method), reasoning.wording()
    rec = loading.recommender(model_dir, device)
    hist = query.history_items()
    r = rec.recommend(
        user=query.user,
        history=hist,
        k=query.k,
        explain=method if explain else False,
        **wording,
        **candidates.filters(),
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
        unknown = set(r.unknown_items)
        known = [str(i) for i in hist if str(i) not in unknown]
        shown = [f"{i} ({rec.titles_[i]})" if i in rec.titles_ else i for i in known[-10:]]
        more = f" (last 10 of {len(known)})" if len(known) > 10 else ""
        out.print(f"history{more}: {', '.join(shown) or '-'}", soft_wrap=True, markup=False, highlight=False)
    who = f"user {query.user}"
    if hist is not None:
        sent = f"a history of {len(hist) - len(r.unknown_items)} known item(s)"
        # with both, the sent history follows the user's stored one (Recommender.recommend)
        who = sent if query.user is None else f"{who} plus {sent}"
    seen = "seen items included" if candidates.include_seen else "seen items excluded"
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
