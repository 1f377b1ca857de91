"""The settings of one served app: request limits, micro-batching, backend and device."""

from __future__ import annotations

from dataclasses import dataclass

from attnrec.serving.schemas import MAX_IDS


@dataclass(frozen=True)
class ServingConfig:
    """Limits and batching of one app.

    ``max_batch`` requests at most are scored together (1 disables micro-batching);
    ``max_wait_ms`` is how long the batcher waits for more requests once it has one (0: it takes
    only those already queued, which adds no latency; see ``docs/serving.md`` for measurements).
    ``max_history`` and ``max_list`` may not exceed the request schema's hard cap
    (:data:`~attnrec.serving.schemas.MAX_IDS`). A body must arrive within ``body_timeout_s`` seconds
    (else 408). ``gc_freeze``: once the models are loaded, collect garbage and move every object
    alive into the collector's permanent generation (:func:`gc.freeze`), so the cyclic collector
    never walks the models' objects again and no long collection pause stalls a micro-batch.
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
    gc_freeze: bool = True

    def __post_init__(self) -> None:
        if min(self.max_k, self.max_history, self.max_list, self.max_body_bytes, self.max_batch) < 1:
            raise ValueError("max_k, max_history, max_list, max_body_bytes and max_batch must be positive")
        if max(self.max_history, self.max_list) > MAX_IDS:
            raise ValueError(f"max_history and max_list must be at most {MAX_IDS} (the request schema's cap)")
        if self.max_wait_ms < 0 or self.body_timeout_s <= 0:
            raise ValueError("max_wait_ms must be >= 0 and body_timeout_s > 0")
        if self.backend not in ("torch", "onnx"):
            raise ValueError(f"backend must be 'torch' or 'onnx', not {self.backend!r}")

    def limits(self) -> dict[str, int | float | bool]:
        """The limits ``GET /v1/models`` reports."""
        return {"max_k": self.max_k, "max_history": self.max_history, "max_list": self.max_list,
                "max_body_bytes": self.max_body_bytes, "max_batch": self.max_batch, "max_wait_ms": self.max_wait_ms,
                "inline": self.inline}


__all__ = ["ServingConfig"]
