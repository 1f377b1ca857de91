"""Request bodies as JSON, strictly: UTF-8 only, no key twice in one object, every parse failure a 422.

FastAPI parses a JSON body with :func:`json.loads` on the raw bytes and answers 400 (not the
documented 422) when that raises anything but :class:`json.JSONDecodeError`: invalid UTF-8, JSON
nested deeper than the interpreter's recursion limit, an integer of more than 4,300 digits. The
routes of :mod:`attnrec.serving.routes` use :class:`JsonRoute`, whose requests turn each of
these into a ``JSONDecodeError``, which FastAPI reports as a request validation error (422,
``malformed JSON (...)``). An object with a key given twice (``{"k": 1, "k": 100}``) is
refused the same way: which value was meant is ambiguous, and parsers disagree (Python's keeps the
last, others the first). The size of the body is limited before it gets here
(:class:`attnrec.serving.api_errors.BodyLimit`); bodies of at least ``large_body_bytes`` are parsed on a
thread of their own, at most ``parse_slots`` at a time, so that a burst of large bodies neither
stalls the event loop nor holds more than a few parsed bodies in memory at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as a dict; a key given twice is an error."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"the key {key!r} is given twice in one object")
            seen.add(key)
    return out


def parse_json(body: bytes) -> Any:
    """``body`` as JSON (UTF-8, an optional byte-order mark, unique keys); any failure is a
    ``JSONDecodeError``."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise json.JSONDecodeError(f"not UTF-8: invalid byte at offset {e.start}", "", 0) from None
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
    except ValueError as e:  # e.g. an integer longer than sys.get_int_max_str_digits()
        raise json.JSONDecodeError(str(e).split(";")[0], "", 0) from None


class JsonRequest(Request):
    """A request whose :meth:`json` is :func:`parse_json` of its body, on a parsing thread when it is
    large."""

    async def json(self) -> Any:
        body = await self.body()  # FastAPI asks once per request; the body itself is cached
        parsers: Parsers | None = getattr(self.app.state, "parsers", None)  # set while the app runs
        if parsers is None or len(body) < self.app.state.config.large_body_bytes:
            return parse_json(body)
        async with parsers.slots:
            return await asyncio.get_running_loop().run_in_executor(parsers.pool, parse_json, body)


class Parsers:
    """The threads large bodies are parsed on, and the slots that bound how many are parsed at once."""

    def __init__(self, slots: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="attnrec-parse")
        self.slots = asyncio.Semaphore(slots)  # made in the running loop (the app's lifespan)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class JsonRoute(APIRoute):
    """An API route whose endpoint sees :class:`JsonRequest` (FastAPI's documented custom-route hook)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_json(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return strict_json


__all__ = ["JsonRequest", "JsonRoute", "Parsers", "parse_json"]
