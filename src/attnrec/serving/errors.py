"""The service's one error shape, ``{"error": {status, code, message, details}}``, and the handlers
that give every failure (ours, request validation, unknown routes, oversized bodies) that shape."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send


class ApiError(Exception):
    """An error answered as ``{"error": {status, code, message, details}}``."""

    def __init__(self, status: int, code: str, message: str, details: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details or []


def error_json(status: int, code: str, message: str, details: list[dict[str, str]] | None = None) -> JSONResponse:
    """The JSON error response every failure of the service is answered with."""
    body = {"error": {"status": status, "code": code, "message": message, "details": details or []}}
    return JSONResponse(body, status_code=status)


class BodyLimit:
    """Pure ASGI middleware answering 413 to bodies declared larger than ``max_bytes``
    (cheaper per request than ``@app.middleware``, which wraps every response in a stream)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                if key == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                    response = error_json(413, "body_too_large", f"request body of {int(value)} bytes exceeds "
                                          f"the limit of {self.max_bytes} bytes")
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)  # registered for ApiError only
    return error_json(exc.status, exc.code, exc.message, exc.details)


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    """422 with one ``{loc, message}`` per problem, ``loc`` dotted and without the ``body`` prefix."""
    assert isinstance(exc, RequestValidationError)
    details = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        msg = str(err.get("msg", "invalid"))
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif err.get("type") == "json_invalid":
            loc, msg = "body", f"malformed JSON ({err.get('ctx', {}).get('error', 'decode error')})"
        details.append({"loc": loc, "message": msg})
    summary = "; ".join(f"{d['loc']}: {d['message']}" for d in details)
    return error_json(422, "invalid_request", f"invalid request: {summary}", details)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_json(exc.status_code, code, str(exc.detail))


def install_error_handling(app: FastAPI, max_body_bytes: int) -> None:
    """Answer every error of ``app`` in the JSON error shape; refuse bodies over ``max_body_bytes``."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)


__all__ = ["ApiError", "BodyLimit", "error_json", "install_error_handling"]
