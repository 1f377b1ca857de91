"""``attnrec ingest``: the events of a file (or a directory of Parquet files) into a history store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from attnrec.cli._common import DataOptions, cli_errors, err, option_groups, parse_columns, warn_line
from attnrec.cli._options import SignalOpt, declare_signals
from attnrec.cli.main import app
from attnrec.data.schema import DataError, Interactions
from attnrec.data.stream import read_parquet_stream
from attnrec.store import DEFAULT_RETENTION, log_events, open_store

StoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        help="The history store: a SQLite file (created when missing) or a redis:// URL (see "
        "docs/how-to/live-histories.md).",
    ),
]
RetentionOpt = Annotated[
    int, typer.Option("--store-retention", min=1, help="Events the store keeps per user (the newest).")
]


def _read(file: str, data: DataOptions) -> Interactions:
    """The events of ``file`` as ``train --data`` reads them; a directory is read as Parquet files, in
    batches, and an option that does not apply to them is refused (it was ignored without a word)."""
    if not Path(file).is_dir():
        return data.load(file)
    unread = [
        flag
        for flag, given in (
            (f"--format {data.fmt}", data.fmt not in ("auto", "parquet")),
            ("--titles", data.titles is not None),
            ("--item-features", data.item_features is not None),
            ("--user-features", data.user_features is not None),
            ("--feature-columns", data.feature_columns is not None),
        )
        if given
    ]
    if unread:
        raise DataError(
            f"{file}: a directory is read as Parquet files of events; {', '.join(unread)}: not read"
        )
    with err.status(f"reading {file} ..."):
        return read_parquet_stream(
            file,
            parse_columns(data.columns),
            min_rating=data.min_rating,
            k_core=data.k_core,
            time_format=data.time_format,
        )


@app.command("ingest")
@cli_errors
@option_groups
def ingest(
    file: Annotated[
        str,
        typer.Argument(
            help="An interaction file (CSV/TSV/Parquet/JSON lines, .gz ok) or a Parquet directory."
        ),
    ],
    store: StoreOpt,
    data: DataOptions,
    model: Annotated[
        Path | None,
        typer.Option(
            help="A saved model directory: keep the columns of the signals it reads, and report the events "
            "whose items it does not know (stored, not scored)."
        ),
    ] = None,
    signal: SignalOpt = None,
    batch: Annotated[int, typer.Option(min=1, help="Events per store transaction.")] = 10_000,
    store_retention: RetentionOpt = DEFAULT_RETENTION,
) -> None:
    """Store the events of a file in a history store, for live histories and the next retrain.

    FILE holds user, item and optional timestamp, event type and rating columns, read as
    `train --data` reads them, and the columns of the signals --model reads or --signal declares (stored
    with each event).
    The whole file is checked before anything is stored: a bad row stops it, naming the line."""
    items = None
    if model is not None:  # first: loading declares the signals the model reads, which the file may hold
        from attnrec.recommend import Explainer, Recommender, load

        loaded = load(model)
        items = loaded.items_ if isinstance(loaded, (Recommender, Explainer)) else None
    declare_signals(signal)  # after the model's: one it declares is taken as it is, of the same kind
    log = _read(file, data)
    if log.timestamp is None:
        warn_line(f"{file} has no timestamp column: every event is stamped with the time of this ingest")
    target = open_store(store, retention=store_retention)
    t0, stored, unknown = time.perf_counter(), 0, 0
    try:
        for events in log_events(log, int(time.time()), batch):
            stored += target.append(events)
            if items is not None:
                unknown += sum(e.item not in items for e in events)
    finally:
        target.close()
    seconds = time.perf_counter() - t0
    err.print(
        f"stored {stored:,} events of {log.n_users:,} users in {seconds:.1f}s "
        f"({stored / max(seconds, 1e-9):,.0f} events/s) into {store}"
    )
    if unknown:
        warn_line(
            f"{unknown:,} events are for items the model does not know: stored for the next retrain, not "
            "scored"
        )
