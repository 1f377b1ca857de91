"""Benchmark runner: one TOML config in, one JSON result out; tables generated from result files.

    python benchmarks/run.py benchmarks/configs/ml-1m/sasrec-bce-paper.toml
    python benchmarks/run.py --table            # regenerate benchmarks/results/README.md
    python benchmarks/run.py --state-dir /scratch/state CONFIG.toml   # resumable training

A config has a ``[run]`` table (name, data, data_dir (a named dataset's folder: it brings its feature
files), format, model, preset, split, valid_users,
valid_protocol, protocols, save, notes) and optional ``[model]`` / ``[train]`` tables that
override the preset. Data paths are relative to the repository root. The run and the table go
through attnrec's one experiment runner and renderer (:mod:`attnrec.experiments`).

With ``--state-dir`` the training state (model, optimizer, best weights, early stopping, RNG) is
kept in ``<state-dir>/<run name>/`` after every epoch, and a run started again with the same
state directory resumes exactly where it stopped: a killed run loses at most one epoch, and a
run that ended on its ``time_budget`` continues when the config's budget is raised (the budget
counts the training time of every session). The result's ``train.history`` holds every epoch
of every session, and its fit time is the training loop's clock summed over the sessions.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from attnrec.config import ConfigError
from attnrec.data.schema import DataError
from attnrec.experiments.configured import RunConfig, run_configured
from attnrec.experiments.tables import results_markdown
from provenance import git_sha  # benchmarks/provenance.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RUNS = RESULTS / "runs"


def run(config_path: Path, out_dir: Path = RUNS, progress: bool = False, state_dir: Path | None = None) -> Path:
    """Train and evaluate one configuration; write ``<out_dir>/<name>.json``.

    ``state_dir``: keep a resumable training state in ``state_dir/<name>`` (see the module doc).
    """
    sha = git_sha()  # the code that runs, not HEAD at the end
    return run_configured(RunConfig.from_toml(config_path), root=ROOT, out_dir=out_dir, git_sha=sha,
                          progress=progress, state_dir=state_dir)


def table(runs_dir: Path = RUNS) -> str:
    """Markdown tables of every result file, grouped by dataset and protocol, with published figures."""
    results = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*.json"))]
    return results_markdown(results, "python benchmarks/run.py --table", "benchmarks/results/runs/*.json")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", type=Path, help="TOML run configs")
    parser.add_argument("--table", action="store_true", help="regenerate benchmarks/results/README.md")
    parser.add_argument("--out", type=Path, default=RUNS,
                        help="where result JSON files go; another folder than the default gets its own README.md table")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="keep a resumable training state in STATE_DIR/<run name>; resume from it if present")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        for c in args.configs:
            print(run(c.resolve(), args.out, args.progress, args.state_dir))
    except (ConfigError, DataError, ValueError) as e:  # bad input: one line, no traceback
        raise SystemExit(f"error: {e}") from None
    if args.table or args.configs:  # the committed table is only ever made from the committed runs
        readme = RESULTS / "README.md" if args.out.resolve() == RUNS.resolve() else args.out / "README.md"
        readme.parent.mkdir(parents=True, exist_ok=True)
        readme.write_text(table(args.out))


if __name__ == "__main__":
    main()
