"""A cap on the requests in flight: beyond it, 503 ``overloaded`` with ``Retry-After``.

Every request holds what it has read (its body, then the parsed and validated request) until it is
answered; without a cap, a burst of concurrent large bodies grows the process by the sum of them
and the event loop spends its time parsing instead of answering. :class:`InFlightLimit` counts the
HTTP requests being handled and answers the ones over ``max_in_flight`` at once, before their body
is kept (it is read and dropped chunk by chunk first, so that the client gets the answer rather
than a reset connection), in the JSON error shape with ``Retry-After`` (clients retry after it).
The health probes (``/healthz``, ``/readyz``) and ``/metrics`` are never refused: they are cheap,
and an operator needs them most when the server is busy.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Receive, Scope, Send

from attnrec.serving.api_errors import error_json

EXEMPT = frozenset({"/healthz", "/readyz", "/metrics"})
DISCARD_S = 10.0  # longest a refused request's body is read for before the answer


class InFlightLimit:
    """Pure ASGI middleware: at most ``max_in_flight`` requests handled at once (:data:`EXEMPT` paths
    aside)."""

    def __init__(self, app: ASGIApp, max_in_flight: int, retry_after_s: int) -> None:
        self.app, self.limit, self.retry_after = app, max_in_flight, retry_after_s
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            response = error_json(
                503,
                "overloaded",
                f"the server is handling {self.limit} requests, its limit; retry in {self.retry_after} s",
                headers={"Retry-After": str(self.retry_after)},
            )
            await _discard_body(receive)  # before answering: uvicorn reads no more once it has answered
            await response(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def _discard_body(receive: Receive) -> None:
    """Read what is left of the request body, chunk by chunk, keeping none of it: a connection closed
    with its body unread is reset, and the client would lose the 503 it was sent."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DISCARD_S):
            while True:
                message = await receive()
                if message["type"] != "http.request" or not message.get("more_body", False):
                    return


__all__ = ["EXEMPT", "InFlightLimit"]
