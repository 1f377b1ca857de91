"""The end of a tuning (:mod:`attnrec.experiments.tuning`): test the best trial once, export, plot, summarise.

Files written under ``OUT``: ``best.toml`` (the best trial's complete ``[model]`` and ``[train]``
settings, which ``attnrec train --config`` accepts as they are), ``summary.json``, and Optuna's
``optimization_history.png`` and ``param_importances.png``. The best trial's model stays in
``OUT/trials/<number>`` (with its test result recorded in it); the other trials' models are
removed unless kept.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from attnrec.data.schema import Interactions
from attnrec.data.split import Split
from attnrec.evaluation.protocol import FULL, EvalResult
from attnrec.recommend import Recommender

STATES = {
    TrialState.COMPLETE: "complete",
    TrialState.PRUNED: "pruned",
    TrialState.FAIL: "failed",
    TrialState.RUNNING: "running",
    TrialState.WAITING: "waiting",
}


@dataclass(frozen=True)
class TrialRow:
    """One trial as the summary and the CLI's table show it."""

    number: int
    state: str  # complete, pruned, failed, interrupted, running, waiting
    value: float | None  # best validation value (complete trials)
    epochs: int | None
    seconds: float | None
    params: dict[str, Any]
    note: str = ""  # why it failed, which trial it retried

    @classmethod
    def of(cls, t: FrozenTrial) -> TrialRow:
        interrupted = t.state == TrialState.FAIL and t.user_attrs.get("interrupted")
        notes = [str(t.user_attrs["error"])] if "error" in t.user_attrs else []
        if "retry_of" in t.user_attrs:
            notes.append(f"retry of {t.user_attrs['retry_of']}")
        return cls(
            t.number,
            "interrupted" if interrupted else STATES.get(t.state, str(t.state)),
            t.value,
            t.user_attrs.get("epochs"),
            t.user_attrs.get("seconds"),
            dict(t.params),
            "; ".join(notes),
        )


@dataclass
class TuneOutcome:
    """What a tuning found: the best trial and its single test result, every trial, the files written."""

    study: str
    metric: str
    best_trial: int | None
    best_value: float | None
    best_params: dict[str, Any]
    test: EvalResult | None  # the best trial on the test split, full ranking (None when no trial completed)
    trials: list[TrialRow]
    counts: dict[str, int]
    wall_seconds: float
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def finish(
    study: optuna.Study,
    out: Path,
    data: Interactions,
    split: Split,
    *,
    keep_trials: bool = False,
    started: float,
    space: dict[str, Any],
) -> TuneOutcome:
    """Score the best complete trial on ``split.test`` (once, full ranking) and write the files of the module
    doc."""
    out.mkdir(parents=True, exist_ok=True)
    trials = study.get_trials(deepcopy=False)
    rows = [TrialRow.of(t) for t in trials]
    counts = {
        s: sum(1 for r in rows if r.state == s) for s in ("complete", "pruned", "failed", "interrupted")
    }
    fingerprint = study.user_attrs.get("attnrec", {})
    metric = str(fingerprint.get("metric", "value"))
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: (t.value, -t.number)) if complete else None
    outcome = TuneOutcome(study.study_name, metric, None, None, {}, None, rows, counts, 0.0)
    if best is not None:
        model_dir = Path(str(best.user_attrs.get("model_dir", "")))
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"the best trial's model ({best.number}) is not in {model_dir}: was the study "
                "started with another --out, or the directory removed?"
            )
        rec = Recommender.load(model_dir)
        outcome.test = rec.evaluate(split.test, FULL, split=split.describe(), target="test")
        rec.save(model_dir)  # the model carries its test result, as `attnrec train` leaves it
        outcome.best_trial, outcome.best_value, outcome.best_params = (
            best.number,
            best.value,
            dict(best.params),
        )
        outcome.files.append(_write_best_toml(out / "best.toml", best, study.study_name, metric))
        if not keep_trials:
            _remove_other_models(out / "trials", model_dir)
    else:
        outcome.notes.append("no trial completed: nothing was tested or exported")
    _plot(study, out, len(complete), outcome)
    outcome.wall_seconds = time.time() - started
    outcome.files.insert(0, _write_summary(out / "summary.json", outcome, data, split, fingerprint, space))
    return outcome


# -- exports ---------------------------------------------------------------------------------------
def _write_best_toml(path: Path, best: FrozenTrial, study: str, metric: str) -> Path:
    lines = [
        f"# The best trial ({best.number}) of the attnrec tune study {study!r}: validation {metric} "
        f"{best.value:.4f}.",
        "# Every setting of the trial, so that `attnrec train --config best.toml` trains it again; the",
        "# [train] time_budget is the tuning's per-trial budget: raise it (or max_epochs) for a longer run.",
    ]
    for table in ("model", "train"):
        values: dict[str, Any] = dict(best.user_attrs.get(f"{table}_config", {}))
        lines += ["", f"[{table}]"]
        # None means "the default" in these configs (e.g. attn_dropout = dropout); TOML has no null
        lines += [f"{k} = {toml_value(v)}" for k, v in values.items() if v is not None]
    path.write_text("\n".join(lines) + "\n")
    return path


def toml_value(value: object) -> str:
    """A TOML literal of a config value (bool, int, float, str or a list of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value) if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__} {value!r}")


def _remove_other_models(trials_dir: Path, keep: Path) -> None:
    """Free the disk of every trial model but the best (they are never read again)."""
    if not trials_dir.is_dir():
        return
    for d in trials_dir.iterdir():
        if d.is_dir() and d.resolve() != keep.resolve():
            shutil.rmtree(d)


def _write_summary(
    path: Path,
    o: TuneOutcome,
    data: Interactions,
    split: Split,
    fingerprint: dict[str, Any],
    space: dict[str, Any],
) -> Path:
    test = o.test.to_dict() if o.test is not None else None
    summary = {
        "study": o.study,
        "model": fingerprint.get("model"),
        "metric": o.metric,
        "direction": "maximize",
        "data": {
            "name": data.source.name,
            "sha256": data.source.sha256,
            "users": data.n_users,
            "items": data.n_items,
            "interactions": len(data),
        },
        "split": split.describe(),
        "selection": f"best validation {o.metric} (full ranking); test scored once",
        "best": {"trial": o.best_trial, "valid_value": o.best_value, "params": o.best_params},
        "test": test,
        "trials": o.counts | {"total": len(o.trials)},
        "wall_seconds": round(o.wall_seconds, 1),
        "space": space,
        "trial_list": [asdict(r) for r in o.trials],
        "notes": o.notes,
        "files": [str(p) for p in o.files],
    }
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return path


def _plot(study: optuna.Study, out: Path, n_complete: int, outcome: TuneOutcome) -> None:
    """Optuna's optimisation history and parameter importances as PNG (importance needs >= 2 complete
    trials)."""
    try:
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure
        from optuna.visualization import matplotlib as ovm
    except ImportError:
        outcome.notes.append("plots skipped: matplotlib is not installed (pip install 'attnrec[tune]')")
        return
    if n_complete < 1:
        outcome.notes.append("plots skipped: no complete trial")
        return
    names = ["optimization_history.png"]
    if n_complete >= 2:
        names.append("param_importances.png")
    else:
        outcome.notes.append("parameter importance skipped: it needs at least 2 complete trials")
    for name in names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
            try:
                ax = (
                    ovm.plot_optimization_history(study)
                    if name.startswith("optim")
                    else ovm.plot_param_importances(study)
                )
            except (ValueError, RuntimeError, ZeroDivisionError) as e:  # e.g. no parameter varied
                outcome.notes.append(f"{name} skipped: {e}")
                continue
        fig = ax.figure
        assert isinstance(fig, Figure)  # Optuna draws on a figure of its own, never a sub-figure
        fig.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        outcome.files.append(out / name)


__all__ = ["TrialRow", "TuneOutcome", "finish", "toml_value"]
