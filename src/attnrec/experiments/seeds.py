"""Runs of one config under several training seeds: their names, their record, their mean and spread.

A benchmark config with ``[run] seeds = [0, 1, 2]`` (or ``benchmarks/run.py --seeds 0,1,2``) is
run once per seed as ``<name>-seed<k>``, with ``train.seed = k``; the seed changes the training
only (model initialisation, batch order, sampled negatives, dropout), never the split. The
results table shows the runs of one config as one row: the mean and the sample standard deviation
(n - 1) of each metric over the seeds (:func:`spread`, :func:`metric_spreads`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Record = Mapping[str, Any]  # a result record as read back from its JSON file
SEED_KEY = "seed_run"  # the result record's key naming the config (group) and seed of a seeded run
SEED_VARIES = (
    "the training seed (train.seed): model initialisation, batch order, sampled negatives and dropout; "
    "the split (and any seeded validation-user sample or cold-item draw) is the same for every seed"
)


@dataclass(frozen=True)
class Spread:
    """A metric over seeds: mean, sample standard deviation (n - 1; NaN for one value) and count."""

    mean: float
    std: float
    n: int

    def text(self) -> str:
        """``mean ± std`` to four decimals; a single value alone."""
        return f"{self.mean:.4f}" if self.n < 2 else f"{self.mean:.4f} ± {self.std:.4f}"


def spread(values: Sequence[float]) -> Spread:
    """Mean and sample standard deviation (divided by n - 1) of ``values``; one value has no spread (NaN)."""
    if not values:
        raise ValueError("spread of no values")
    n = len(values)
    mean = math.fsum(values) / n
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else float("nan")
    return Spread(mean, std, n)


def metric_spreads(metrics: Sequence[Mapping[str, float]]) -> dict[str, Spread]:
    """Per metric present in every one of ``metrics`` (one dict per seed): its :class:`Spread`."""
    shared = set(metrics[0]).intersection(*metrics[1:]) if metrics else set()
    return {k: spread([m[k] for m in metrics]) for k in metrics[0] if k in shared} if metrics else {}


def seeded_name(name: str, seed: int) -> str:
    """The run (and result file stem) of config ``name`` under training seed ``seed``."""
    return f"{name}-seed{seed}"


def seed_record(group: str, seed: int) -> dict[str, Any]:
    """The ``seed_run`` entry of a seeded run's result record: its config, its seed and what the seed
    varies."""
    return {"group": group, "seed": seed, "varies": SEED_VARIES}


def group_seed_runs(rows: Sequence[tuple[Record, Record]]) -> list[list[tuple[Record, Record]]]:
    """``(record, evaluation)`` rows with the runs of one seeded config together, at its first run's place.

    A run without a ``seed_run`` entry is a group of its own; a seeded group is ordered by seed.
    """
    groups: list[list[tuple[Record, Record]]] = []
    index: dict[str, int] = {}
    for row in rows:
        group = (row[0].get(SEED_KEY) or {}).get("group")
        if group is None:
            groups.append([row])
        elif group in index:
            groups[index[group]].append(row)
        else:
            index[group] = len(groups)
            groups.append([row])
    return [
        sorted(g, key=lambda row: row[0][SEED_KEY]["seed"]) if g[0][0].get(SEED_KEY) else g for g in groups
    ]
