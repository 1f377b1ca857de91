"""The settings of one served app: request limits, micro-batching, backend and device."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from attnrec.checkpoint import LoadLimits, LoadPolicy, manifest_key
from attnrec.recommend.reasons import check_event_verbs, check_verb
from attnrec.serving.schemas import MAX_IDS
from attnrec.store import HistoryStore
from attnrec.training.train_config import check_device

BACKENDS = ("torch", "onnx")  # how a served model scores: torch, or ONNX Runtime on an export

MIN_KEY_LENGTH = 16
ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s?#]+")


@dataclass(frozen=True)
class ServingConfig:
    """Limits and batching of one app.

    ``max_batch`` requests at most are scored together (1 disables micro-batching);
    ``max_wait_ms`` is how long the batcher waits for more requests once it has one (0: it takes
    only those already queued, which adds no latency; see ``docs/how-to/serving.md`` for measurements).
    ``max_history`` and ``max_list`` may not exceed the request schema's hard cap
    (:data:`~attnrec.serving.schemas.MAX_IDS`). A body must arrive within ``body_timeout_s`` seconds
    (else 408). ``gc_freeze``: once the models are loaded, collect garbage and move every object
    alive into the collector's permanent generation (:func:`gc.freeze`), so the cyclic collector
    never walks the models' objects again and no long collection pause stalls a micro-batch.

    Model directories (``docs/how-to/model-directories.md``): one without ``manifest.json`` is
    refused unless ``allow_unsigned``; with ``manifest_key`` (a string or bytes of at least 16
    characters) every manifest's signature must verify; ``load_limits`` bound what a directory may
    ask for; a load or reload not done within ``load_timeout_s`` seconds is given up (its thread
    abandoned, the old model serving on).
    """

    max_k: int = 100
    max_history: int = 1000
    max_list: int = 10_000  # include / exclude lengths
    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 30.0
    max_batch: int = 32
    max_wait_ms: float = 0.0
    backend: str = "torch"  # torch or onnx
    inline: bool = False  # score recommend batches on the event-loop thread instead of the worker thread
    device: str = "cpu"
    warmup: bool = True
    # Operator settings (docs/how-to/serving.md): client API keys (none: the public API is open), admin keys
    # (none: the admin endpoints are refused), whether /metrics and /readyz's per-model states need a
    # key when keys are configured, CORS origins, admin endpoints without any key, SIGHUP reloading
    # every model, the folders a reload may load from (None: those holding the served directories).
    api_keys: frozenset[str] = field(default=frozenset(), repr=False)
    admin_keys: frozenset[str] = field(default=frozenset(), repr=False)
    protect_metrics: bool = True
    models_roots: tuple[Path, ...] | None = None
    # Concurrency (docs/how-to/serving.md): requests in flight beyond max_in_flight are answered 503 with
    # Retry-After (health probes excepted); bodies of at least large_body_bytes are parsed off the
    # event loop, at most parse_slots at a time.
    max_in_flight: int = 64
    retry_after_s: int = 1
    large_body_bytes: int = 64 << 10
    parse_slots: int = 2
    access_log: bool = False  # one log line per request (attnrec.access), with its request ID
    cors_origins: tuple[str, ...] = ()
    unauthenticated_admin: bool = False
    reload_on_sighup: bool = False
    gc_freeze: bool = True
    ui: bool = True  # the web page at /ui (and / redirecting to it); it only calls the public API
    reason_verb: str = "interacted with"  # "Because you {reason_verb} *A* and *B*" in explanations
    # event name -> its verb in reasons ("cart": "added {item} to your cart"), over the built-in defaults
    event_verbs: Mapping[str, str] = field(default_factory=dict, hash=False)
    # the events since training (attnrec.store): every recommender reads its users' live histories from it,
    # POST /v1/events writes it; None: histories as trained and no events endpoint
    store: HistoryStore | None = field(default=None, compare=False, repr=False)
    allow_unsigned: bool = False
    manifest_key: bytes | str | None = field(default=None, repr=False)
    load_limits: LoadLimits = field(default_factory=LoadLimits)
    load_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        sizes = (self.max_k, self.max_history, self.max_list, self.max_body_bytes, self.max_batch)
        if min(*sizes, self.max_in_flight, self.retry_after_s, self.large_body_bytes, self.parse_slots) < 1:
            raise ValueError(
                "max_k, max_history, max_list, max_body_bytes, max_batch, max_in_flight, retry_after_s, "
                "large_body_bytes and parse_slots must be positive"
            )
        if max(self.max_history, self.max_list) > MAX_IDS:
            raise ValueError(f"max_history and max_list must be at most {MAX_IDS} (the request schema's cap)")
        # written so that NaN fails too (nan < 0 is false: a NaN wait was taken)
        if not (0 <= self.max_wait_ms < math.inf and 0 < self.body_timeout_s < math.inf):
            raise ValueError("max_wait_ms must be >= 0 and body_timeout_s > 0, both finite")
        if not 0 < self.load_timeout_s < math.inf:
            raise ValueError(
                f"load_timeout_s must be a positive, finite number of seconds, not {self.load_timeout_s}"
            )
        object.__setattr__(self, "manifest_key", manifest_key(self.manifest_key))
        check_device(self.device)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, not {self.backend!r}")
        object.__setattr__(self, "reason_verb", check_verb(self.reason_verb, "reason_verb"))
        object.__setattr__(self, "event_verbs", check_event_verbs(self.event_verbs))
        for key in self.api_keys | self.admin_keys:
            check_api_key(key)
        if self.api_keys & self.admin_keys:
            raise ValueError(
                "a key is given both as a client key and as an admin key: give each role its own keys"
            )
        if self.models_roots is not None:
            object.__setattr__(self, "models_roots", tuple(Path(p).resolve() for p in self.models_roots))
        for origin in self.cors_origins:
            if origin != "*" and not ORIGIN.fullmatch(origin):
                raise ValueError(f"CORS origin {origin!r}: expected scheme://host[:port] (no path), or *")

    def load_policy(self) -> LoadPolicy:
        """How this app opens model directories (at start-up and on every reload)."""
        key = self.manifest_key
        return LoadPolicy(
            self.allow_unsigned, key.encode() if isinstance(key, str) else key, self.load_limits
        )

    def limits(self) -> dict[str, int | float | bool]:
        """The limits ``GET /v1/models`` reports."""
        return {
            "max_k": self.max_k,
            "max_history": self.max_history,
            "max_list": self.max_list,
            "max_body_bytes": self.max_body_bytes,
            "max_batch": self.max_batch,
            "max_wait_ms": self.max_wait_ms,
            "inline": self.inline,
        }


def check_api_key(key: str) -> str:
    """``key`` when it can be an API key (at least 16 printable ASCII characters, no spaces), else ValueError.

    The message never repeats the key (it may be a real one with a typo).
    """
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise ValueError("an API key must be printable ASCII without spaces")
    if len(key) < MIN_KEY_LENGTH:
        raise ValueError(
            f"an API key must have at least {MIN_KEY_LENGTH} characters (this one has {len(key)}); "
            "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return key


__all__ = ["BACKENDS", "MIN_KEY_LENGTH", "ServingConfig", "check_api_key"]
