"""The service's one error shape, ``{"error": {status, code, message, details}}``, and the handlers
that give every failure (ours, request validation, unknown routes, oversized or slow bodies, bugs)
that shape."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ApiError(Exception):
    """An error answered as ``{"error": {status, code, message, details}}``."""

    def __init__(
        self, status: int, code: str, message: str, details: list[dict[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details or []


def _clean(text: str, limit: int = 300) -> str:
    """``text`` fit for a JSON answer: lone surrogates escaped (they cannot be encoded), at most ``limit``
    chars."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "..."


def error_json(
    status: int,
    code: str,
    message: str,
    details: list[dict[str, str]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The JSON error response every failure of the service is answered with."""
    clean = [{k: _clean(v) for k, v in d.items()} for d in details or []]
    body = {"error": {"status": status, "code": code, "message": _clean(message, 2000), "details": clean}}
    return JSONResponse(body, status_code=status, headers=headers)


class _TooLarge(Exception):
    pass


class BodyLimit:
    """Pure ASGI middleware that reads a request body before the app sees it: 413 once more than
    ``max_bytes`` have arrived (declared by ``Content-Length`` or counted as they are received, so a
    chunked body is cut off too), 408 when it has not fully arrived within ``timeout_s`` seconds.
    The app then reads the body from memory. Both answers close the connection.
    (Cheaper per request than ``@app.middleware``, which wraps every response in a stream.)"""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        has_body = False
        for key, value in scope["headers"]:
            if key == b"content-length":
                has_body = True
                if value.isdigit() and int(value) > self.max_bytes:
                    await self._refuse(
                        413,
                        "body_too_large",
                        f"request body of {int(value)} bytes exceeds the limit of {self.max_bytes} bytes",
                        scope,
                        receive,
                        send,
                    )
                    return
            elif key == b"transfer-encoding":
                has_body = True
        if not has_body:  # HTTP/1.1: no Content-Length and no Transfer-Encoding means no body
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read_within(receive)
        except _TooLarge:
            await self._refuse(
                413,
                "body_too_large",
                f"request body exceeds the limit of {self.max_bytes} bytes",
                scope,
                receive,
                send,
            )
            return
        except TimeoutError:
            await self._refuse(
                408,
                "body_timeout",
                f"request body not received within {self.timeout_s:g} s",
                scope,
                receive,
                send,
            )
            return
        if body is not None:  # None: the client went away
            await self.app(scope, _replay(body, receive), send)

    async def _read_within(self, receive: Receive) -> bytes | None:
        async with asyncio.timeout(self.timeout_s):
            return await self._read(receive)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    @staticmethod
    async def _refuse(
        status: int, code: str, message: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        await error_json(status, code, message, headers={"connection": "close"})(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the whole ``body`` first, then whatever the server sends (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)  # registered for ApiError only
    return error_json(exc.status, exc.code, exc.message, exc.details)


_MESSAGES = {  # pydantic's wording where it would confuse (the pattern's raw control characters)
    "extra_forbidden": "unknown field",
    "string_unicode": "not valid Unicode text (a lone UTF-16 surrogate)",
    "string_pattern_mismatch": "must not contain control characters",
}
MAX_DETAILS = 20  # problems listed in one answer; a 10,000-item list of bad IDs gives one line per item


def _detail(err: Mapping[str, Any]) -> dict[str, str]:
    loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
    kind = err.get("type")
    if kind == "json_invalid":
        return {
            "loc": "body",
            "message": f"malformed JSON ({err.get('ctx', {}).get('error', 'decode error')})",
        }
    message = str(err.get("msg", "invalid")).removeprefix("Value error, ")  # our own validators' messages
    return {"loc": loc, "message": _MESSAGES.get(str(kind), message)}


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    """422 with one ``{loc, message}`` per problem (the first :data:`MAX_DETAILS`), ``loc`` dotted and
    without the ``body`` prefix."""
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    details = [_detail(err) for err in errors[:MAX_DETAILS]]
    if len(errors) > MAX_DETAILS:
        details.append({"loc": "body", "message": f"and {len(errors) - MAX_DETAILS} more problems"})
    summary = "; ".join(f"{d['loc']}: {d['message']}" for d in details)
    return error_json(422, "invalid_request", f"invalid request: {summary}", details)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_json(
        exc.status_code, code, str(exc.detail), headers=exc.headers
    )  # 405 keeps its Allow header


async def _bug(_: Request, exc: Exception) -> JSONResponse:
    """A failure of the service itself (a bug): 500 in the JSON shape (starlette re-raises ``exc``
    afterwards, so the server still logs its traceback)."""
    return error_json(500, "internal_error", "internal server error")


def install_error_handling(app: FastAPI, max_body_bytes: int, body_timeout_s: float = 30.0) -> None:
    """Answer every error of ``app`` in the JSON error shape; refuse bodies over ``max_body_bytes`` or
    not received within ``body_timeout_s`` seconds."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _bug)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, timeout_s=body_timeout_s)


__all__ = ["ApiError", "BodyLimit", "error_json", "install_error_handling"]
