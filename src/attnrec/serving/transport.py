"""Connection deadlines for ``attnrec serve``: uvicorn's HTTP protocols with a header timeout.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive`` seconds, but only once a
response has been sent, and any byte the client sends cancels that timer: a connection that is
opened and then sends nothing, or half a request line, stays open for good (the issue's 100
half-open connections were all still open after 15 s). :func:`http_protocol` returns uvicorn's
protocol class with one more deadline: a request's headers must be complete within
``header_timeout`` seconds of the connection opening, or of the first bytes of a request that
follows a response, else the connection is closed. Once the headers are in, the body has
its own deadline (:class:`attnrec.serving.errors.BodyLimit`), and the app takes as long as it takes.
"""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any, ClassVar


class _HeaderDeadline:
    """The deadline's state and logic; mixed into a uvicorn protocol (which has the attributes below)."""

    header_timeout: ClassVar[float] = 10.0
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any  # the protocol's current request-response cycle (None before the first request)
    _deadline: asyncio.TimerHandle | None = None
    _waiting_after: Any = None  # the cycle that was current when the clock started

    def _watch_headers(self) -> None:
        """Start the clock for the next request's headers if they are not complete and it is not running."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            return  # a request is in progress: its headers are complete
        if self._deadline is not None and self._waiting_after is cycle:
            return  # already counting for this request
        self._drop_deadline()
        self._waiting_after = cycle
        self._deadline = self.loop.call_later(self.header_timeout, self._expire)

    def _drop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        """Close the connection if no request has started since the clock was started."""
        self._deadline = None
        if self.cycle is self._waiting_after and not self.transport.is_closing():
            self.transport.close()


class _WithDeadline(_HeaderDeadline):
    """The protocol hooks that run the deadline; placed before a uvicorn protocol in the class bases.

    The clock starts when a connection opens, and when bytes of a new request arrive after a
    response (until then uvicorn's keep-alive timer governs the idle connection); a request whose
    headers are complete in the same packet (the usual case) starts no timer at all.
    """

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._watch_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        self._watch_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_deadline()
        super().connection_lost(exc)  # type: ignore[misc]


def _with_deadline(base: type[asyncio.Protocol], header_timeout: float) -> type[asyncio.Protocol]:
    """``base`` (a uvicorn HTTP protocol class) with the header deadline of ``header_timeout`` seconds."""
    return type(f"{base.__name__}WithDeadline", (_WithDeadline, base), {"header_timeout": header_timeout})


def http_protocol(http: str, header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol (``auto``: httptools when installed, else ``h11``) closing connections
    whose request headers are not complete within ``header_timeout`` seconds."""
    if header_timeout <= 0:
        raise ValueError(f"the header timeout (--timeout-headers) must be positive, not {header_timeout}")
    if http == "auto":
        http = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return _with_deadline(HttpToolsProtocol, header_timeout)
    if http == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return _with_deadline(H11Protocol, header_timeout)
    raise ValueError(f"--http must be auto, h11 or httptools, not {http!r}")


__all__ = ["http_protocol"]
