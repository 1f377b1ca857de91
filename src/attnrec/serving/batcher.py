"""The micro-batcher: concurrent submissions gathered into one call of a batch function."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class MicroBatcher(Generic[T, R]):
    """Gathers concurrent submissions into lists for ``fn`` (run on ``executor``, or on the event
    loop's own thread when ``executor`` is None: no thread hand-offs, but the loop is blocked while
    a batch is scored; requests arriving meanwhile wait in the socket buffers and form the next batch).

    A batch starts with the first waiting item, takes everything already queued (up to
    ``max_batch``) and, when ``max_wait`` > 0, waits up to that many seconds for more. If a batch
    fails, its items are retried one by one so that one bad request cannot fail the others.
    """

    def __init__(
        self,
        fn: Callable[[list[T]], list[R]],
        executor: ThreadPoolExecutor | None,
        max_batch: int,
        max_wait: float,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self.fn, self.executor, self.max_batch, self.max_wait = fn, executor, max_batch, max_wait
        self.on_batch = on_batch  # told each gathered batch's size once (metrics), retries not counted
        self.queue: asyncio.Queue[tuple[T, asyncio.Future[R]]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.batches = 0  # batches scored so far
        self.items = 0  # items scored so far

    def start(self) -> None:
        """Start the gathering task on the running event loop."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the gathering task and wait for it to end."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def submit(self, item: T) -> R:
        """``fn``'s answer for ``item``, scored together with whatever else is waiting."""
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        await self.queue.put((item, fut))
        return await fut

    async def _gather(self) -> list[tuple[T, asyncio.Future[R]]]:
        loop = asyncio.get_running_loop()
        batch = [await self.queue.get()]
        deadline = loop.time() + self.max_wait
        while len(batch) < self.max_batch:
            try:
                batch.append(self.queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self.queue.get(), left))
            except TimeoutError:
                break
        return [(x, f) for x, f in batch if not f.done()]  # cancelled requests are dropped

    async def _call(self, items: list[T]) -> list[R]:
        if self.executor is None:
            return self.fn(items)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.fn, items)

    async def _answers(self, batch: list[tuple[T, asyncio.Future[R]]]) -> list[R | BaseException]:
        """One answer (or the exception it raised) per item; a failing batch is retried item by item."""
        try:
            results = await self._call([x for x, _ in batch])
            if len(results) != len(batch):
                raise ValueError(f"the batch function gave {len(results)} answers for {len(batch)} items")
            return list(results)
        except Exception as e:  # noqa: BLE001 - isolate the failing request
            if len(batch) == 1:
                return [e]
        answers: list[R | BaseException] = []
        for x, _ in batch:
            try:
                answers.append((await self._call([x]))[0])
            except Exception as e1:  # noqa: BLE001
                answers.append(e1)
        return answers

    async def _run(self) -> None:
        while True:
            batch = await self._gather()
            if not batch:
                continue
            self.batches, self.items = self.batches + 1, self.items + len(batch)
            if self.on_batch is not None:
                self.on_batch(len(batch))
            answers = await self._answers(batch)
            for (_, f), r in zip(batch, answers, strict=True):
                if f.done():
                    continue
                if isinstance(r, BaseException):
                    f.set_exception(r)
                else:
                    f.set_result(r)


__all__ = ["MicroBatcher"]
