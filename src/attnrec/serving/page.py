"""The web page (``/ui``, and ``/`` redirecting to it): static files shipped as package data.

The page (``attnrec/serving/ui/``: HTML, CSS and plain JavaScript, no build step, nothing fetched
from elsewhere) only calls the public HTTP API, with the API key the user types. The files are
read once when the app is created. They hold no secret, so they are served without a key (the
page could not ask for one otherwise), with a strict Content-Security-Policy: scripts, styles and
requests from this origin only, no inline code, no framing.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

PAGE = "/ui"
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
PATHS = frozenset({"/", PAGE, *(f"{PAGE}/{name}" for name in ASSETS if name != "index.html")})
"""Every path the page is served from (open without an API key)."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


def read_assets() -> dict[str, bytes]:
    """The page's files, from the installed package."""
    folder = resources.files("attnrec.serving").joinpath("ui")
    return {name: folder.joinpath(name).read_bytes() for name in ASSETS}


def page_router() -> APIRouter:
    """The routes of the page (kept out of the OpenAPI document: they are not part of the JSON API)."""
    files = read_assets()
    router = APIRouter(include_in_schema=False)

    def serve(name: str) -> Response:
        return Response(files[name], media_type=ASSETS[name], headers=HEADERS)

    @router.api_route("/", methods=["GET", "HEAD"])
    async def root() -> Response:
        return RedirectResponse(PAGE, status_code=307)

    @router.api_route(PAGE, methods=["GET", "HEAD"])
    async def page() -> Response:
        return serve("index.html")

    @router.api_route(PAGE + "/app.js", methods=["GET", "HEAD"])
    async def script() -> Response:
        return serve("app.js")

    @router.api_route(PAGE + "/style.css", methods=["GET", "HEAD"])
    async def style() -> Response:
        return serve("style.css")

    return router


__all__ = ["CSP", "PAGE", "PATHS", "page_router", "read_assets"]
