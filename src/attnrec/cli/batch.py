"""``attnrec batch``: the top-k of every user of a log or of a user file, into one Parquet file."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from attnrec.cli._common import (
    DataOptions,
    LoadOptions,
    cli_errors,
    data_option,
    err,
    option_groups,
    out,
    warn_line,
)
from attnrec.cli._options import CandidateOptions, DeviceOpt, ModelDirOpt, choice_option
from attnrec.cli.main import app
from attnrec.recommend.batch_input import DatasetUsers, FileUsers, UserSource
from attnrec.recommend.batch_scoring import (
    DEFAULT_CHUNK_USERS,
    LAYOUTS,
    BatchResult,
    ChunkDone,
    score_to_parquet,
    unknown_filter_items,
)


class _Bar:
    """A rich progress bar on stderr: rows done (resumed chunks included) and the scoring rate."""

    def __init__(self, total: int | None, show: bool) -> None:
        self.progress = Progress(
            TextColumn("scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} users/s"),
            TimeElapsedColumn(),
            console=err,
            disable=not show,
            transient=False,
        )
        self.task = self.progress.add_task("scoring", total=total, rate="-")
        self.start, self.scored = time.perf_counter(), 0

    def __call__(self, chunk: ChunkDone) -> None:
        if not chunk.resumed:  # resumed chunks cost nothing: keep them out of the rate
            self.scored += chunk.users
        seconds = max(time.perf_counter() - self.start, 1e-9)
        self.progress.update(self.task, completed=chunk.users_done, rate=f"{self.scored / seconds:,.0f}")


def _summary(res: BatchResult, layout: str, k: int) -> str:
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    rate = res.users / res.seconds if res.seconds > 0 else 0.0
    resumed = f"; {res.resumed_chunks} of {res.chunks} chunks resumed" if res.resumed_chunks else ""
    fallback = f"; {res.fallbacks:,} not personalised (see the fallback column)" if res.fallbacks else ""
    return (
        f"wrote {res.path}: top {k} for {res.users:,} users ({layout}) in {res.seconds:.1f} s "
        f"({rate:,.0f} users/s){resumed}{fallback}; peak RSS {peak_mb:,.0f} MB"
    )


@app.command(
    epilog="Examples: attnrec batch --model runs/demo --data demo --out recs.parquet -k 100\n\n"
    "attnrec batch --model runs/demo --users users.csv --out recs.parquet --layout long"
)
@cli_errors
@option_groups
def batch(
    model_dir: ModelDirOpt,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="The Parquet file to write.")],
    data: Annotated[
        str | None,
        data_option(
            "Score every user of this dataset ('demo', a named dataset or a file, as in "
            "'attnrec train'), each from its history there."
        ),
    ] = None,
    users: Annotated[
        Path | None,
        typer.Option(
            "--users",
            help="Score the rows of this file: CSV/TSV/JSON lines/Parquet with a 'user' and/or a "
            "'history' column (item IDs, oldest first).",
        ),
    ] = None,
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="Items per user.")] = 100,
    chunk_users: Annotated[
        int, typer.Option("--chunk-users", min=1, help="Users scored and written per part (bounds memory).")
    ] = DEFAULT_CHUNK_USERS,
    candidates: CandidateOptions = CandidateOptions(),
    layout: Annotated[
        str,
        choice_option(
            "--layout",
            LAYOUTS,
            help="wide: one row per user (items, scores lists); long: one row per (user, rank, item, score).",
        ),
    ] = "wide",
    resume: Annotated[
        bool,
        typer.Option(
            "--resume/--no-resume",
            help="Continue an interrupted run from OUT.parts (same arguments only), or start afresh.",
        ),
    ] = True,
    device: DeviceOpt = "cpu",
    progress: Annotated[
        bool | None,
        typer.Option(
            "--progress/--no-progress", help="Show a progress bar.", show_default="when in a terminal"
        ),
    ] = None,
    reading: DataOptions = DataOptions(),
    loading: LoadOptions = LoadOptions(),
) -> None:
    """Write the top-K items of every user of --data, or of every row of --users, to a Parquet file.

    Users are scored in chunks through the same code as 'attnrec recommend' (same answers, same
    filters: seen items excluded unless --include-seen, --include/--exclude) and each chunk is
    written to OUT.parts/ as it finishes; a killed run re-run with the same arguments skips the
    finished chunks. Unknown users get the most popular items with the 'fallback' column set.
    Memory stays flat however many users there are. See docs/how-to/batch.md for the columns.
    """
    if (data is None) == (users is None):
        raise ValueError("give either --data DATA (every user of a dataset) or --users FILE")
    rec = loading.recommender(model_dir, device)
    source: UserSource = FileUsers(users) if users is not None else DatasetUsers(reading.load(str(data)))
    unknown = unknown_filter_items(rec, candidates.allowed(), candidates.banned())
    if unknown:
        warn_line(
            f"ignored {len(unknown)} --include/--exclude item(s) unknown to the model: "
            f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''}"
        )
    bar = _Bar(source.n_rows(), err.is_terminal if progress is None else progress)
    with bar.progress:
        res = score_to_parquet(
            rec,
            source,
            out_path,
            k=k,
            chunk_users=chunk_users,
            layout=layout,
            resume=resume,
            progress=bar,
            model_label=str(model_dir),
            **candidates.filters(),
        )
    out.print(escape(_summary(res, layout, k)), soft_wrap=True, highlight=False)
