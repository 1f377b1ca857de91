"""The warm-start and final-fit options of ``attnrec train`` (and ``attnrec retrain``)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from attnrec.cli._options import choice_option
from attnrec.config import ConfigError
from attnrec.data.split import DEFAULT_SPLIT, FINAL, SPLITS
from attnrec.recommend import Recommender
from attnrec.recommend.warm import NEW_ITEM_ROWS

TRAIN_SPLITS = (*SPLITS, FINAL)
InitFromOpt = Annotated[
    Path | None,
    typer.Option(
        "--init-from",
        help="Warm start from this saved model of the same type: its weights and settings are copied, its "
        "users and items keep their indices, new ones are appended; then training goes on as usual.",
    ),
]
EpochsFromOpt = Annotated[
    Path | None,
    typer.Option(
        "--epochs-from",
        help="Train for the best epoch of this saved, validated model (with --split none: the final fit).",
    ),
]

NewSinceOpt = Annotated[
    str | None,
    typer.Option(
        "--new-since",
        help="With --init-from: fine-tune on the new events only. The users with an event at or after this "
        "time (Unix seconds, or an ISO date/time, UTC unless it names a zone) train on those events, the "
        "history before them as the input. With --split none for a fixed number of epochs; with --split "
        "leave-one-out each of those users' last event validates and training stops early (its best "
        "epoch then serves --epochs-from).",
        show_default=False,
    ),
]

NewItemRowsOpt = Annotated[
    str,
    choice_option(
        "--new-item-rows",
        NEW_ITEM_ROWS,
        help="With --init-from, where a new item's row starts when the model has no item features: initial "
        "(the model's initialisation, near zero: a short fine-tune leaves the item below the trained ones) "
        "or histories (the model's query vectors over the histories the item followed, at a trained row's "
        "size: it competes at once).",
    ),
]


def new_since_seconds(text: str | None) -> float | None:
    """``--new-since`` as Unix seconds (``None`` without it); neither a number nor a date: a ConfigError."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"--new-since {text!r}: neither Unix seconds nor an ISO date/time (e.g. 2024-05-01T06:00)"
            ) from None
        value = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(value):
        raise ConfigError(f"--new-since {text!r}: not a finite time")
    return value


def fixed_epochs(epochs_from: Path | None, max_epochs: int | None) -> dict[str, int]:
    """The ``max_epochs`` setting ``--epochs-from`` gives (none without it); with ``--max-epochs`` a
    ConfigError."""
    if epochs_from is None:
        return {}
    if max_epochs is not None:
        raise ConfigError("--epochs-from and --max-epochs both fix the number of epochs: give one")
    record = Recommender.load(epochs_from, device="cpu").train_result_
    if record is None or record.best_epoch < 1 or not record.best_metrics:
        raise ConfigError(f"--epochs-from {epochs_from}: the model has no validated best epoch")
    return {"max_epochs": record.best_epoch}


def check_final_fit(
    valid_users: int, target_events: str, min_rating: float | None, protocols: list[str]
) -> None:
    """``--split none`` holds nothing out: the options of a validation or test split are refused."""
    given = [
        name
        for name, on in (
            ("--valid-users", bool(valid_users)),
            ("--target-events", bool(target_events.strip())),
            ("--min-target-rating", min_rating is not None),
            ("--protocol", bool(protocols)),
        )
        if on
    ]
    if given:
        raise ConfigError(f"--split none holds nothing out to validate or test: drop {', '.join(given)}")


def check_new_since_options(
    since: float | None, split: str, init_from: Path | None, valid_users: int, protocols: list[str]
) -> None:
    """``--new-since`` needs ``--init-from`` and ``--split none`` or ``leave-one-out`` (whose validated
    users are then the ones with new events and which tests nothing, so ``--valid-users`` and
    ``--protocol`` are refused): checked before any data is read, each in one line."""
    if since is None:
        return
    if init_from is None:
        raise ConfigError("--new-since fine-tunes a warm start on the new events: give --init-from too")
    if split not in (FINAL, DEFAULT_SPLIT):
        raise ConfigError(
            f"--new-since trains on every new event (--split none) or validates on the last new event of "
            f"each user with new events (--split leave-one-out), not --split {split}"
        )
    if valid_users:
        raise ConfigError(
            "--new-since validates the users with new events (their last event): drop --valid-users"
        )
    if protocols and split == DEFAULT_SPLIT:
        raise ConfigError("--new-since with --split leave-one-out holds nothing out to test: drop --protocol")
