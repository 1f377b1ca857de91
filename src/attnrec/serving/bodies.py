"""Request bodies as JSON, strictly: UTF-8 only, every parse failure a 422.

FastAPI parses a JSON body with :func:`json.loads` on the raw bytes and answers 400 (not the
documented 422) when that raises anything but :class:`json.JSONDecodeError`: invalid UTF-8, JSON
nested deeper than the interpreter's recursion limit, an integer of more than 4,300 digits. The
routes of :mod:`attnrec.serving.routes` use :class:`JsonRoute`, whose requests turn each of
these into a ``JSONDecodeError``, which FastAPI reports as a request validation error (422,
``malformed JSON (...)``). The size of the body is limited before it gets here
(:class:`attnrec.serving.errors.BodyLimit`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def parse_json(body: bytes) -> Any:
    """``body`` as JSON (UTF-8, an optional byte-order mark); any failure is a ``JSONDecodeError``."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise json.JSONDecodeError(f"not UTF-8: invalid byte at offset {e.start}", "", 0) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
    except ValueError as e:  # e.g. an integer longer than sys.get_int_max_str_digits()
        raise json.JSONDecodeError(str(e).split(";")[0], "", 0) from None


class JsonRequest(Request):
    """A request whose :meth:`json` is :func:`parse_json` of its body."""

    async def json(self) -> Any:
        return parse_json(await self.body())  # FastAPI asks once per request; the body itself is cached


class JsonRoute(APIRoute):
    """An API route whose endpoint sees :class:`JsonRequest` (FastAPI's documented custom-route hook)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_json(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return strict_json


__all__ = ["JsonRequest", "JsonRoute", "parse_json"]
