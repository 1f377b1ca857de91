"""The experiment-tracking options of ``attnrec train`` (``--track``, ``--track-uri``, ``--experiment``,
``--run-name``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from attnrec.cli._options import choice_option
from attnrec.experiments.tracking import DEFAULT_MLFLOW_URI, KINDS, TENSORBOARD_ROOT, Trackers, open_trackers


@dataclass(frozen=True)
class TrackingOptions:
    """Where ``attnrec train`` records its run (an option group: see
    :func:`attnrec.cli._common.option_groups`)."""

    track: Annotated[
        list[str] | None,
        choice_option(
            "--track",
            KINDS,
            help="Record the run (settings, per-epoch loss and validation metrics, test metrics, the saved "
            "model) in MLflow or TensorBoard (repeatable; needs pip install 'attnrec\\[mlflow]' / "
            "'attnrec\\[tensorboard]'). See docs/how-to/tracking.md.",
        ),
    ] = None
    track_uri: Annotated[
        list[str] | None,
        typer.Option(
            "--track-uri",
            metavar="URI",
            help=f"MLflow: any tracking URI (default $MLFLOW_TRACKING_URI, else {DEFAULT_MLFLOW_URI}); "
            f"TensorBoard: the log directory (default {TENSORBOARD_ROOT}/RUN_NAME). With two --track, one "
            "per --track in the same order.",
        ),
    ] = None
    experiment: Annotated[
        str | None,
        typer.Option(
            "--experiment",
            metavar="NAME",
            help="MLflow experiment of the run (created when missing).",
            show_default="attnrec",
        ),
    ] = None
    run_name: Annotated[
        str | None,
        typer.Option(
            "--run-name", metavar="NAME", help="Name of the tracked run.", show_default="MODEL-DATE-TIME"
        ),
    ] = None

    def open(self, model: str, main_rank: bool = True) -> Trackers:
        """The tracked runs, opened now so that a bad store fails before any training; none off the main
        rank."""
        if not main_rank:  # under torchrun only rank 0 trains "for the record"
            return Trackers()
        return open_trackers(
            self.track or [],
            self.track_uri or [],
            model=model,
            experiment=self.experiment,
            run_name=self.run_name,
        )
