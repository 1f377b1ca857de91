"""The training loop's per-epoch progress bar (rich), or nothing when it is off."""

from __future__ import annotations

from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["EpochBar"]


class EpochBar:
    """A rich progress bar over an epoch's batches, or nothing when disabled."""

    def __init__(self, enabled: bool, label: str, total: int) -> None:
        self.enabled, self.label, self.total = enabled, label, total
        self.bar: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self) -> EpochBar:
        if self.enabled:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                transient=True,
            )
            self.bar.__enter__()
            self.task = self.bar.add_task(self.label, total=self.total, info="")
        return self

    def advance(self, n: int, info: str | None = None) -> None:
        """Move ``n`` batches on (and show ``info``); nothing when disabled or ``n`` is 0 without info."""
        if self.bar is None or self.task is None or (n == 0 and info is None):
            return
        if info is None:
            self.bar.update(self.task, advance=n)
        else:
            self.bar.update(self.task, advance=n, info=info)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
