"""``attnrec serve``: the HTTP service (FastAPI + uvicorn) over saved model directories."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Any

import typer

from attnrec.cli._common import cli_errors, err, option_groups
from attnrec.cli._item_explanations import EventVerbOpt, parse_event_verbs
from attnrec.cli._options import choice_option
from attnrec.cli.ingest import RetentionOpt
from attnrec.cli.main import app
from attnrec.serving.logs import LOG_FORMATS, LOG_LEVELS
from attnrec.serving.serving_config import BACKENDS, ServingConfig
from attnrec.serving.transport import EVENT_LOOPS, HTTP_PARSERS
from attnrec.store import DEFAULT_RETENTION, open_store

#: ServingConfig's defaults: an option that sets a field states no default of its own.
_DEFAULT: dict[str, Any] = {f.name: f.default for f in fields(ServingConfig)}


def parse_model_specs(specs: list[str]) -> dict[str, Path]:
    """``["DIR", "NAME=DIR"]`` -> ``{name: dir}``; a bare directory is named after its last component."""
    models: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = Path(spec).resolve().name, spec
        name = name.strip()
        if not name or not path:
            raise ValueError(f"--model {spec!r}: expected DIR or NAME=DIR")
        if name in models:
            raise ValueError(f"--model: the name {name!r} is given twice; name them with NAME=DIR")
        d = Path(path)
        if not (d / "config.json").is_file():
            raise ValueError(f"--model {spec!r}: {d} is not a saved model directory (no config.json)")
        models[name] = d
    if not models:
        raise ValueError("give at least one --model DIR")
    return models


# The options that set the ServingConfig field of their name, as given.
_AS_NAMED = (
    "max_k",
    "max_history",
    "max_batch",
    "max_wait_ms",
    "backend",
    "inline",
    "device",
    "protect_metrics",
    "max_in_flight",
    "access_log",
    "unauthenticated_admin",
    "gc_freeze",
    "ui",
    "reason_verb",
    "allow_unsigned",
    "manifest_key",
)


@dataclass(frozen=True)
class ServeOptions:
    """Every option of ``attnrec serve`` but ``--model``. One named like a :class:`ServingConfig` field sets
    that field (:meth:`serving_config`); the others configure the process and uvicorn."""

    api_key: Annotated[
        list[str] | None,
        typer.Option(
            "--api-key",
            help="Require this API key (Authorization: Bearer KEY or X-API-Key: KEY; at least 16 "
            "characters); repeat for several. Also read from $ATTNREC_API_KEYS (comma-separated). No key: "
            "open.",
        ),
    ] = None
    api_keys_file: Annotated[
        Path | None, typer.Option(help="A file of API keys, one per line ('#' starts a comment line).")
    ] = None
    admin_key: Annotated[
        list[str] | None,
        typer.Option(
            "--admin-key",
            help="An admin key: the admin endpoints (hot reload, item addition) need one; it opens the "
            "public API too. Repeatable; also read from $ATTNREC_ADMIN_KEYS. None: admin endpoints "
            "refused.",
        ),
    ] = None
    models_root: Annotated[
        list[Path] | None,
        typer.Option(
            "--models-root",
            help="A folder hot reloads may load model directories from (symbolic links resolved); "
            "repeatable. Default: the folders holding the --model directories.",
        ),
    ] = None
    protect_metrics: Annotated[
        bool,
        typer.Option(
            help="With keys configured, /metrics and /readyz's per-model states need a key "
            "(--no-protect-metrics: open to anyone; health checks stay open either way)."
        ),
    ] = _DEFAULT["protect_metrics"]
    unauthenticated_admin: Annotated[
        bool,
        typer.Option(
            help="Allow the admin endpoints without any key (only when no key at all is configured; "
            "otherwise they need an --admin-key)."
        ),
    ] = _DEFAULT["unauthenticated_admin"]
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="Allow browser requests from this origin (e.g. https://shop.example); "
            "repeatable. None by default.",
        ),
    ] = None
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1"
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port.")] = 8000
    backend: Annotated[
        str,
        choice_option(
            "--backend",
            BACKENDS,
            help="Scoring backend: torch, or onnx (exported at start-up; needs the 'export' extra).",
        ),
    ] = _DEFAULT["backend"]
    max_batch: Annotated[
        int,
        typer.Option(min=1, help="Most requests scored together by the micro-batcher (1 disables batching)."),
    ] = _DEFAULT["max_batch"]
    max_wait_ms: Annotated[
        float,
        typer.Option(
            min=0,
            help="How long the batcher waits for more requests once it has one "
            "(0: only those already queued).",
        ),
    ] = _DEFAULT["max_wait_ms"]
    inline: Annotated[
        bool, typer.Option(help="Score on the event-loop thread (no worker-thread hand-off).")
    ] = _DEFAULT["inline"]
    max_k: Annotated[int, typer.Option(min=1, help="Largest k a request may ask for.")] = _DEFAULT["max_k"]
    max_history: Annotated[int, typer.Option(min=1, help="Longest history a request may send.")] = _DEFAULT[
        "max_history"
    ]
    threads: Annotated[int, typer.Option(min=0, help="torch CPU threads (0: torch's default).")] = 0
    device: Annotated[str, typer.Option(help="cpu, cuda, cuda:1 or auto.")] = _DEFAULT["device"]
    lazy: Annotated[
        bool,
        typer.Option(
            help="Start listening at once and load models in the background "
            "(/readyz says when they are ready)."
        ),
    ] = False
    loop: Annotated[
        str, choice_option("--loop", EVENT_LOOPS, help="uvicorn event loop (auto: uvloop when installed).")
    ] = "auto"
    http: Annotated[
        str,
        choice_option("--http", HTTP_PARSERS, help="uvicorn HTTP parser (auto: httptools when installed)."),
    ] = "auto"
    log_level: Annotated[
        str, choice_option("--log-level", LOG_LEVELS, help="Log level (uvicorn's and attnrec's).")
    ] = "info"
    log_format: Annotated[
        str,
        choice_option(
            "--log-format", LOG_FORMATS, help="json (one object per line, with time and request ID) or text."
        ),
    ] = "json"
    access_log: Annotated[
        bool, typer.Option(help="Log every request (method, path, status, duration, request ID).")
    ] = _DEFAULT["access_log"]
    max_connections: Annotated[
        int, typer.Option(min=0, help="Most open connections; beyond it a new one gets 503 (0: no cap).")
    ] = 256
    max_in_flight: Annotated[
        int,
        typer.Option(
            min=1,
            help="Most requests handled at once; beyond it 503 with Retry-After (health probes exempt).",
        ),
    ] = _DEFAULT["max_in_flight"]
    retry_after: Annotated[
        int, typer.Option(min=1, help="Seconds in the Retry-After of a 503 for overload.")
    ] = _DEFAULT["retry_after_s"]
    shutdown_delay: Annotated[
        float,
        typer.Option(
            min=0,
            help="On SIGTERM, answer /readyz 503 and keep serving this many seconds before closing "
            "(for load balancers to notice); a second signal stops at once.",
        ),
    ] = 0.0
    timeout_graceful_shutdown: Annotated[
        int, typer.Option(min=0, help="Seconds requests in flight get to finish once shutdown starts.")
    ] = 30
    timeout_keep_alive: Annotated[
        int,
        typer.Option(min=1, help="Close a keep-alive connection idle this many seconds after a response."),
    ] = 5
    timeout_headers: Annotated[
        float,
        typer.Option(
            min=0,
            help="Close a connection whose request headers are not complete "
            "this many seconds after it opened or was last answered.",
        ),
    ] = 10.0
    timeout_body: Annotated[
        float,
        typer.Option(
            min=0, help="Answer 408 to a request whose body has not arrived within this many seconds."
        ),
    ] = _DEFAULT["body_timeout_s"]
    gc_freeze: Annotated[
        bool,
        typer.Option(
            help="Freeze the loaded models out of the garbage collector's sight "
            "(gc.freeze), against collection pauses in the tail latency."
        ),
    ] = _DEFAULT["gc_freeze"]
    ui: Annotated[
        bool,
        typer.Option(
            help="Serve the web page at /ui (/ redirects to it); it calls the public "
            "API with the key typed into it."
        ),
    ] = _DEFAULT["ui"]
    reason_verb: Annotated[
        str,
        typer.Option(
            help="The verb of each explanation's reason: 'Because you VERB *A* "
            "and *B*' (e.g. watched, bought)."
        ),
    ] = _DEFAULT["reason_verb"]
    event_verb: EventVerbOpt = None
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Keep users' events (POST /v1/events) in this history store, a SQLite file (created when "
            "missing) or a redis:// URL, and answer every user from its training history plus them. None: "
            "histories as trained.",
        ),
    ] = None
    store_retention: RetentionOpt = DEFAULT_RETENTION
    allow_unsigned: Annotated[
        bool,
        typer.Option(
            help="Serve and reload model directories without manifest.json (saved by old versions), "
            "or, with --manifest-key, with an unsigned manifest; refused otherwise."
        ),
    ] = _DEFAULT["allow_unsigned"]
    manifest_key: Annotated[
        str | None,
        typer.Option(
            envvar="ATTNREC_MANIFEST_KEY",
            show_default=False,
            help="Verify every model directory's signed manifest with this key (the one it was saved "
            "with: attnrec train --manifest-key); a directory edited after saving is refused.",
        ),
    ] = None
    load_timeout: Annotated[
        float,
        typer.Option(
            min=0, help="Give up a model load or reload after this many seconds (the old model serves on)."
        ),
    ] = _DEFAULT["load_timeout_s"]

    def serving_config(self) -> ServingConfig:
        """The app's configuration: the fields of these options' names as given, the others from the options
        that name them differently or need reading. The key files are read and the store opened only once
        the rest is known to be good."""
        from attnrec.serving.auth import collect_admin_keys, collect_keys

        cfg = ServingConfig(
            **{name: getattr(self, name) for name in _AS_NAMED},
            body_timeout_s=self.timeout_body,
            retry_after_s=self.retry_after,
            event_verbs=parse_event_verbs(self.event_verb),
            models_roots=None if not self.models_root else tuple(self.models_root),
            cors_origins=tuple(self.cors_origin or ()),
            load_timeout_s=self.load_timeout,
        )
        return replace(
            cfg,
            api_keys=collect_keys(self.api_key or [], self.api_keys_file),
            admin_keys=collect_admin_keys(self.admin_key or []),
            reload_on_sighup=True,
            store=open_store(self.store, retention=self.store_retention) if self.store is not None else None,
        )


@app.command("serve")
@cli_errors
@option_groups
def serve(
    model: Annotated[
        list[str],
        typer.Option(
            "--model",
            "-m",
            help="A saved model directory, or NAME=DIR; repeat to serve several models. The first "
            "is the default for requests that name no model.",
        ),
    ],
    options: ServeOptions = ServeOptions(),
) -> None:
    """Serve recommendations, similar items and explanations over HTTP (docs at /docs)."""
    import torch
    import uvicorn

    from attnrec.serving.app import FromDirectory, Model, create_app
    from attnrec.serving.logs import configure_logging
    from attnrec.serving.transport import draining_server, http_protocol

    if options.threads:
        torch.set_num_threads(options.threads)
    protocol = http_protocol(
        options.http, options.timeout_headers, options.max_connections, options.retry_after
    )
    for root in options.models_root or ():
        if not root.is_dir():
            raise ValueError(f"--models-root {root}: not a directory")
    cfg = options.serving_config()
    dirs = parse_model_specs(model)
    # the process's logging changes only once every option is known to be good (a refused command
    # leaves it as it was); from here on, loading the models already logs in the server's format
    configure_logging(options.log_level, options.log_format)
    models: dict[str, Model] = (
        dict(dirs)
        if options.lazy
        else {n: FromDirectory.read(d, options.device, cfg.load_policy()) for n, d in dirs.items()}
    )
    err.print(
        f"serving {', '.join(f'{n} ({d})' for n, d in dirs.items())} on http://{options.host}:{options.port} "
        f"(backend {options.backend}, max batch {options.max_batch}); API docs at /docs"
        + (f", web page at http://{options.host}:{options.port}/ui" if options.ui else "")
        + (f"; live histories from {cfg.store!r}" if cfg.store is not None else "")
    )
    if not cfg.api_keys:
        err.print("no client API key configured: the public API is open (see --api-key)")
    if not cfg.admin_keys:
        open_admin = options.unauthenticated_admin and not cfg.api_keys
        err.print(
            "no admin key configured: admin endpoints are "
            + ("open to anyone (--unauthenticated-admin)" if open_admin else "refused (see --admin-key)")
        )
    served = create_app(models, cfg)
    config = uvicorn.Config(
        served,
        host=options.host,
        port=options.port,
        log_config=None,  # configured above: uvicorn's dictConfig would close every handler of the process
        log_level=options.log_level,
        access_log=False,  # attnrec's own access lines carry the request ID
        loop=options.loop,
        http=protocol,
        timeout_keep_alive=options.timeout_keep_alive,
        timeout_graceful_shutdown=options.timeout_graceful_shutdown,
    )
    draining_server(served, config, options.shutdown_delay).run()
