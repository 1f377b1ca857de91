"""Connections for ``attnrec serve``: uvicorn's HTTP protocols with a header timeout, a connection
cap and framing errors in the JSON error shape.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive`` seconds, but only once a
response has been sent, and any byte the client sends cancels that timer: a connection that is
opened and then sends nothing, or half a request line, stays open for good (the issue's 100
half-open connections were all still open after 15 s). :func:`http_protocol` returns uvicorn's
protocol class with one more deadline: a request's headers must be complete within
``header_timeout`` seconds of the connection opening, or of the first bytes of a request that
follows a response, else the connection is closed. Once the headers are in, the body has
its own deadline (:class:`attnrec.serving.api_errors.BodyLimit`), and the app takes as long as it takes.

Beyond ``max_connections`` open connections a new one is answered 503 ``too_many_connections``
with ``Retry-After`` and closed at once (the requests in flight are capped in the app,
:class:`attnrec.serving.limits.InFlightLimit`). A request the HTTP parser cannot read (a malformed
request line, a bad header, broken chunked framing) is answered 400 ``malformed_http`` in the
service's JSON error shape instead of uvicorn's plain text, and the connection closed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
import time
from typing import Any, ClassVar

HTTP_PARSERS = ("auto", "h11", "httptools")  # uvicorn's HTTP/1.1 parsers (auto: httptools when installed)
EVENT_LOOPS = ("auto", "asyncio", "uvloop")  # uvicorn's event loops (auto: uvloop when installed)


def raw_error(
    status: int, reason: str, code: str, message: str, headers: dict[str, str] | None = None
) -> bytes:
    """A whole HTTP/1.1 response in the JSON error shape that closes the connection (for answers the
    protocol writes itself, before any app is involved)."""
    body = json.dumps(
        {"error": {"status": status, "code": code, "message": message, "details": []}}, ensure_ascii=True
    ).encode()
    lines = [
        f"HTTP/1.1 {status} {reason}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


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
    max_connections: ClassVar[int] = 0  # 0: no cap
    retry_after: ClassVar[int] = 1
    server_state: Any  # uvicorn's: its ``connections`` set holds every open connection's protocol
    _refused: bool = False  # answered 503 for the connection cap: requests are not read

    """The protocol hooks that run the deadline; placed before a uvicorn protocol in the class bases.

    The clock starts when a connection opens, and when bytes of a new request arrive after a
    response (until then uvicorn's keep-alive timer governs the idle connection); a request whose
    headers are complete in the same packet (the usual case) starts no timer at all.
    """

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        if self.max_connections and len(self.server_state.connections) > self.max_connections:
            # Answer, then half-close: the client reads the answer and closes; what it sends is
            # dropped (closing at once with its request unread would reset the connection and lose
            # the answer). The header deadline closes it if the client does not.
            message = f"the server has {self.max_connections} connections open, its limit; retry shortly"
            headers = {"retry-after": str(self.retry_after)}
            transport.write(raw_error(503, "Service Unavailable", "too_many_connections", message, headers))
            if transport.can_write_eof():
                transport.write_eof()
            else:
                transport.close()
            self._refused = True
        self._watch_headers()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser cannot read, in the JSON error shape."""
        message = f"malformed HTTP request: {msg}"
        self.transport.write(raw_error(400, "Bad Request", "malformed_http", message))
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)  # type: ignore[misc]
        self._watch_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_deadline()
        super().connection_lost(exc)  # type: ignore[misc]


def _with_deadline(
    base: type[asyncio.Protocol], header_timeout: float, max_connections: int, retry_after: int
) -> type[asyncio.Protocol]:
    """``base`` (a uvicorn HTTP protocol class) with the header deadline and the connection cap."""
    attrs = {"header_timeout": header_timeout, "max_connections": max_connections, "retry_after": retry_after}
    return type(f"{base.__name__}WithDeadline", (_WithDeadline, base), attrs)


def http_protocol(
    http: str, header_timeout: float, max_connections: int = 0, retry_after: int = 1
) -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol (``auto``: httptools when installed, else ``h11``) closing connections
    whose request headers are not complete within ``header_timeout`` seconds, refusing connections
    beyond ``max_connections`` (0: no cap) with 503 and ``Retry-After: retry_after``, and answering
    framing errors in the JSON error shape."""
    if header_timeout <= 0:
        raise ValueError(f"the header timeout (--timeout-headers) must be positive, not {header_timeout}")
    if max_connections < 0:
        raise ValueError(f"--max-connections must be >= 0 (0: no cap), not {max_connections}")
    if http == "auto":
        http = "httptools" if importlib.util.find_spec("httptools") is not None else "h11"
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return _with_deadline(HttpToolsProtocol, header_timeout, max_connections, retry_after)
    if http == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return _with_deadline(H11Protocol, header_timeout, max_connections, retry_after)
    raise ValueError(f"--http must be one of {', '.join(HTTP_PARSERS)}, not {http!r}")


def draining_server(app: Any, config: Any, drain_s: float) -> Any:
    """A ``uvicorn.Server`` for ``app`` that, on SIGTERM or SIGINT, first marks the app as shutting
    down (``/readyz`` answers 503 from then on) and keeps serving for ``drain_s`` seconds, so that a
    load balancer sees the server leave before its connections are closed; then uvicorn's graceful
    shutdown (``timeout_graceful_shutdown`` in ``config``) runs. A second signal stops at once."""
    import uvicorn

    if drain_s < 0:
        raise ValueError(f"--shutdown-delay must be >= 0 seconds, not {drain_s}")

    class DrainingServer(uvicorn.Server):
        draining_since: float | None = None

        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.draining = True
            if self.draining_since is None and drain_s > 0:
                self.draining_since = time.monotonic()
                timer = threading.Timer(drain_s, super().handle_exit, (sig, frame))
                timer.daemon = True
                timer.start()
                return
            super().handle_exit(sig, frame)

    return DrainingServer(config)


__all__ = ["EVENT_LOOPS", "HTTP_PARSERS", "draining_server", "http_protocol", "raw_error"]
