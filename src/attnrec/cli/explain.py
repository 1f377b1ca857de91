"""``attnrec explain / explain-train / explain-evaluate``: explainable recommendation (PETER).

Kept apart from ``train``/``evaluate`` because explain-task models read review data (not an
interaction log) and are judged by text metrics (not ranking).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from attnrec.checkpoint import read_json
from attnrec.cli._common import cli_errors, data_option, log_to_stderr, option_groups, out, warn_line
from attnrec.cli._options import overrides_option
from attnrec.cli._output import JsonOpt, print_json
from attnrec.cli.main import app
from attnrec.config import parse_overrides
from attnrec.data.reviews import ReviewData, ReviewSplit, load_review_data, random_split, read_index_dir
from attnrec.recommend import Explainer
from attnrec.recommend.explainer import DECODINGS, Decoding

DataOpt = Annotated[
    Path,
    data_option(
        "Reviews: PETER's folder (reviews.pickle + 1..5/ index folders), Amazon or Yelp "
        "JSON lines, or CSV with user,item,rating,text columns (.gz ok)."
    ),
]
CheckpointOpt = Annotated[
    Path, typer.Option("--model", "-m", help="Checkpoint directory from explain-train.")
]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="auto, peter, amazon, yelp or csv.")]
SPLIT_HELP = "'seed:N' (random 8:1:1, every user and item in training) or 'index:K' (PETER's folder K)"
SplitOpt = Annotated[str, typer.Option("--split", help=f"{SPLIT_HELP}.")]
TrainedSplitOpt = Annotated[
    str | None, typer.Option("--split", help=f"{SPLIT_HELP}; default: the split the model was trained with.")
]


def _split(data: ReviewData, path: Path, spec: str) -> ReviewSplit:
    kind, _, value = spec.partition(":")
    if kind == "seed":
        return random_split(data, int(value or 1))
    if kind == "index":
        return read_index_dir(path / (value or "1"), len(data))
    raise ValueError(f"--split {spec!r}: use seed:N or index:K")


@app.command(
    name="explain-train",
    epilog="Example: attnrec explain-train --data reviews.json.gz --out runs/peter "
    "--preset plus --set emsize=256",
)
@cli_errors
def explain_train(
    data: DataOpt,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Checkpoint directory to write.")],
    model: Annotated[str, typer.Option("--model", "-m", help="Registered explain-task model.")] = "peter",
    preset: Annotated[str, typer.Option(help="paper (PETER, SGD), plus (PETER+) or adam.")] = "paper",
    fmt: FormatOpt = "auto",
    split: SplitOpt = "seed:1",
    sets: Annotated[list[str] | None, overrides_option("Model setting key=value (repeatable).")] = None,
    train_sets: Annotated[
        list[str] | None, typer.Option("--train", help="Training setting key=value.")
    ] = None,
    max_vocab: Annotated[
        int, typer.Option(min=1, help="Vocabulary size (most frequent training words).")
    ] = 20_000,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
) -> None:
    """Train PETER/PETER+ on review data and save a self-contained checkpoint directory."""
    log_to_stderr(not quiet)  # attnrec's own lines, as every command shows them (not the root logger's)
    reviews = load_review_data(data, fmt)
    sp = _split(reviews, data, split)
    out.print(
        f"{len(reviews)} records, {reviews.n_users} users, {reviews.n_items} items; {sp.name}: "
        f"{len(sp.train)}/{len(sp.valid)}/{len(sp.test)}"
    )
    ex = Explainer(
        model,
        parse_overrides(sets or []),
        parse_overrides(train_sets or []),
        preset=preset,
        max_vocab=max_vocab,
    )
    ex.fit(reviews, sp, progress=not quiet)
    metrics = ex.evaluate(reviews, sp.valid, target="valid")
    ex.save(out_dir)
    tr = ex.train_result_
    assert tr is not None
    out.print(
        f"trained {tr.epochs} epochs ({tr.seconds_per_epoch:.1f} s/epoch; {tr.stopped}); best epoch "
        f"{tr.best_epoch}; validation RMSE {metrics['RMSE']:.4f} BLEU-4 {metrics['BLEU-4']:.2f}; saved to "
        f"{out_dir}"
    )


@dataclass(frozen=True)
class DecodingOptions:
    """How ``explain`` and ``explain-evaluate`` decode: the beam, the length and n-gram blocking (by size or
    by name), each the model's own unless given."""

    beam: Annotated[
        int | None, typer.Option(min=1, help="Beam size (1 = greedy, as the paper; default: the model's).")
    ] = None
    max_len: Annotated[
        int | None, typer.Option(min=1, help="Most words to generate (default: the model's).")
    ] = None

    no_repeat_ngram: Annotated[
        int | None,
        typer.Option(
            "--no-repeat-ngram",
            min=0,
            help="Never repeat an n-gram of this size in a generated explanation "
            "(0 = the paper's plain decoding; default: the model's, 3 unless it was saved with another).",
        ),
    ] = None
    decoding: Annotated[
        str | None,
        typer.Option(
            "--decoding",
            help="Named decoding: 'paper' (the authors' plain decoding, = --no-repeat-ngram 0) or "
            "'blocked' (never repeat a trigram, = --no-repeat-ngram 3).",
        ),
    ] = None

    def of(self, ex: Explainer) -> Decoding:
        """The decoding of ``ex`` with these options' changes."""
        return ex.decoding.but(beam=self.beam, max_len=self.max_len, no_repeat_ngram=self.ngram())

    def ngram(self) -> int | None:
        """The n-gram blocking of ``--decoding`` / ``--no-repeat-ngram`` (None: the model's own)."""
        if self.decoding is None:
            return self.no_repeat_ngram
        if self.no_repeat_ngram is not None:
            raise ValueError("give --decoding or --no-repeat-ngram, not both")
        if self.decoding not in DECODINGS:
            raise ValueError(f"--decoding {self.decoding!r}: use {' or '.join(DECODINGS)}")
        return DECODINGS[self.decoding]


@app.command(
    name="explain",
    epilog="Example: attnrec explain --model runs/peter --user A2IBPI20UZIR0U --item 1384719342",
)
@cli_errors
@option_groups
def explain(
    model: CheckpointOpt,
    user: Annotated[str, typer.Option("--user", "-u", help="User ID.")],
    item: Annotated[str, typer.Option("--item", "-i", help="Item ID.")],
    feature: Annotated[str | None, typer.Option(help="Feature word to talk about (PETER+).")] = None,
    decoding: DecodingOptions = DecodingOptions(),
    as_json: JsonOpt = False,
) -> None:
    """Predict the rating and generate an explanation for one user and item."""
    ex = Explainer.load(model)
    if feature is not None and not ex.config.use_feature:
        warn_line("this model is PETER without features; --feature is ignored")
    res = ex.explain(user, item, feature, decoding=decoding.of(ex))
    if as_json:
        print_json(res)
        return
    out.print(
        f"user {res['user']}  item {res['item']}" + (f"  feature {res['feature']}" if res["feature"] else "")
    )
    out.print(f"predicted rating: {res['rating']:.2f}")
    out.print(f"explanation: {res['text']}", soft_wrap=True)
    out.print(f"context words: {' '.join(res['context_words'])}", soft_wrap=True)


@app.command(
    name="explain-evaluate",
    epilog="Example: attnrec explain-evaluate --model runs/peter --data reviews.json.gz",
)
@cli_errors
@option_groups
def explain_evaluate(
    model: CheckpointOpt,
    data: DataOpt,
    fmt: FormatOpt = "auto",
    split: TrainedSplitOpt = None,
    decoding: DecodingOptions = DecodingOptions(),
    as_json: JsonOpt = False,
) -> None:
    """RMSE, MAE, BLEU, ROUGE, USR, FMR, FCR and DIV on the test part of the data."""
    ex = Explainer.load(model)
    chosen = decoding.of(ex)  # before the data is read: a bad --decoding ends here
    reviews = load_review_data(data, fmt)
    if ex.source_.sha256 and reviews.source.sha256 and ex.source_.sha256 != reviews.source.sha256:
        warn_line(f"{data} differs from the file the model was trained on ({ex.source_.path})")
    spec = split or _split_of(model)
    sp = _split(reviews, data, spec)
    metrics = ex.evaluate(reviews, sp.test, decoding=chosen)
    if as_json:
        print_json(metrics)
        return
    table = Table(
        title=f"{ex.spec.name}{'+' if ex.config.use_feature else ''} on {reviews.source.name}, "
        f"{sp.name}, {len(sp.test)} test records"
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in metrics.items():
        table.add_row(k, f"{v:.4f}" if not np.isnan(v) else "nan")
    out.print(table)


def _split_of(model: Path) -> str:
    name = str(read_json(model / "config.json").get("split", ""))
    if name.startswith("random-8:1:1 seed "):
        return "seed:" + name.rsplit(" ", 1)[1]
    if name.startswith("index "):
        return "index:" + name.split(" ", 1)[1]
    raise ValueError(f"{model}: cannot tell its split ({name!r}); give --split")
