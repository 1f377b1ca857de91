"""``attnrec retrain``: the nightly loop in one command (export the store, join, warm-start, save, reload).

The order keeps every event exactly once: the store's :meth:`~attnrec.store.HistoryStore.watermark` is
taken first and only the events up to it are exported and joined to the base log; the model is
warm-started on the joined log (final fit: every event trains) and saved; the running server is asked
to reload it; only then are the exported events trimmed from the store. Events that arrive while
it runs stay in the store, and the new model reads them as live events after the reload.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer

from attnrec.cli._common import DataOptions, cli_errors, err, option_groups
from attnrec.cli._options import ManifestKeyOpt, max_epochs_option
from attnrec.cli._warm_options import EpochsFromOpt, NewItemRowsOpt, fixed_epochs
from attnrec.cli.ingest import StoreOpt
from attnrec.cli.main import app
from attnrec.config import ConfigError
from attnrec.data.schema import EVENT, RATING, DataError, Interactions
from attnrec.data.split import DEFAULT_SPLIT, FINAL
from attnrec.recommend import Recommender
from attnrec.recommend.event_requests import declare_saved_signals
from attnrec.store import HistoryStore, open_store
from attnrec.training.result import TrainResult

Reload = Callable[[Path], None]  # asks the server to load the new model directory


@dataclass(frozen=True)
class Retrained:
    """What one retrain did: the new model, the log it trained on and the store events it moved."""

    model: Recommender
    log: Interactions
    exported: int
    trimmed: int
    reloaded: bool
    validated: TrainResult | None = None  # the validated fine-tune that chose the epochs (--validate-epochs)


def joined_log(
    base: Interactions, exported: pd.DataFrame, forgotten: list[str], reads: Collection[str] = ()
) -> Interactions:
    """``base`` without the events of ``forgotten`` users, followed by the ``exported`` store events.

    The joined log keeps the base's columns (a timestamp column orders each user's events); its item
    titles and features come along, store items without a feature row get empty features. An event
    type, rating or declared signal column that some store events lack (all are optional in
    ``POST /v1/events``) is left out of the join unless the model ``reads`` it, in which case it is an
    error naming the column.
    """
    frame = base.to_frame()
    frame = frame[~frame["user"].isin(set(forgotten))]
    columns = list(frame.columns)
    optional = (EVENT, RATING, *base.signals)
    exported = exported.assign(**{c: None for c in base.signals if c not in exported.columns})
    missing = [c for c in columns if c not in exported.columns]
    if missing:
        raise DataError(f"the store's events have no {', '.join(missing)} column for the base log")
    for column in optional:
        if column not in columns or not exported[column].isna().any():
            continue
        if column in reads:
            lacking = int(exported[column].isna().sum())
            raise DataError(
                f"{lacking:,} store events have no {column}, which the model reads: send {column!r} with "
                "each event"
            )
        frame, columns = frame.drop(columns=column), [c for c in columns if c != column]
    joined = pd.concat([frame, exported[columns]], ignore_index=True)
    return Interactions.from_frame(
        joined,
        user="user",
        item="item",
        timestamp="timestamp" if "timestamp" in columns else None,
        event="event" if "event" in columns else None,
        rating="rating" if "rating" in columns else None,
        titles=base.item_titles,
        item_features=base.item_features,
        missing_features="empty",
        name=base.source.name,
    )


def columns_read(model: Recommender) -> set[str]:
    """The per-event columns (event type, rating, time, declared signals) ``model``'s inputs or targets
    read."""
    config = model.config
    inputs = getattr(config, "input_columns", None)
    targets = getattr(config, "target_columns", None)
    return set(inputs() if inputs else ()) | set(targets() if targets else ())


def retrain(
    old: Path,
    store: HistoryStore,
    base: Interactions,
    out: Path,
    *,
    train: dict[str, object] | None = None,
    reload: Reload | None = None,
    log_out: Path | None = None,
    manifest_key: str | None = None,
    progress: bool = False,
    new_only: bool = False,
    validate: bool = False,
    new_item_rows: str = "initial",
) -> Retrained:
    """Warm-start ``old`` on ``base`` plus ``store``'s events, save it to ``out`` (and the joined log to
    ``log_out``), reload, then trim the store. ``train``: training settings over the old model's; the
    number of epochs defaults to the old model's best epoch. ``new_only``: fine-tune on the events from
    the oldest exported one on (``new_since``), one epoch unless ``train`` says otherwise. ``validate`` (with
    ``new_only``): the number of epochs is chosen first by a fine-tune validated on the last exported event
    of each user with exported events (early stopping, at most ``train``'s ``max_epochs``), then the
    fine-tune on every exported event trains that many. ``new_item_rows``: where the new items' rows start
    (:meth:`~attnrec.recommend.Recommender.fit`'s)."""
    if out.resolve() == old.resolve():
        raise ConfigError(f"--out {out}: the new model must not overwrite the one it starts from")
    previous = Recommender.load(old, device="cpu")
    mark, started = store.watermark(), int(time.time())
    forgotten = store.forgotten()
    exported = store.export(until=mark)
    log = joined_log(base, exported, forgotten, columns_read(previous))
    settings = dict(train or {})
    new_since, validated = None, None
    if validate and not new_only:
        raise ConfigError("--validate-epochs chooses the epochs of a --new-only fine-tune: add --new-only")
    if new_only:
        if exported.empty:
            raise ConfigError("--new-only: the store holds no events to fine-tune on")
        new_since = float(exported["timestamp"].min())
        if validate:
            probe = Recommender(previous.name, train=settings, auto=False)
            probe.fit(
                log,
                DEFAULT_SPLIT,
                init_from=previous,
                progress=progress,
                new_since=new_since,
                new_item_rows=new_item_rows,
            )
            validated = probe.train_result_
            settings["max_epochs"] = max(1, validated.best_epoch if validated is not None else 1)
        settings.setdefault("max_epochs", 1)
    if (
        "max_epochs" not in settings
        and previous.train_result_ is not None
        and previous.train_result_.best_epoch
    ):
        settings["max_epochs"] = previous.train_result_.best_epoch
    model = Recommender(previous.name, train=settings, auto=False)
    model.fit(
        log, FINAL, init_from=previous, progress=progress, new_since=new_since, new_item_rows=new_item_rows
    )
    model.save(out, manifest_key=manifest_key)
    if log_out is not None:  # before the trim: the exported events then live in the next base log
        log_out.parent.mkdir(parents=True, exist_ok=True)
        log.to_frame().to_parquet(log_out, index=False)
    if reload is not None:
        reload(out)  # an error here leaves the store as it was: the events are not lost
    trimmed = store.trim(mark)
    store.clear_forgotten(forgotten, started)
    return Retrained(model, log, len(exported), trimmed, reload is not None, validated)


def http_reload(url: str, name: str, admin_key: str | None) -> Reload:
    """A :data:`Reload` that POSTs ``/v1/admin/reload`` of the server at ``url`` for the model ``name``."""
    import httpx  # the serve extra

    def reload(path: Path) -> None:
        headers = {"X-API-Key": admin_key} if admin_key else {}
        try:
            answer = httpx.post(
                url.rstrip("/") + "/v1/admin/reload",
                json={"model": name, "path": str(path.resolve())},
                headers=headers,
                timeout=600,
            )
        except httpx.HTTPError as e:
            raise ConfigError(f"--reload {url}: {e}; the new model is saved in {path}") from None
        if answer.status_code != 200:
            raise ConfigError(
                f"--reload {url}: HTTP {answer.status_code} {answer.text[:300]}; the new model is saved "
                f"in {path}, the store was left as it was"
            )

    return reload


@app.command(
    "retrain",
    epilog="Example: attnrec retrain --model runs/v1 --store events.db --data log.parquet --out runs/v2",
)
@cli_errors
@option_groups
def retrain_command(
    model: Annotated[Path, typer.Option("--model", help="The saved model to start from (warm start).")],
    store: StoreOpt,
    data: Annotated[str, typer.Option("--data", help="The base log the old model was trained on.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the new model.")],
    reading: DataOptions = DataOptions(),
    log_out: Annotated[
        Path | None,
        typer.Option(
            "--log-out",
            help="Write the joined log (base + exported events) to this Parquet file: the next retrain's "
            "--data.",
        ),
    ] = None,
    epochs: Annotated[int | None, max_epochs_option("Epochs of the fine-tune.")] = None,
    epochs_from: EpochsFromOpt = None,
    new_only: Annotated[
        bool,
        typer.Option(
            "--new-only",
            help="Fine-tune on the store's events only (from the oldest one's time on), the history before "
            "them as the input; one epoch unless --max-epochs or --epochs-from says otherwise.",
        ),
    ] = False,
    validate_epochs: Annotated[
        bool,
        typer.Option(
            "--validate-epochs",
            help="With --new-only: choose the number of epochs first, by a fine-tune that holds out the last "
            "store event of each user with store events and stops early on them (at most --max-epochs, by "
            "default the old model's), then fine-tune that many on every store event.",
        ),
    ] = False,
    new_item_rows: NewItemRowsOpt = "initial",
    reload: Annotated[
        str | None, typer.Option("--reload", help="URL of a running server to hot-reload the new model into.")
    ] = None,
    served_name: Annotated[
        str | None,
        typer.Option(
            "--served-name", help="The model's name on that server.", show_default="--model's directory name"
        ),
    ] = None,
    admin_key: Annotated[
        str | None,
        typer.Option(
            "--admin-key", envvar="ATTNREC_ADMIN_KEY", show_default=False, help="An API key of that server."
        ),
    ] = None,
    manifest_key: ManifestKeyOpt = None,
) -> None:
    """Warm-start a model on its base log plus the events a store gathered, save it, optionally reload a
    server.

    The events up to the moment it starts are exported from the store and joined to --data (users who
    asked to be forgotten lose their old events); the model is fine-tuned on every event (final fit)
    for --max-epochs (--epochs-from a validated run; by default the old model's best epoch); with
    --new-only on the store's events only, one epoch by default, or as many as a validated fine-tune on
    them chose (--validate-epochs). After the save (and the reload), the
    exported events are removed from the store; events that arrived meanwhile stay, read as live events.
    """
    if validate_epochs and epochs_from is not None:
        raise ConfigError("--validate-epochs and --epochs-from both set the number of epochs: give one")
    train: dict[str, object] = {**fixed_epochs(epochs_from, epochs)}
    if epochs is not None:
        train["max_epochs"] = epochs
    declare_saved_signals(model)  # the base log's columns of the signals the model reads
    base = reading.load(data)
    target = open_store(store)
    asked = None if reload is None else http_reload(reload, served_name or model.name, admin_key)
    try:
        done = retrain(
            model,
            target,
            base,
            out,
            train=train,
            reload=asked,
            log_out=log_out,
            manifest_key=manifest_key,
            new_only=new_only,
            validate=validate_epochs,
            new_item_rows=new_item_rows,
        )
    finally:
        target.close()
    tr = done.model.train_result_
    epochs_done = tr.epochs if tr is not None else 0
    if done.validated is not None:
        v = done.validated
        err.print(
            f"validated fine-tune: best epoch {v.best_epoch} of {v.epochs} "
            f"({done.model.train_config.monitor} {v.best_value:.4f})"
        )
    err.print(
        f"retrained on {len(done.log):,} events ({done.exported:,} from the store) for {epochs_done} "
        f"epoch(s); saved to {out}{'; reloaded' if done.reloaded else ''}; {done.trimmed:,} events moved out "
        "of the store"
    )
