"""The warm-start and final-fit options of ``attnrec train`` (and ``attnrec retrain``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from attnrec.cli._options import choice
from attnrec.config import ConfigError
from attnrec.data.split import FINAL, SPLITS
from attnrec.recommend import Recommender

parse_train_split = choice((*SPLITS, FINAL))
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
