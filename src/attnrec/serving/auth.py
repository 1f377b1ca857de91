"""Optional API keys in two roles: where they come from, how a request proves one, and the admin guard.

Client keys come from ``--api-key`` (repeatable), the ``ATTNREC_API_KEYS`` environment variable
(comma-separated) and ``--api-keys-file`` (one key per line, ``#`` comments and blank lines
ignored); admin keys from ``--admin-key`` and ``ATTNREC_ADMIN_KEYS``. A client key opens the
public API (recommend, similar items, explain, browse, the models list); an admin key opens that
and the admin endpoints (every path under :data:`ADMIN_PREFIX`: hot reload, item addition), which
a client key is refused with 403 ``admin_key_required``. With no client key configured the public
API is open; with no admin key configured the admin endpoints are refused (403) unless the
operator allowed them without a key (``unauthenticated_admin``, only when no key at all is set).

A client sends ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``. Keys are compared as sha256
digests with :func:`hmac.compare_digest` against every configured key, so neither the time taken
nor an early exit tells how much of a guess was right (or how long a key is).

The health endpoints stay open (load balancers probe them without secrets), as do the API docs and
the web page's files; ``/metrics`` needs a key unless ``protect_metrics`` is off, and ``/readyz``
lists the models' states only to a caller with a key or with ``protect_metrics`` off.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from fastapi import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from attnrec.serving.api_errors import ApiError, error_json
from attnrec.serving.serving_config import check_api_key

ENV_KEYS = "ATTNREC_API_KEYS"
ENV_ADMIN_KEYS = "ATTNREC_ADMIN_KEYS"
ADMIN_PREFIX = "/v1/admin/"
"""Every path under it is an admin endpoint: it needs an admin key."""
ROLE = "attnrec.role"
"""The scope key where :class:`ApiKeyAuth` records the caller's role: ``admin``, ``client`` or None."""
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
METRICS_PATH = "/metrics"


def keys_from_env(environ: Mapping[str, str] | None = None, variable: str = ENV_KEYS) -> list[str]:
    """The comma-separated keys of ``variable`` (``ATTNREC_API_KEYS``; none when unset or empty)."""
    value = (os.environ if environ is None else environ).get(variable, "")
    keys = [k.strip() for k in value.split(",") if k.strip()]
    for k in keys:
        _checked(k, f"${variable}")
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


def collect_admin_keys(given: Iterable[str], environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """Every admin key: ``given`` (``--admin-key``) and ``ATTNREC_ADMIN_KEYS``."""
    keys = [_checked(k, "--admin-key") for k in given] + keys_from_env(environ, ENV_ADMIN_KEYS)
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
    """Pure ASGI middleware: the caller's role from its key, 401 without an accepted key, 403 for a
    client key on an admin path; both in the JSON error shape.

    The role is recorded in the scope (:data:`ROLE`) for the endpoints that answer differently
    with a key (``/readyz``). Paths in :data:`OPEN_PATHS` (and ``/metrics`` unless
    ``protect_metrics``) need no key, nor do ``open_paths`` (the web page's files: the page asks the
    user for the key it then sends). Without client keys the public API is open; admin paths always
    need an admin key once admin keys are configured.
    """

    def __init__(
        self,
        app: ASGIApp,
        keys: KeyRing,
        protect_metrics: bool,
        open_paths: frozenset[str] = frozenset(),
        admin_keys: KeyRing | None = None,
    ) -> None:
        self.app, self.keys, self.admin_keys = app, keys, admin_keys or KeyRing([])
        self.open = (OPEN_PATHS if protect_metrics else OPEN_PATHS | {METRICS_PATH}) | open_paths

    def role(self, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
        """``admin``, ``client`` or None (no accepted key) for a request's ``headers``."""
        presented = presented_keys(headers)
        if not presented:
            return None
        if self.admin_keys.accepts(presented):
            return "admin"
        return "client" if self.keys.accepts(presented) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        role = self.role(scope["headers"])
        scope[ROLE] = role
        path = scope["path"]
        if path.startswith(ADMIN_PREFIX) and self.admin_keys:
            if role != "admin":
                await _refuse(scope, receive, send, role is None)
                return
        elif role is None and self.keys and path not in self.open:
            await _refuse(scope, receive, send, True)
            return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, unauthenticated: bool) -> None:
    """401 without an accepted key; 403 for a client key on an admin path."""
    if unauthenticated:
        response = error_json(
            401,
            "unauthorized",
            "missing or invalid API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
        )
        response.headers["WWW-Authenticate"] = "Bearer"
    else:
        response = error_json(
            403,
            "admin_key_required",
            "this endpoint needs an admin key (--admin-key / ATTNREC_ADMIN_KEYS); a client key cannot use it",
        )
    await response(scope, receive, send)


def has_key(request: Request) -> bool:
    """Whether ``request`` came with an accepted key (any role)."""
    return request.scope.get(ROLE) is not None


def admin_allowed(request: Request) -> None:
    """A FastAPI dependency of the admin endpoints: refused (403) without configured admin keys unless
    the operator allowed admin without a key (and configured no key at all); with admin keys, the
    caller must have presented one. The middleware already refuses client keys under
    :data:`ADMIN_PREFIX`; this check covers an admin route anywhere else (``DELETE /v1/users/{user}``),
    so that declaring the dependency is enough to make a route an admin one."""
    cfg = request.app.state.config
    if cfg.admin_keys:
        if request.scope.get(ROLE) != "admin":
            raise ApiError(
                403,
                "admin_key_required",
                "this endpoint needs an admin key (--admin-key / ATTNREC_ADMIN_KEYS); a client key "
                "cannot use it",
            )
        return
    if cfg.api_keys or not cfg.unauthenticated_admin:
        raise ApiError(
            403,
            "admin_disabled",
            "admin endpoints need an admin key: start the server with --admin-key "
            "(or ATTNREC_ADMIN_KEYS)"
            + ("" if cfg.api_keys else ", or allow them without any key with --unauthenticated-admin"),
        )


__all__ = [
    "ADMIN_PREFIX",
    "ENV_ADMIN_KEYS",
    "ENV_KEYS",
    "OPEN_PATHS",
    "ApiKeyAuth",
    "KeyRing",
    "admin_allowed",
    "collect_admin_keys",
    "collect_keys",
    "has_key",
    "keys_from_env",
    "keys_from_file",
    "presented_keys",
]
