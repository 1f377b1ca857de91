"""The benchmark config runner: one TOML run config in, one JSON result record out.

A config has a ``[run]`` table (:class:`RunConfig`: name, data, format, model, preset, split,
valid_users, valid_protocol, protocols, save, notes, cold_items, cold_seed, seeds) and optional ``[model]`` /
``[train]`` tables that override the preset; ``[run] base = "other.toml"`` starts from another
config's tables and overrides them key by key. :func:`run_configured` trains and tests it through the one
runner (:func:`~attnrec.experiments.runner.run_one`) and writes ``<out_dir>/<name>.json``; the
tables of :mod:`attnrec.experiments.tables` are rendered from those records. A config naming
``seeds`` is one run per seed (:func:`seed_runs`, :mod:`attnrec.experiments.seeds`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnrec.config import ConfigError, config_to_dict, load_toml
from attnrec.data.cold import cold_start
from attnrec.data.datasets import load_dataset
from attnrec.data.split import DEFAULT_SPLIT, SplitSettings
from attnrec.evaluation.protocol import check_single_target, protocol_by_name
from attnrec.experiments.runner import RunRequest, machine_info, run_one
from attnrec.experiments.seeds import SEED_KEY, seed_record, seeded_name
from attnrec.training.state import STATE_JSON

log = logging.getLogger("attnrec.experiments")


_SCALARS: dict[str, type | tuple[type, ...]] = {"str": str, "bool": bool, "int": int, "float": (int, float)}
_SCALAR_NAMES = {"str": "a string", "bool": "true or false", "int": "an integer", "float": "a number"}


@dataclass(frozen=True)
class RunConfig:
    """One benchmark run: the ``[run]`` table of a config file plus its ``[model]`` and ``[train]`` tables."""

    name: str
    data: str  # "demo...", a path (relative to the repository root) or an absolute path, or a dataset name
    model: str
    # where a named dataset (``data = "amazon-toys"``) is looked for, relative to the repository root;
    # a named dataset brings its feature files (item attributes, genres, user features)
    data_dir: str = ""
    format: str = "auto"
    preset: str | None = None
    split: str = DEFAULT_SPLIT
    valid_users: int = 0  # leave-one-out: validate on this many sampled users, the others train on theirs
    # split = "last-qualifying": test each user's last event of these types (comma-separated names, e.g.
    # "buy") rated at least min_target_rating ("next buy", "liked"); the result's split records both
    target_events: str = ""
    min_target_rating: float | None = None
    valid_protocol: str = "full"
    protocols: tuple[str, ...] = ("full",)
    save: bool = False  # also save the fitted model under <root>/runs/<name>
    # the cold-item protocol (attnrec.data.cold): this share of the items never in training, tested as
    # targets; cold and warm targets reported apart. 0 = off
    cold_items: float = 0.0
    cold_seed: int = 0
    notes: str = ""
    # training seeds: one run per seed named <name>-seed<k> with train.seed = k (seed_runs);
    # () = one run, <name>
    seeds: tuple[int, ...] = ()
    seed_group: str = ""  # set on each run of seed_runs: the config's own name (never in a config file)
    model_settings: dict[str, Any] = field(default_factory=dict)
    train_settings: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None  # the config file it was read from

    def __post_init__(self) -> None:
        where = f"{self.path}: " if self.path else ""
        for f in dataclasses.fields(self):  # a TOML value of the wrong type (save = "runs/x") is an error
            want = _SCALARS.get(str(f.type))
            value = getattr(self, f.name)
            if want is not None and (
                not isinstance(value, want) or (f.type != "bool" and isinstance(value, bool))
            ):
                raise ConfigError(
                    f"{where}[run] {f.name} must be {_SCALAR_NAMES[str(f.type)]}, not {value!r}"
                )
        try:
            self.split_settings()  # an impossible split fails before any data is read
        except ValueError as e:
            raise ConfigError(f"{where}{e}") from None
        for name in (self.valid_protocol, *self.protocols):
            protocol_by_name(name)  # an unknown protocol fails before any data is read
        try:
            check_single_target((self.valid_protocol, *self.protocols), "a run config")
        except ValueError as e:
            raise ConfigError(f"{where}{e}") from None
        if not 0.0 <= self.cold_items < 1.0:
            raise ConfigError(f"{where}cold_items must be a share in [0, 1), not {self.cold_items}")
        if self.cold_items and (self.split != "leave-one-out" or set(self.protocols) != {"full"}):
            raise ConfigError(f'{where}cold_items needs the leave-one-out split and protocols = ["full"]')
        if self.seeds and "seed" in self.train_settings:
            raise ConfigError(f"{where}[run] seeds and [train] seed both set the training seed; keep one")
        if len(set(self.seeds)) != len(self.seeds) or any(
            not isinstance(k, int) or k < 0 for k in self.seeds
        ):
            raise ConfigError(f"{where}seeds must be distinct integers >= 0, not {list(self.seeds)}")

    def split_settings(self) -> SplitSettings:
        """The split this run trains and tests on (checked on construction)."""
        return SplitSettings(
            self.split, self.valid_users, target_events=self.target_events, min_rating=self.min_target_rating
        )

    @classmethod
    def from_toml(cls, path: Path) -> RunConfig:
        """Read a run config; unknown tables or ``[run]`` keys are errors that list the valid ones."""
        tables = _resolved_tables(path, ())
        run = tables["run"]
        known = {f.name for f in dataclasses.fields(cls)} - {
            "model_settings",
            "train_settings",
            "path",
            "seed_group",
        }
        unknown = set(run) - known
        if unknown:
            raise ConfigError(
                f"{path}: unknown [run] keys {sorted(unknown)}; valid: {sorted(known | {'base'})}"
            )
        missing = [k for k in ("data", "model") if k not in run]
        if missing:
            raise ConfigError(f"{path}: [run] needs {' and '.join(missing)}")
        values = run | {
            "name": run.get("name", path.stem),
            "protocols": tuple(run.get("protocols", ("full",))),
            "seeds": tuple(run.get("seeds", ())),
        }
        return cls(**values, model_settings=tables["model"], train_settings=tables["train"], path=path)


def _resolved_tables(path: Path, seen: tuple[Path, ...]) -> dict[str, dict[str, Any]]:
    """The ``[run]``, ``[model]`` and ``[train]`` tables of ``path`` laid over those of the config its
    ``[run] base`` names (a path relative to ``path``'s folder; bases may have bases), key by key.

    A near-copy of a run (the same run in float32, say) is then a few lines that say what differs.
    The base's ``name`` is never inherited: a run's name is its own or its file's stem.
    """
    tables = load_toml(path, ("run", "model", "train"))
    base = tables["run"].pop("base", None)
    if base is None:
        return tables
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: [run] base must be the path of another config, not {base!r}")
    parent = (path.parent / base).resolve()
    chain = (*seen, path.resolve())
    if parent in chain:
        raise ConfigError(f"{path}: [run] base {base} leads back to {parent.name}: the bases form a loop")
    if not parent.is_file():
        raise ConfigError(f"{path}: [run] base {base}: no such config file")
    inherited = _resolved_tables(parent, chain)
    inherited["run"].pop("name", None)
    return {k: inherited[k] | tables[k] for k in ("run", "model", "train")}


def seed_runs(cfg: RunConfig, seeds: Sequence[int] | None = None) -> list[RunConfig]:
    """The runs of ``cfg``: itself when it names no seeds, else one per seed (``seeds`` overrides the
    config's).

    The run of seed ``k`` is named ``<name>-seed<k>`` (so its result file and training state are its own)
    and trains with ``train.seed = k``; everything else, the split included, is the config's.
    """
    chosen = cfg.seeds if seeds is None else tuple(seeds)
    if not chosen:
        return [cfg]
    base = dataclasses.replace(cfg, seeds=chosen)  # validates the seeds against the config
    return [
        dataclasses.replace(
            base,
            name=seeded_name(cfg.name, k),
            seeds=(),
            seed_group=cfg.name,
            train_settings={**cfg.train_settings, "seed": k},
        )
        for k in base.seeds
    ]


def run_configured(
    cfg: RunConfig,
    *,
    root: Path,
    out_dir: Path,
    git_sha: str,
    progress: bool = False,
    state_dir: Path | None = None,
) -> Path:
    """Train and test ``cfg``; write the result record ``<out_dir>/<name>.json`` and return its path.

    Relative data paths and the config file's recorded path are relative to ``root`` (the
    repository); ``git_sha`` names the code that runs. ``state_dir``: keep a resumable training
    state in ``state_dir/<name>``; a run started again with it resumes where it stopped, its fit
    time the training loop's clock summed over the sessions.
    """
    t_start = time.perf_counter()
    data_path = cfg.data
    if cfg.data_dir:  # a named dataset, from this folder only (never downloaded by a benchmark)
        data = load_dataset(
            data_path, format=cfg.format, data_dir=(root / cfg.data_dir).resolve(), download=False
        )
    else:
        if not data_path.startswith("demo") and not Path(data_path).is_absolute():
            data_path = str((root / data_path).resolve())
        data = load_dataset(data_path, format=cfg.format)
    cold = cold_start(data, cfg.cold_items, cfg.cold_seed, cfg.valid_users) if cfg.cold_items else None
    split = cold.split if cold is not None else cfg.split_settings().make(data)
    request = RunRequest(
        cfg.model,
        cfg.preset,
        cfg.model_settings,
        cfg.train_settings,
        protocol_by_name(cfg.valid_protocol),
        [protocol_by_name(p) for p in cfg.protocols],
    )
    run_state = state_dir / cfg.name if state_dir is not None else None
    if run_state is not None and (run_state / STATE_JSON).exists():
        log.info("%s: resuming from the training state in %s", cfg.name, run_state)
    outcome = run_one(request, data, split, progress=progress, state_dir=run_state, cold=cold)
    rec, tr = outcome.recommender, outcome.recommender.train_result_
    evaluations: dict[str, dict[str, Any]] = {}
    for name, res, published in zip(cfg.protocols, outcome.results, outcome.published, strict=True):
        evaluations[name] = res.to_dict()
        if published:
            evaluations[name]["published"] = {"paper": published}
        log.info("%s %s: %s", cfg.name, name, {k: round(v, 4) for k, v in res.metrics.items()})
    config_file = cfg.path.relative_to(root) if cfg.path and cfg.path.is_relative_to(root) else cfg.path
    result = {
        "name": cfg.name,
        "config_file": str(config_file),
        "model": rec.name,
        "preset": cfg.preset,
        "model_config": config_to_dict(rec.config),
        "train_config": config_to_dict(rec.train_config),
        "data": {
            "name": data.source.name,
            "path": cfg.data,
            "sha256": data.source.sha256,
            "users": data.n_users,
            "items": data.n_items,
            "interactions": len(data),
        },
        "split": split.describe(),
        **({"cold_items": outcome.cold} if outcome.cold is not None else {}),
        "valid_protocol": request.valid_protocol.describe(),
        "evaluations": evaluations,
        "train": tr.to_dict() if tr else None,
        "fit_seconds": outcome.fit_seconds,
        "wall_seconds": time.perf_counter() - t_start,
        "seconds_per_epoch": tr.seconds_per_epoch if tr else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "machine": machine_info(),
        "git_sha": git_sha,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "notes": cfg.notes,
        **({SEED_KEY: seed_record(cfg.seed_group, rec.train_config.seed)} if cfg.seed_group else {}),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{cfg.name}.json"
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    if cfg.save:
        rec.save(root / "runs" / cfg.name)
    return out
