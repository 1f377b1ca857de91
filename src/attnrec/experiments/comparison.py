"""Train several models on one dataset under one protocol and tabulate them side by side.

:func:`compare` is what ``attnrec compare`` runs: every model is fitted by the one runner
(:func:`~attnrec.experiments.runner.run_one`) on the same split, selected on the validation cases
under the same protocol as the test, and tested once. The :class:`Comparison` it returns renders
as markdown (:func:`~attnrec.experiments.tables.comparison_markdown`) and JSON; the published
figures (:mod:`attnrec.evaluation.published`) are put beside ours only where the data file's
sha256, the split and the protocol are the ones the paper used.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from attnrec import __version__
from attnrec.data.schema import DataSource, Interactions
from attnrec.data.split import Split, leave_one_out
from attnrec.evaluation.protocol import FULL, Protocol
from attnrec.evaluation.published import DATASETS, published_table
from attnrec.experiments.runner import RunRequest, count_parameters, run_one
from attnrec.experiments.tables import SHORTFALL, comparison_markdown
from attnrec.models.registry import get_spec, list_models

log = logging.getLogger("attnrec.compare")


@dataclass
class ModelRun:
    """One model's line of the comparison."""

    model: str
    preset: str | None
    metrics: dict[str, float]
    train_seconds: float  # wall-clock of fit(), validation included
    n_params: int  # trainable parameters (0 for count-based estimators)
    epochs: int
    best_epoch: int
    stopped: str
    published: dict[str, float] | None = None
    error: str | None = None
    settings: dict[str, Any] | None = None  # this row's own settings, when it was run apart from the table's


@dataclass
class Comparison:
    """Every model's test metrics on one dataset, split and protocol, plus how they were obtained."""

    data: DataSource
    n_users: int
    n_items: int
    n_interactions: int
    split: str
    protocol: Protocol
    n_cases: int
    runs: list[ModelRun] = field(default_factory=list)
    published_source: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    selection: Protocol | None = None  # the validation protocol, when it is not ``protocol``
    others: list[Comparison] = field(default_factory=list)  # the same fitted models under other protocols
    notes: str = ""  # markdown written by a person: why a figure is what it is (e.g. a shortfall)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Comparison:
        """The inverse of :meth:`to_dict` (e.g. to re-render a saved ``comparison.json``)."""

        def protocol(p: dict[str, Any]) -> Protocol:
            return Protocol(**(p | {"ks": tuple(p["ks"])}))

        fields = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in fields}
        kw |= {
            "data": DataSource(**d["data"]),
            "protocol": protocol(d["protocol"]),
            "runs": [ModelRun(**r) for r in d["runs"]],
            "selection": protocol(d["selection"]) if d.get("selection") else None,
            "others": [cls.from_dict(o) for o in d.get("others", [])],
        }
        return cls(**kw)

    @classmethod
    def read(cls, path: str | Path) -> Comparison:
        """A comparison from its ``comparison.json``."""
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    def merge(self, newer: Comparison) -> Comparison:
        """This table with ``newer``'s rows in place of (or after) the same models' rows.

        Both must be the same data file, split, protocols and model selection, so that the rows
        stay comparable; each merged row keeps the settings it was run with (time budget, date, ...)
        where they differ from this table's. Tables under the other protocols are merged alike.
        """

        def key(c: Comparison) -> tuple[object, ...]:
            return (c.data.sha256, c.split, c.n_cases, c.protocol, c.selection or c.protocol)

        if key(self) != key(newer) or [key(o) for o in self.others] != [key(o) for o in newer.others]:
            raise ValueError(
                "cannot merge comparisons of different data, split, protocols or model selection: "
                f"{self.data.name} / {self.split} / {self.protocol.describe()} (+{len(self.others)} more) vs "
                f"{newer.data.name} / {newer.split} / {newer.protocol.describe()} (+{len(newer.others)} more)"
            )
        own = {k: v for k, v in newer.settings.items() if self.settings.get(k) != v}
        runs = list(self.runs)
        for r in newer.runs:
            r = dataclasses.replace(r, settings=(r.settings or own) or None)
            at = next((i for i, old in enumerate(runs) if old.model == r.model), None)
            if at is None:
                runs.append(r)
            else:
                runs[at] = r
        return dataclasses.replace(
            self, runs=runs, others=[o.merge(n) for o, n in zip(self.others, newer.others, strict=True)]
        )

    def shortfalls(self, ratio: float = SHORTFALL) -> list[tuple[ModelRun, float]]:
        """Runs whose HR@10 is below ``ratio`` x the published HR@10, with their ratio to it."""
        return [
            (r, r.metrics["HR@10"] / r.published["HR@10"])
            for r in self.runs
            if r.published
            and r.published.get("HR@10")
            and "HR@10" in r.metrics
            and r.metrics["HR@10"] < ratio * r.published["HR@10"]
        ]

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["protocol"] = self.protocol.to_dict()
        if self.selection is not None:
            d["selection"] = self.selection.to_dict()
        d["protocol_text"] = self.protocol.describe()
        d["selection_text"] = (self.selection or self.protocol).describe()
        d["others"] = [o.to_dict() for o in self.others]
        return d

    def to_markdown(self, level: int = 1) -> str:
        """The table as markdown (:func:`~attnrec.experiments.tables.comparison_markdown`)."""
        return comparison_markdown(self, level)

    def write(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write ``comparison.md`` and ``comparison.json`` into ``out_dir``; returns both paths."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        md, js = d / "comparison.md", d / "comparison.json"
        for path, text in ((md, self.to_markdown()), (js, json.dumps(self.to_dict(), indent=2) + "\n")):
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
        return md, js


def default_models(data: Interactions | None = None) -> list[str]:
    """Every registered sequential-recommendation model; for ``data`` without item features, those that
    can be fitted without them (the content baseline reads nothing else)."""
    names = list_models("sequential")
    if data is None or data.item_features is not None:
        return names
    return [n for n in names if not get_spec(n).needs_item_features]


def resolve_preset(model: str, data: Interactions, preset: str | None = "auto") -> str | None:
    """The preset to train ``model`` with on ``data``.

    ``"auto"`` picks the preset named after the dataset: ``ml-1m``/``beauty`` when the data file is
    the published one (by sha256), else the dataset's name (e.g. ``demo``); ``None`` when the model
    has no such preset. An explicit name must exist unless the model has no presets at all.
    """
    presets = get_spec(model).presets
    if preset is None:
        return None
    if preset == "auto":
        for key in (DATASETS.get(data.source.sha256), data.source.name):
            if key in presets:
                return key
        return None
    return preset if preset in presets else None


def empty_comparison(
    data: Interactions,
    split: Split,
    protocol: Protocol,
    selection: Protocol,
    settings: dict[str, Any] | None = None,
) -> Comparison:
    """A table without rows for ``data`` on ``split`` under ``protocol``, with its comparable published
    source."""
    published = published_table(data.source.sha256, protocol, split.name)
    return Comparison(
        data.source,
        data.n_users,
        data.n_items,
        len(data),
        split.describe(),
        protocol,
        len(split.test),
        published_source=published.source if published else None,
        settings=dict(settings or {}),
        selection=selection,
    )


def compare(
    data: Interactions,
    models: Sequence[str] | None = None,
    *,
    protocol: Protocol = FULL,
    preset: str | None = "auto",
    time_budget: float | None = None,
    train: dict[str, Any] | None = None,
    split: Split | None = None,
    progress: bool = False,
    on_run: Callable[[Comparison], None] | None = None,
    also: Sequence[Protocol] = (),
    notes: str = "",
) -> Comparison:
    """Fit each of ``models`` (default: :func:`default_models`) on ``data`` and test it under ``protocol``.

    Each fitted model is also tested under every protocol in ``also`` (model selection stays on
    ``protocol``); those tables are in ``result.others``, one per protocol, so one training run
    gives, say, both the paper's sampled figures and full-ranking ones. ``notes`` (markdown written
    by a person) goes under the main table.

    ``preset`` is resolved per model by :func:`resolve_preset`; ``time_budget`` (seconds of
    training per model) and ``train`` override the preset's training settings. A model that fails
    is recorded with its error and the comparison goes on. ``on_run`` is called after every model
    with the comparison so far (e.g. to write partial results).
    """
    names = list(models) if models else default_models(data)
    for name in names:
        get_spec(name)  # unknown names fail before any training
    split = split or leave_one_out(data)
    settings: dict[str, Any] = {
        "preset": preset,
        "time_budget": time_budget,
        **(train or {}),
        "attnrec": __version__,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }
    result = empty_comparison(data, split, protocol, protocol, settings)
    result.notes = notes
    result.others = [empty_comparison(data, split, p, protocol, settings) for p in also if p != protocol]
    tables = (result, *result.others)
    for name in names:
        chosen = resolve_preset(name, data, preset)
        over = dict(train or {}) | ({"time_budget": time_budget} if time_budget is not None else {})
        log.info("compare: fitting %s (preset %s)", name, chosen)
        t0 = time.perf_counter()
        request = RunRequest(name, chosen, {}, over, protocol, [c.protocol for c in tables])
        try:
            outcome = run_one(request, data, split, progress=progress)
        except (RuntimeError, ValueError, FloatingPointError, MemoryError) as e:
            log.error("compare: %s failed: %s", name, e)
            for c in tables:
                c.runs.append(
                    ModelRun(
                        name,
                        chosen,
                        {},
                        time.perf_counter() - t0,
                        0,
                        0,
                        0,
                        "failed",
                        error=f"{type(e).__name__}: {e}",
                    )
                )
        else:
            tr, n_params = outcome.recommender.train_result_, count_parameters(outcome.recommender)
            for c, res, published in zip(tables, outcome.results, outcome.published, strict=True):
                c.runs.append(
                    ModelRun(
                        name,
                        chosen,
                        res.metrics,
                        outcome.fit_seconds,
                        n_params,
                        tr.epochs if tr else 0,
                        tr.best_epoch if tr else 0,
                        tr.stopped if tr else "",
                        published,
                    )
                )
        if on_run is not None:
            on_run(result)
    return result
