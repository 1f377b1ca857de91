"""Optional API keys: where they come from, how a request proves one, and the admin guard.

Keys come from ``--api-key`` (repeatable), the ``ATTNREC_API_KEYS`` environment variable
(comma-separated) and ``--api-keys-file`` (one key per line, ``#`` comments and blank lines
ignored); all of them together are the accepted keys. With no key configured the service is open,
as before. A client sends ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``. Keys are compared
as sha256 digests with :func:`hmac.compare_digest` against every configured key, so neither the
time taken nor an early exit tells how much of a guess was right (or how long a key is).

The health endpoints stay open (load balancers probe them without secrets), as do the API docs;
``/metrics`` is open unless ``protect_metrics`` is set.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from attnrec.serving.config import check_api_key
from attnrec.serving.errors import ApiError, error_json

ENV_KEYS = "ATTNREC_API_KEYS"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
METRICS_PATH = "/metrics"


def keys_from_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """The comma-separated keys of ``ATTNREC_API_KEYS`` (none when unset or empty)."""
    value = (os.environ if environ is None else environ).get(ENV_KEYS, "")
    keys = [k.strip() for k in value.split(",") if k.strip()]
    for k in keys:
        _checked(k, f"${ENV_KEYS}")
    return keys


def keys_from_file(path: str | Path) -> list[str]:
    """The keys of a keys file: one per line; blank lines and lines starting with ``#`` are skipped.

    An unreadable file or one without any key is an error: the operator asked for keys.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--api-keys-file {p}: cannot read it ({type(e).__name__}: {e})") from None
    keys = []
    for n, line in enumerate(lines, 1):
        key = line.strip()
        if key and not key.startswith("#"):
            keys.append(_checked(key, f"--api-keys-file {p}, line {n}"))
    if not keys:
        raise ValueError(f"--api-keys-file {p}: no keys in it (one key per line, '#' starts a comment)")
    return keys


def collect_keys(
    given: Iterable[str], keys_file: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> frozenset[str]:
    """Every accepted key: ``given`` (``--api-key``), the environment variable and the keys file."""
    keys = [_checked(k, "--api-key") for k in given] + keys_from_env(environ)
    if keys_file is not None:
        keys += keys_from_file(keys_file)
    return frozenset(keys)


def _checked(key: str, where: str) -> str:
    try:
        return check_api_key(key)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _digest(key: str | bytes) -> bytes:
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()


def presented_keys(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """The keys a request sends (``Authorization: Bearer KEY`` and/or ``X-API-Key: KEY``)."""
    keys = []
    for name, value in headers:
        if name == b"x-api-key" and value.strip():
            keys.append(value.strip())
        elif name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                keys.append(token.strip())
    return keys


class KeyRing:
    """The accepted keys, kept as digests; ``accepts`` compares in constant time."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [_digest(k) for k in keys]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def accepts(self, presented: Iterable[bytes]) -> bool:
        """Whether one of the ``presented`` keys is accepted: each is compared with every key,
        without an early exit."""
        ok = False
        for key in presented:
            candidate = _digest(key)
            for d in self._digests:
                ok |= hmac.compare_digest(candidate, d)
        return ok


class ApiKeyAuth:
    """Pure ASGI middleware: 401 in the JSON error shape for requests without an accepted key.

    Paths in :data:`OPEN_PATHS` (and ``/metrics`` unless ``protect_metrics``) need no key, nor do
    ``open_paths`` (the web page's files: the page asks the user for the key it then sends).
    """

    def __init__(
        self, app: ASGIApp, keys: KeyRing, protect_metrics: bool, open_paths: frozenset[str] = frozenset()
    ) -> None:
        self.app, self.keys = app, keys
        self.open = (OPEN_PATHS if protect_metrics else OPEN_PATHS | {METRICS_PATH}) | open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["path"] not in self.open
            and not self.keys.accepts(presented_keys(scope["headers"]))
        ):
            response = error_json(
                401,
                "unauthorized",
                "missing or invalid API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
            )
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def admin_allowed(request: Request) -> None:
    """A FastAPI dependency of the admin endpoints: without configured API keys they are refused
    (403) unless the operator allowed unauthenticated admin; with keys, the middleware checked one."""
    cfg = request.app.state.config
    if not cfg.api_keys and not cfg.unauthenticated_admin:
        raise ApiError(
            403,
            "admin_disabled",
            "admin endpoints need API keys: start the server with --api-key "
            "(or ATTNREC_API_KEYS / --api-keys-file), or allow them without one with "
            "--unauthenticated-admin",
        )


__all__ = [
    "ENV_KEYS",
    "OPEN_PATHS",
    "ApiKeyAuth",
    "KeyRing",
    "admin_allowed",
    "collect_keys",
    "keys_from_env",
    "keys_from_file",
    "presented_keys",
]
