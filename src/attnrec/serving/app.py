"""The HTTP service: ``create_app({name: checkpoint_dir | Recommender}) -> FastAPI``.

Nothing lives at module level: every model, queue and thread belongs to the app that
:func:`create_app` returns, so several apps (and tests) can coexist in one process.

Model work runs on one worker thread per app (torch uses its own intra-op threads), never on the
event loop. Concurrent ``/v1/recommend`` requests for one model are micro-batched: a queue
gathers the requests that arrive while the worker is busy (and, with ``max_wait_ms > 0``, for up
to that long) and scores them with one :meth:`Recommender.recommend_many` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnrec import __version__
from attnrec.checkpoint import read_json
from attnrec.config import config_to_dict
from attnrec.data.schema import DataError
from attnrec.recommend import Recommendation, Recommender
from attnrec.registry import get_spec
from attnrec.serving.schemas import (
    ErrorResponse,
    ExplainRequest,
    ExplainResponse,
    ModelInfo,
    ModelsResponse,
    RecommendRequest,
    RecommendResponse,
    ScoredItem,
    SimilarItemsRequest,
    SimilarItemsResponse,
    Status,
)

log = logging.getLogger("attnrec.serving")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class ServingConfig:
    """Limits and batching of one app.

    ``max_batch`` requests at most are scored together (1 disables micro-batching);
    ``max_wait_ms`` is how long the batcher waits for more requests once it has one (0: it takes
    only those already queued, which adds no latency; see ``docs/serving.md`` for measurements).
    """

    max_k: int = 100
    max_history: int = 1000
    max_list: int = 10_000  # include / exclude lengths
    max_body_bytes: int = 1 << 20
    max_batch: int = 32
    max_wait_ms: float = 0.0
    backend: str = "torch"  # torch or onnx
    inline: bool = False  # score recommend batches on the event-loop thread instead of the worker thread
    device: str = "cpu"
    warmup: bool = True

    def __post_init__(self) -> None:
        if min(self.max_k, self.max_history, self.max_list, self.max_body_bytes, self.max_batch) < 1:
            raise ValueError("max_k, max_history, max_list, max_body_bytes and max_batch must be positive")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if self.backend not in ("torch", "onnx"):
            raise ValueError(f"backend must be 'torch' or 'onnx', not {self.backend!r}")


class ApiError(Exception):
    """An error answered as ``{"error": {status, code, message, details}}``."""

    def __init__(self, status: int, code: str, message: str, details: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details or []


def _error_json(status: int, code: str, message: str, details: list[dict[str, str]] | None = None) -> JSONResponse:
    body = {"error": {"status": status, "code": code, "message": message, "details": details or []}}
    return JSONResponse(body, status_code=status)


def load_model(path: str | Path, device: str = "cpu") -> Any:
    """Load a checkpoint directory: a :class:`Recommender`, or an ``attnrec.explainer.Explainer``
    for explanation models (PETER)."""
    d = Path(path)
    meta = read_json(d / "config.json")
    if meta.get("task") == "explain" or get_spec(str(meta.get("model"))).task == "explain":
        try:
            from attnrec.recommend.explainer import Explainer  # type: ignore[import-not-found,unused-ignore]
        except ImportError as e:  # pragma: no cover - depends on the explainer being installed
            raise RuntimeError(f"{d}: a {meta.get('model')} checkpoint needs attnrec.explainer ({e})") from e
        return Explainer.load(d, device)
    return Recommender.load(d, device)


class MicroBatcher(Generic[T, R]):
    """Gathers concurrent submissions into lists for ``fn`` (run on ``executor``, or on the event
    loop's own thread when ``executor`` is None: no thread hand-offs, but the loop is blocked while
    a batch is scored; requests arriving meanwhile wait in the socket buffers and form the next batch).

    A batch starts with the first waiting item, takes everything already queued (up to
    ``max_batch``) and, when ``max_wait`` > 0, waits up to that many seconds for more. If a batch
    fails, its items are retried one by one so that one bad request cannot fail the others.
    """

    def __init__(self, fn: Callable[[list[T]], list[R]], executor: ThreadPoolExecutor | None, max_batch: int,
                 max_wait: float) -> None:
        self.fn, self.executor, self.max_batch, self.max_wait = fn, executor, max_batch, max_wait
        self.queue: asyncio.Queue[tuple[T, asyncio.Future[R]]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        self.batches = 0
        self.items = 0

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def submit(self, item: T) -> R:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        await self.queue.put((item, fut))
        return await fut

    async def _gather(self) -> list[tuple[T, asyncio.Future[R]]]:
        loop = asyncio.get_running_loop()
        batch = [await self.queue.get()]
        deadline = loop.time() + self.max_wait
        while len(batch) < self.max_batch:
            try:
                batch.append(self.queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self.queue.get(), left))
            except (asyncio.TimeoutError, TimeoutError):
                break
        return [(x, f) for x, f in batch if not f.done()]  # cancelled requests are dropped

    async def _call(self, items: list[T]) -> list[R]:
        if self.executor is None:
            return self.fn(items)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.fn, items)

    async def _run(self) -> None:
        while True:
            batch = await self._gather()
            if not batch:
                continue
            self.batches, self.items = self.batches + 1, self.items + len(batch)
            try:
                results = await self._call([x for x, _ in batch])
                pairs: list[tuple[asyncio.Future[R], R | BaseException]] = [
                    (f, r) for (_, f), r in zip(batch, results, strict=True)]
            except Exception as e:  # noqa: BLE001 - isolate the failing request
                if len(batch) == 1:
                    pairs = [(batch[0][1], e)]
                else:
                    pairs = []
                    for x, f in batch:
                        try:
                            pairs.append((f, (await self._call([x]))[0]))
                        except Exception as e1:  # noqa: BLE001
                            pairs.append((f, e1))
            for f, r in pairs:
                if f.done():
                    continue
                if isinstance(r, BaseException):
                    f.set_exception(r)
                else:
                    f.set_result(r)


@dataclass
class _Entry:
    name: str
    source: str
    obj: Any = None
    status: str = "loading"
    error: str | None = None
    backend: str = "torch"
    batcher: MicroBatcher[dict[str, Any], Recommendation] | None = None
    capabilities: list[str] = field(default_factory=list)


def _capabilities(obj: Any) -> list[str]:
    caps = []
    if hasattr(obj, "recommend_many"):
        caps.append("recommend")
    if hasattr(obj, "similar_items"):
        caps.append("similar-items")
    if hasattr(obj, "explain"):
        caps.append("explain")
    return caps


class _BodyLimit:
    """Pure ASGI middleware answering 413 to bodies declared larger than ``max_bytes``
    (cheaper per request than ``@app.middleware``, which wraps every response in a stream)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                if key == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                    response = _error_json(413, "body_too_large", f"request body of {int(value)} bytes exceeds "
                                           f"the limit of {self.max_bytes} bytes")
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _json(model: Any) -> Response:
    """A response from a pydantic model, serialised once (FastAPI would validate it again)."""
    return Response(model.model_dump_json(), media_type="application/json")


def _recommend_many(e: _Entry) -> Callable[[list[dict[str, Any]]], list[Recommendation]]:
    def run(requests: list[dict[str, Any]]) -> list[Recommendation]:
        return e.obj.recommend_many(requests)

    return run


def _describe(info: ModelInfo, obj: Any) -> None:
    """Fill ``info`` from a Recommender's ``meta`` or, for other models, the same attributes."""
    spec = getattr(obj, "spec", None)
    meta = dict(obj.meta) if hasattr(obj, "meta") else {}
    src = getattr(obj, "source_", None)
    items = getattr(obj, "items_", None)
    info.model = meta.get("model", getattr(spec, "name", None))
    info.task = getattr(spec, "task", None)
    info.preset = meta.get("preset", getattr(obj, "preset", None))
    cfg = getattr(obj, "config", None)
    info.config = meta.get("config", config_to_dict(cfg) if is_dataclass(cfg) else None)
    info.n_items = meta.get("n_items", len(items) if items is not None else None)
    info.dataset = meta.get("data", asdict(src) if is_dataclass(src) and not isinstance(src, type) else None)
    info.evaluations = list(meta.get("evaluations", getattr(obj, "evaluations_", None)) or [])
    tr = getattr(obj, "train_result_", None)
    if tr is not None and hasattr(tr, "to_dict"):
        info.training = {k: v for k, v in tr.to_dict().items() if k != "history"}


def _items(rec: Recommendation) -> list[ScoredItem]:
    titles = rec.titles or [None] * len(rec.items)
    return [ScoredItem(item=i, score=s, title=t) for i, s, t in zip(rec.items, rec.scores, titles, strict=True)]


def _jsonable(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return asdict(x)
    if hasattr(x, "model_dump"):
        return x.model_dump()
    if isinstance(x, str):
        return {"text": x}
    return x


def create_app(models: Mapping[str, str | Path | Any], config: ServingConfig | None = None) -> FastAPI:
    """A FastAPI app serving ``models`` (name -> checkpoint directory or loaded model object).

    Directories are loaded in the background when the app starts (``/readyz`` answers 503 until
    they are ready); loaded objects (a :class:`Recommender`, an explainer) are ready at once.
    """
    if not models:
        raise ValueError("create_app needs at least one model")
    cfg = config or ServingConfig()
    entries: dict[str, _Entry] = {}
    for name, m in models.items():
        if isinstance(m, (str, Path)):
            entries[name] = _Entry(name, str(m))
        else:
            entries[name] = _Entry(name, f"<{type(m).__name__} object>", m)
    workers: list[ThreadPoolExecutor] = []  # the model thread of the running lifespan (an app can be restarted)

    def worker() -> ThreadPoolExecutor:
        if not workers:
            raise ApiError(503, "not_started", "the app is not running (its lifespan has not started)")
        return workers[-1]

    def prepare(e: _Entry) -> None:
        """Runs on the worker thread: load, switch backend, warm up."""
        if e.obj is None:
            e.obj = load_model(e.source, cfg.device)
        if cfg.backend == "onnx" and isinstance(e.obj, Recommender):
            from attnrec.serving.export import use_onnx

            use_onnx(e.obj)
        if type(getattr(e.obj, "core", None)).__name__.startswith("Onnx"):
            e.backend = "onnx"
        if cfg.warmup and isinstance(e.obj, Recommender):
            e.obj.recommend_many([{"user": e.obj.users_.to_list()[0] if e.obj.users_ else None, "k": 1}])
            e.obj.recommend(history=[str(e.obj.items_.external[0])], k=1)  # type: ignore[union-attr]
        e.capabilities = _capabilities(e.obj)

    async def load(todo: list[_Entry]) -> None:
        loop = asyncio.get_running_loop()
        for e in todo:
            try:
                t0 = time.perf_counter()
                await loop.run_in_executor(worker(), prepare, e)
                e.status = "ready"
                log.info("model %s ready in %.1fs (%s)", e.name, time.perf_counter() - t0, e.source)
            except Exception as exc:  # noqa: BLE001 - reported by /readyz and /v1/models
                e.status, e.error = "failed", f"{type(exc).__name__}: {exc}"
                log.error("model %s failed to load: %s", e.name, e.error)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        workers.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnrec-model"))
        executor = workers[-1]
        for e in entries.values():
            batcher: MicroBatcher[dict[str, Any], Recommendation] = MicroBatcher(
                _recommend_many(e), None if cfg.inline else executor, cfg.max_batch, cfg.max_wait_ms / 1000)
            batcher.start()
            e.batcher = batcher
        # Objects passed in are prepared (backend, warm-up) before serving starts; directories load
        # in the background so that /healthz answers at once and /readyz says when they are ready.
        await load([e for e in entries.values() if e.obj is not None])
        loader = asyncio.get_running_loop().create_task(load([e for e in entries.values() if e.obj is None]))
        try:
            yield
        finally:
            loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loader
            for e in entries.values():
                if e.batcher is not None:
                    await e.batcher.stop()
            executor.shutdown(wait=False, cancel_futures=True)
            workers.clear()

    app = FastAPI(
        title="attnrec",
        version=__version__,
        description="Recommendations, similar items and explanations from attnrec models. "
                    "Errors are JSON: `{\"error\": {status, code, message, details}}`.",
        lifespan=lifespan,
        responses={400: {"model": ErrorResponse}, 404: {"model": ErrorResponse}, 422: {"model": ErrorResponse},
                   503: {"model": ErrorResponse}},
    )
    app.state.entries = entries
    app.state.config = cfg

    # -- errors ----------------------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error_json(exc.status, exc.code, exc.message, exc.details)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
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
        return _error_json(422, "invalid_request", f"invalid request: {summary}", details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error_json(exc.status_code, code, str(exc.detail))

    app.add_middleware(_BodyLimit, max_bytes=cfg.max_body_bytes)

    # -- helpers ---------------------------------------------------------------------------------
    def pick(name: str | None, capability: str) -> _Entry:
        if name is not None:
            e = entries.get(name)
            if e is None:
                raise ApiError(404, "unknown_model", f"unknown model {name!r}; loaded models: {', '.join(entries)}")
        else:
            able = [x for x in entries.values() if capability in x.capabilities or x.status != "ready"]
            if not able:
                if capability == "explain":
                    raise ApiError(501, "no_explainer", "no explanation model is loaded; start the server with "
                                   "an explanation model's checkpoint (e.g. PETER: --model NAME=DIR)")
                raise ApiError(400, "unsupported", f"no loaded model supports {capability}")
            e = able[0]
        if e.status == "loading":
            raise ApiError(503, "model_loading", f"model {e.name!r} is still loading; retry shortly")
        if e.status == "failed":
            raise ApiError(503, "model_failed", f"model {e.name!r} failed to load: {e.error}")
        if capability not in e.capabilities:
            if capability == "explain":
                raise ApiError(501, "no_explainer", f"model {e.name!r} ({type(e.obj).__name__}) cannot explain; "
                               "load an explanation model (e.g. PETER) to use /v1/explain")
            raise ApiError(400, "unsupported", f"model {e.name!r} does not support {capability}")
        return e

    def check_k(k: int) -> None:
        if k > cfg.max_k:
            raise ApiError(422, "limit_exceeded", f"k={k} exceeds this server's max_k={cfg.max_k}",
                           [{"loc": "k", "message": f"must be at most {cfg.max_k}"}])

    async def on_worker(fn: Callable[..., R], *args: Any) -> R:
        return await asyncio.get_running_loop().run_in_executor(worker(), fn, *args)

    # -- endpoints -------------------------------------------------------------------------------
    @app.post("/v1/recommend", response_model=RecommendResponse, tags=["recommend"])
    async def recommend(req: RecommendRequest) -> Response:
        """Top-k items for a user or a history. Unknown history items are reported in `unknown_items`;
        an unknown user is answered from the history or by popularity, and `fallback` says so."""
        e = pick(req.model, "recommend")
        check_k(req.k)
        for key, limit in (("history", cfg.max_history), ("include", cfg.max_list), ("exclude", cfg.max_list)):
            n = len(getattr(req, key) or ())
            if n > limit:
                raise ApiError(422, "limit_exceeded", f"{key} has {n} items; this server accepts at most {limit}",
                               [{"loc": key, "message": f"at most {limit} items"}])
        args = req.model_dump(exclude={"model"})
        assert e.batcher is not None
        rec = await e.batcher.submit(args)
        return _json(RecommendResponse(model=e.name, user=rec.user, items=_items(rec),
                                       unknown_items=rec.unknown_items, fallback=rec.fallback, method=rec.method))

    @app.post("/v1/similar-items", response_model=SimilarItemsResponse, tags=["recommend"])
    async def similar_items(req: SimilarItemsRequest) -> Response:
        """Items most similar to `item`: cosine of the model's item vectors, else of co-occurrence."""
        e = pick(req.model, "similar-items")
        check_k(req.k)
        try:
            rec = await on_worker(e.obj.similar_items, req.item, req.k)
        except KeyError as exc:
            raise ApiError(404, "unknown_item", f"unknown item {req.item!r} in model {e.name!r}",
                           [{"loc": "item", "message": str(exc.args[0]) if exc.args else "unknown"}]) from None
        return _json(SimilarItemsResponse(model=e.name, item=req.item, items=_items(rec), method=rec.method))

    @app.post("/v1/explain", response_model=ExplainResponse, tags=["explain"],
              responses={501: {"model": ErrorResponse, "description": "no explanation model is loaded"}})
    async def explain(req: ExplainRequest) -> ExplainResponse:
        """Why `user` might like `item`, from an explanation model (PETER)."""
        e = pick(req.model, "explain")
        try:
            out = await on_worker(lambda: e.obj.explain(req.user, req.item, feature=req.feature))
        except KeyError as exc:
            raise ApiError(404, "unknown_id", str(exc.args[0]) if exc.args else "unknown user or item") from None
        except ValueError as exc:  # DataError included: unknown IDs are 404, anything else 422
            if isinstance(exc, DataError) and str(exc).startswith("unknown"):
                raise ApiError(404, "unknown_id", str(exc)) from None
            raise ApiError(422, "invalid_request", str(exc)) from None
        return ExplainResponse(model=e.name, user=req.user, item=req.item, explanation=_jsonable(out))

    @app.get("/v1/models", response_model=ModelsResponse, tags=["status"])
    async def list_loaded() -> ModelsResponse:
        """What is loaded: model, dataset, and the protocols and metrics it was evaluated with."""
        infos = []
        for e in entries.values():
            info = ModelInfo(name=e.name, status=e.status, error=e.error, backend=e.backend,
                             capabilities=e.capabilities)
            if e.status == "ready":
                _describe(info, e.obj)
            infos.append(info)
        limits = {"max_k": cfg.max_k, "max_history": cfg.max_history, "max_list": cfg.max_list,
                  "max_body_bytes": cfg.max_body_bytes, "max_batch": cfg.max_batch, "max_wait_ms": cfg.max_wait_ms,
                  "inline": cfg.inline}
        return ModelsResponse(models=infos, limits=limits)

    @app.get("/healthz", response_model=Status, tags=["status"])
    async def healthz() -> Status:
        """The process is up (it may still be loading models)."""
        return Status(status="ok")

    @app.get("/readyz", response_model=Status, tags=["status"],
             responses={503: {"model": Status, "description": "a model is loading or failed"}})
    async def readyz() -> Any:
        """Every model is loaded and warmed up."""
        states = {e.name: e.status for e in entries.values()}
        if all(s == "ready" for s in states.values()):
            return Status(status="ready", models=states)
        return JSONResponse(Status(status="not ready", models=states).model_dump(), status_code=503)

    return app


__all__ = ["ApiError", "MicroBatcher", "ServingConfig", "create_app", "load_model"]
