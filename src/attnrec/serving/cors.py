"""CORS: Starlette's middleware for the configured origins, with refusals in the JSON error shape."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp

from attnrec.serving.api_errors import error_json


class Cors(CORSMiddleware):
    """``CORSMiddleware`` allowing ``origins`` to call the API (with the API-key headers); a refused
    preflight is a 400 ``cors_refused`` JSON error instead of Starlette's plain text."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        super().__init__(
            app,
            allow_origins=list(origins),
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type"],
            max_age=600,
        )

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code == 400:
            reason = bytes(response.body).decode("utf-8", "replace")
            return error_json(400, "cors_refused", f"CORS preflight refused: {reason}")
        return response


__all__ = ["Cors"]
