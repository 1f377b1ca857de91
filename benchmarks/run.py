"""Benchmark runner: one TOML config in, one JSON result out; tables generated from result files.

    python benchmarks/run.py benchmarks/configs/ml-1m/sasrec-bce-paper.toml
    python benchmarks/run.py --table            # regenerate benchmarks/results/README.md
    python benchmarks/run.py --state-dir /scratch/state CONFIG.toml   # resumable training
    python benchmarks/run.py --seeds 0,1,2 CONFIG.toml   # one run per training seed
    python benchmarks/run.py --device cuda CONFIG.toml   # the same run on a GPU

A config has a ``[run]`` table (name, data, data_dir (a named dataset's folder: it brings its feature
files), format, model, preset, split, valid_users,
valid_protocol, protocols, save, notes) and optional ``[model]`` / ``[train]`` tables that
override the preset; ``[run] base = "other.toml"`` (relative to the config's folder) starts from another
config's three tables and overrides them key by key (its name is not inherited), so a variant of a run
says only what differs. Data paths are relative to the repository root. The run and the table go
through attnrec's one experiment runner and renderer (:mod:`attnrec.experiments`).

Seeds: ``[run] seeds = [0, 1, 2]`` (or ``--seeds 0,1,2``, which overrides the config's) runs the
config once per training seed ``k`` (``train.seed = k``; the split is the same for every seed) and
writes ``<name>-seed<k>.json``; a config without seeds writes ``<name>.json`` as before. The table
shows a config's seed runs as one row, mean ± standard deviation over the seeds, linking each file
(:mod:`attnrec.experiments.seeds`).

With ``--state-dir`` the training state (model, optimizer, best weights, early stopping, RNG) is
kept in ``<state-dir>/<run name>/`` (``<name>-seed<k>`` for each seed) after every epoch, and a run
started again with the same state directory resumes exactly where it stopped: a killed run loses at most one
epoch, and a run that ended on its ``time_budget`` continues when the config's budget is raised (the budget
counts the training time of every session). The result's ``train.history`` holds every epoch
of every session, and its fit time is the training loop's clock summed over the sessions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

from attnrec.config import ConfigError
from attnrec.data.schema import DataError
from attnrec.experiments.configured import RunConfig, run_configured, seed_runs
from attnrec.experiments.tables import results_markdown
from provenance import git_sha  # benchmarks/provenance.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "runs"


def run(
    config_path: Path, out_dir: Path = RUNS, progress: bool = False, state_dir: Path | None = None
) -> Path:
    """Train and evaluate one configuration without seeds; write ``<out_dir>/<name>.json``.

    ``state_dir``: keep a resumable training state in ``state_dir/<name>`` (see the module doc).
    """
    paths = run_seeds(config_path, out_dir, progress, state_dir)
    if len(paths) != 1:
        raise ValueError(f"{config_path} names seeds: run it with run_seeds")
    return paths[0]


def run_seeds(
    config_path: Path,
    out_dir: Path = RUNS,
    progress: bool = False,
    state_dir: Path | None = None,
    seeds: list[int] | None = None,
    device: str | None = None,
) -> list[Path]:
    """Train and evaluate a configuration once per seed (``seeds`` overrides the config's); one result each.

    Without seeds it is one run, ``<out_dir>/<name>.json``; with seeds, ``<out_dir>/<name>-seed<k>.json``
    each, resumable apart in ``state_dir/<name>-seed<k>``. ``device`` overrides the config's
    ``train.device``: the same run, under the same name, on another machine (the result records the
    device and the machine).
    """
    sha = git_sha()  # the code that runs, not HEAD at the end
    cfg = RunConfig.from_toml(config_path)
    if device is not None:
        # the config's notes may describe its own machine: say this run was moved
        note = f"run with --device {device} (the config's device: {cfg.train_settings.get('device', 'auto')})"
        cfg = dataclasses.replace(
            cfg,
            train_settings={**cfg.train_settings, "device": device},
            notes=f"{cfg.notes}; {note}" if cfg.notes else note,
        )
    return [
        run_configured(c, root=ROOT, out_dir=out_dir, git_sha=sha, progress=progress, state_dir=state_dir)
        for c in seed_runs(cfg, seeds)
    ]


def table(runs_dir: Path = RUNS, links: str | None = None) -> str:
    """Markdown tables of every result file, grouped by dataset and protocol, with published figures.

    ``links``: the result files' folder as seen from the table (default: ``runs/`` for the committed
    runs, whose table is ``benchmarks/results/README.md``, else the table's own folder).
    """
    results = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*.json"))]
    if links is None:
        links = "runs/" if runs_dir.resolve() == RUNS.resolve() else ""
    return results_markdown(
        results, "python benchmarks/run.py --table", "benchmarks/results/runs/*.json", links
    )


def _seeds(text: str) -> list[int]:
    try:
        return [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are integers separated by commas, not {text!r}") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("configs", nargs="*", type=Path, help="TOML run configs")
    parser.add_argument("--table", action="store_true", help="regenerate benchmarks/results/README.md")
    parser.add_argument(
        "--out",
        type=Path,
        default=RUNS,
        help="where result JSON files go; another folder than the default gets its own README.md table",
    )
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="keep a resumable training state in STATE_DIR/<run name>; resume from it if present",
    )
    parser.add_argument(
        "--seeds",
        type=_seeds,
        default=None,
        help="run each config once per training seed, e.g. 0,1,2 (overrides its [run] seeds)",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="train on this device (cpu, cuda, cuda:1, auto) instead of the config's train.device",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        for c in args.configs:
            for path in run_seeds(
                c.resolve(), args.out, args.progress, args.state_dir, args.seeds, args.device
            ):
                print(path)
    except (ConfigError, DataError, ValueError) as e:  # bad input: one line, no traceback
        raise SystemExit(f"error: {e}") from None
    if args.table or args.configs:  # the committed table is only ever made from the committed runs
        readme = RESULTS / "README.md" if args.out.resolve() == RUNS.resolve() else args.out / "README.md"
        readme.parent.mkdir(parents=True, exist_ok=True)
        readme.write_text(table(args.out))


if __name__ == "__main__":
    main()
