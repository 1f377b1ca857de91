"""Logs an operator can search: JSON lines with a timestamp and the request's ID.

Every request gets an ID: the client's ``X-Request-ID`` when it sends a usable one (1 to 128
characters of letters, digits and ``._:-``; anything else is replaced, never echoed), else a new
random one. The ID is echoed in the response's ``X-Request-ID`` header, logged with the request's
access line (method, path, status, duration) and attached to every log line written while the
request is handled (a refused reload, a bug's traceback), so one grep finds a request's story.

:class:`JsonFormatter` writes one JSON object per line: ``time`` (ISO 8601, UTC, milliseconds),
``level``, ``logger``, ``message``, ``request_id`` when there is one, the access fields, and
``exception`` with the traceback when there is one. :func:`configure_logging` sets up the logging
``attnrec serve`` runs uvicorn with (``--log-format json``, the default, or ``text``).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import re
import sys
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
VALID_ID = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
ACCESS_FIELDS = ("method", "path", "status", "duration_ms", "client")
LOG_FORMATS = ("json", "text")  # one JSON object per line, or plain text
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("attnrec_request_id", default=None)
access_log = logging.getLogger("attnrec.access")


def incoming_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``X-Request-ID`` when it is usable, else a new random ID."""
    for name, value in headers:
        if name == HEADER and VALID_ID.fullmatch(value):
            return value.decode("ascii")
    return uuid.uuid4().hex


class RequestLog:
    """Pure ASGI middleware: the request ID (see the module docstring), echoed and logged with one
    access line per request when ``access`` is on."""

    def __init__(self, app: ASGIApp, access: bool = True) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = incoming_id(scope["headers"])
        token = request_id.set(rid)
        t0 = time.perf_counter()
        status: int | None = None

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), (HEADER, rid.encode("ascii"))]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if self.access:
                client = scope.get("client")
                access_log.info(
                    "%s %s %s",
                    scope["method"],
                    scope["path"],
                    status if status is not None else "disconnected",
                    extra={
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status,
                        "duration_ms": round(1000 * (time.perf_counter() - t0), 3),
                        "client": f"{client[0]}:{client[1]}" if client else None,
                    },
                )
            request_id.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per log record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = request_id.get()
        if rid is not None:
            out["request_id"] = rid
        for key in ACCESS_FIELDS:
            if key in record.__dict__:
                out[key] = record.__dict__[key]
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger [request id] message``: the same fields for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        when = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")
        rid = request_id.get()
        line = f"{when} {record.levelname} {record.name}{f' [{rid}]' if rid else ''} {record.getMessage()}"
        return line + ("\n" + self.formatException(record.exc_info) if record.exc_info else "")


def configure_logging(level: str, fmt: str = "json") -> None:
    """Send uvicorn's and attnrec's log lines to stderr as ``fmt`` (``json`` or ``text``) at ``level``;
    uvicorn's own access log is off (:class:`RequestLog` writes ours).

    Only these loggers change. Not :func:`logging.config.dictConfig`, which first closes every
    handler of the process, other libraries' (and a test runner's) included.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
    level = level.upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for name in ("uvicorn", "attnrec"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level)
        logger.propagate = False
    logging.getLogger("uvicorn.error").setLevel(level)
    access = logging.getLogger("uvicorn.access")
    access.handlers[:] = []
    access.setLevel(logging.WARNING)
    access.propagate = False


__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "JsonFormatter",
    "RequestLog",
    "TextFormatter",
    "configure_logging",
    "incoming_id",
    "request_id",
]
