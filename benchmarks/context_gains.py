"""The context-input gains of issue #19: each ID-only run beside the same run with one kind of context input.

    # -> benchmarks/results/context_gains.md, docs/img/context-gains.png
    python benchmarks/context_gains.py
    python benchmarks/context_gains.py --config benchmarks/configs/context-gains.toml \
        --runs benchmarks/results/runs

The comparisons are listed in ``benchmarks/configs/context-gains.toml`` (``[[comparison]]``: dataset,
what, baseline and variant run names, metric, protocol); this script only reads the result files the
benchmark runner wrote (``benchmarks/run.py``): ``<name>-seed<k>.json`` per seed of a seeded config,
``<name>.json`` otherwise (one seed). Per comparison it reports the metric's mean ± sample standard
deviation (n - 1) over the seeds of each side (:func:`attnrec.experiments.seeds.spread`), the relative
gain of the variant's mean over the baseline's, and whether the difference is beyond the seed spread:

    |mean(variant) - mean(baseline)| > max(std(baseline), std(variant))

(the larger of the two seed standard deviations; a side with one seed has none, and with one seed on
both sides there is no verdict). The plot draws each gain with an error bar of that larger standard
deviation as a share of the baseline's mean, so a bar clear of zero is a difference beyond the spread.
A comparison whose result files are missing is "not run yet"; one whose two sides were evaluated on
different data, splits or protocols is "not comparable" and has no gain.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from attnrec.evaluation.protocol import labelled_protocol_text
from attnrec.experiments.seeds import SEED_KEY, Spread, spread
from provenance import ROOT, git_sha  # benchmarks/provenance.py, beside this script

Record = Mapping[str, Any]  # a result record as read back from its JSON file
CONFIG = ROOT / "benchmarks" / "configs" / "context-gains.toml"
RUNS = ROOT / "benchmarks" / "results" / "runs"
OUT_MD = ROOT / "benchmarks" / "results" / "context_gains.md"
OUT_PNG = ROOT / "docs" / "img" / "context-gains.png"
COMMAND = "python benchmarks/context_gains.py"
RULE = (
    "|mean(variant) - mean(baseline)| > max(std(baseline), std(variant)), the larger of the two sample "
    "standard deviations over seeds; a side with one seed has no standard deviation, and one seed on both "
    "sides gives no verdict"
)


class Comparison(NamedTuple):  # named tuples, not dataclasses: the tests load this script outside sys.modules
    """One row of the config: an ID-only run (``baseline``) and the same run with a context input
    (``variant``)."""

    dataset: str
    what: str
    baseline: str
    variant: str
    metric: str = "NDCG@10"
    protocol: str = "full"
    note: str = ""


class Side(NamedTuple):
    """The seed runs of one config: their records, their evaluations under the protocol and the metric's
    spread."""

    name: str
    records: tuple[Record, ...]
    evaluations: tuple[Record, ...]
    spread: Spread

    def text(self) -> str:
        """``mean ± std (n seeds)``; a single run as its value with ``(1 seed)``."""
        return f"{self.spread.text()} ({self.spread.n} seed{'s' if self.spread.n > 1 else ''})"

    def epochs(self) -> str:
        """Epochs and best epoch per seed, and why the runs stopped, e.g.
        ``48/49 (best 47/49), time budget...``."""
        trs = [r.get("train") or {} for r in self.records]
        stops = list(dict.fromkeys(str(t.get("stopped", "?")) for t in trs))
        rising = sum(still_rising(t) for t in trs)
        return (
            "/".join(str(t.get("epochs", "?")) for t in trs)
            + " (best "
            + "/".join(str(t.get("best_epoch", "?")) for t in trs)
            + "), stopped: "
            + "; ".join(stops)
            + (f"; {rising} of {len(trs)} still improving when stopped" if rising else "")
        )


class Result(NamedTuple):
    """A comparison with what its result files hold: each side (None: not run yet) and a reason not to
    compare."""

    comparison: Comparison
    baseline: Side | None
    variant: Side | None
    mismatch: str = ""  # why the two sides' figures are not comparable; empty when they are

    @property
    def status(self) -> str:
        """``ok``, ``not run yet: <names>`` or ``not comparable: <reason>``."""
        missing = [c for c, s in (("baseline", self.baseline), ("variant", self.variant)) if s is None]
        if missing:
            return "not run yet: " + " and ".join(missing)
        return f"not comparable: {self.mismatch}" if self.mismatch else "ok"

    def _spreads(self) -> tuple[Spread, Spread] | None:
        """(baseline, variant) spreads when both ran and are comparable, else None."""
        if self.status != "ok" or self.baseline is None or self.variant is None:
            return None
        return self.baseline.spread, self.variant.spread

    @property
    def gain(self) -> float | None:
        """The variant's mean relative to the baseline's, in %; None unless both ran and are comparable."""
        pair = self._spreads()
        return None if pair is None else relative_gain(*pair)

    @property
    def gain_error(self) -> float | None:
        """The larger seed standard deviation as a share of the baseline's mean, in %; None without one."""
        pair = self._spreads()
        t = None if pair is None else threshold(*pair)
        return None if pair is None or t is None else 100 * t / pair[0].mean

    @property
    def beyond_spread(self) -> bool | None:
        """Whether the difference is beyond the seed spread (:func:`beyond_seed_spread`); None without a
        verdict."""
        pair = self._spreads()
        return None if pair is None else beyond_seed_spread(*pair)

    def verdict(self) -> str:
        """The table's cell: yes / no / n/a with why."""
        if self.status != "ok":
            return self.status
        b = self.beyond_spread
        if b is None:
            return "n/a: one seed each, no seed spread"
        return "yes" if b else "no"


def still_rising(train: Record, last: int = 2) -> bool:
    """Whether a run stopped by its time budget had its best validation epoch among its ``last`` epochs."""
    stopped = str(train.get("stopped", ""))
    epochs, best = train.get("epochs"), train.get("best_epoch")
    return "time budget" in stopped and epochs is not None and best is not None and best > epochs - last


# -- the numbers ---------------------------------------------------------------------------------------
def relative_gain(baseline: Spread, variant: Spread) -> float:
    """``100 * (mean(variant) - mean(baseline)) / mean(baseline)``: the gain in % of the baseline."""
    return 100 * (variant.mean - baseline.mean) / baseline.mean


def threshold(baseline: Spread, variant: Spread) -> float | None:
    """The larger of the two sides' seed standard deviations (a one-seed side has none); None if neither has
    one."""
    stds = [s.std for s in (baseline, variant) if s.n > 1 and not math.isnan(s.std)]
    return max(stds) if stds else None


def beyond_seed_spread(baseline: Spread, variant: Spread) -> bool | None:
    """``|mean difference| > the larger seed standard deviation`` (:func:`threshold`); None without a
    spread."""
    t = threshold(baseline, variant)
    return None if t is None else abs(variant.mean - baseline.mean) > t


# -- reading ----------------------------------------------------------------------------------------------
def load_config(path: Path) -> list[Comparison]:
    """The ``[[comparison]]`` tables of ``path``."""
    cfg = tomllib.loads(path.read_text())
    fields = set(Comparison._fields)
    out = []
    for i, c in enumerate(cfg.get("comparison", [])):
        unknown = set(c) - fields
        if unknown:
            raise ValueError(
                f"{path}: comparison {i + 1} has unknown keys {sorted(unknown)} (known: {sorted(fields)})"
            )
        out.append(Comparison(**c))
    return out


def run_records(runs_dir: Path, name: str) -> list[Record]:
    """The result records of run ``name``: its seed runs ``<name>-seed<k>.json`` by seed, else
    ``<name>.json``."""
    pattern = re.compile(re.escape(name) + r"-seed(\d+)\.json")
    seeded = sorted(
        (int(m.group(1)), p) for p in runs_dir.glob(f"{name}-seed*.json") if (m := pattern.fullmatch(p.name))
    )
    records = [json.loads(p.read_text()) for _, p in seeded]
    records = [r for r in records if (r.get(SEED_KEY) or {}).get("group", name) == name]
    if records:
        return records
    single = runs_dir / f"{name}.json"
    return [json.loads(single.read_text())] if single.exists() else []


def side(name: str, records: Sequence[Record], metric: str, protocol: str) -> Side | None:
    """The runs' metric under ``protocol`` as a :class:`Side`; None without runs. A run lacking either
    fails."""
    if not records:
        return None
    evs = []
    for r in records:
        ev = r["evaluations"].get(protocol)
        if ev is None or metric not in ev["metrics"]:
            raise ValueError(
                f"{r['name']}: no {metric} under protocol {protocol!r} "
                f"(protocols: {sorted(r['evaluations'])})"
            )
        evs.append(ev)
    return Side(name, tuple(records), tuple(evs), spread([e["metrics"][metric] for e in evs]))


def _setting(ev: Record) -> dict[str, Any]:
    """What must be equal for two evaluations' figures to be compared: data file, split, test cases,
    protocol."""
    p = {k: v for k, v in ev["protocol"].items() if k != "seed"}
    return {
        "data sha256": ev["data"]["sha256"],
        "split": ev["split"],
        "test cases": ev["n_cases"],
        "protocol": p,
    }


def mismatch(baseline: Side, variant: Side) -> str:
    """Why the evaluations of the two sides (every seed) are not comparable; empty when they are."""
    settings = [_setting(e) for e in (*baseline.evaluations, *variant.evaluations)]
    diff = [k for k in settings[0] if any(s[k] != settings[0][k] for s in settings[1:])]
    return ", ".join(f"{k} differs" for k in diff)


def compare(c: Comparison, runs_dir: Path) -> Result:
    """The comparison's :class:`Result` from the result files in ``runs_dir``."""
    b = side(c.baseline, run_records(runs_dir, c.baseline), c.metric, c.protocol)
    v = side(c.variant, run_records(runs_dir, c.variant), c.metric, c.protocol)
    return Result(c, b, v, mismatch(b, v) if b is not None and v is not None else "")


# -- writing ------------------------------------------------------------------------------------------------
def _pct(x: float | None, signed: bool = True) -> str:
    return "" if x is None else (f"{x:+.1f}%" if signed else f"{x:.1f}%")


def _row(r: Result) -> str:
    c = r.comparison
    b = r.baseline.text() if r.baseline else "not run yet"
    v = r.variant.text() if r.variant else "not run yet"
    gain = (
        "" if r.gain is None else _pct(r.gain) + (f" ± {_pct(r.gain_error, False)}" if r.gain_error else "")
    )
    epochs = "; ".join(
        f"{label}: {s.epochs()}"
        for label, s in (("baseline", r.baseline), ("variant", r.variant))
        if s is not None
    )
    return (
        f"| {c.dataset} | {c.what} | `{c.baseline}` | {b} | `{c.variant}` | {v} | {c.metric} | {gain} "
        f"| {r.verdict()} | {epochs} |"
    )


def _protocols(r: Result) -> str:
    """The split and protocol of the figures, as the result files record them (each distinct text once)."""
    sides = [s for s in (r.baseline, r.variant) if s is not None]
    texts = list(
        dict.fromkeys(labelled_protocol_text(e["protocol_text"]) for s in sides for e in s.evaluations)
    )
    valid = list(dict.fromkeys(str(x.get("valid_protocol", "?")) for s in sides for x in s.records))
    if not texts:
        return "no result file yet"
    return "; ".join(texts) + f" (model selection on validation: {'; '.join(valid)})"


def _run_files(s: Side) -> str:
    return ", ".join(
        f"[{x['name']}](runs/{x['name']}.json) (git {str(x.get('git_sha', '?'))[:10]}, "
        f"{x.get('finished', '?')})"
        for x in s.records
    )


def markdown(
    results: Sequence[Result],
    config: str = "benchmarks/configs/context-gains.toml",
    runs: str = "benchmarks/results/runs",
    code: str = "",
) -> str:
    """The report: how to read it, one table row per comparison, then each one's protocol, note and files."""
    lines = [
        f"<!-- generated by `{COMMAND}` from {config} and {runs}/*.json; do not edit -->",
        "# Context inputs vs ID-only runs (issue #19)",
        "",
        "Each row: an ID-only SASRec run (baseline) and the same configuration with one kind of context "
        "input (variant), test figures. Values: the metric's mean ± sample standard deviation (n - 1) over "
        "the training seeds (the seed changes the training only; the split is the same for every seed); a "
        "run without seeds counts as one seed (no standard deviation). Gain: (variant mean - baseline mean) "
        "/ baseline mean, ± the larger seed standard deviation in % of the baseline mean. Beyond the seed "
        f"spread: {RULE}. Protocol of each row (split, test users, full ranking, history excluded) as its "
        "result files record it: see below. Epochs: per seed, with the best (validation) epoch; still "
        "improving when stopped: a run stopped by its time budget whose best epoch was one of its last two. "
        "Runs not yet in the results directory are listed as not run yet."
        + (f" Generated at code {code[:12]}." if code else ""),
        "",
        "| dataset | context input | baseline | baseline value | variant | variant value | metric | gain "
        "| beyond the seed spread? | epochs (best), stop |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(r) for r in results]
    lines += ["", "## Protocols, notes and result files", ""]
    for r in results:
        c = r.comparison
        lines.append(
            f"- **{c.dataset}, {c.what}** ({c.protocol}): {_protocols(r)}."
            + (f" Note: {c.note.strip()}" if c.note else "")
        )
        for label, s in (("baseline", r.baseline), ("variant", r.variant)):
            if s is not None:
                lines.append(f"  - {label}: {_run_files(s)}")
    return "\n".join(lines) + "\n"


def plot(results: Sequence[Result], path: Path) -> Path:
    """One horizontal bar per comparison: the gain in %, error bar ± the larger seed std; missing runs
    named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.6 * len(results) + 1.6))
    ys = list(range(len(results)))[::-1]  # the config's first comparison on top
    labels = []
    for y, r in zip(ys, results, strict=True):
        c = r.comparison
        n = f"{r.baseline.spread.n} vs {r.variant.spread.n} seeds" if r.baseline and r.variant else ""
        labels.append(f"{c.dataset}: {c.what}\n{c.metric}" + (f", {n}" if n else ""))
        if r.gain is None:
            ax.text(0, y, f"  {r.status}", va="center", ha="left", fontsize=8, color="0.4", style="italic")
            continue
        beyond = r.beyond_spread
        color = "0.6" if not beyond else ("tab:green" if r.gain > 0 else "tab:red")
        ax.barh(
            y,
            r.gain,
            color=color,
            height=0.6,
            xerr=r.gain_error,
            capsize=4,
            hatch="//" if beyond is None else None,
            edgecolor="0.3",
        )
        ax.text(r.gain, y + 0.33, f"{r.gain:+.1f}%", ha="center", va="bottom", fontsize=8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlabel("gain of the variant's mean over the ID-only mean (%)")
    ax.set_title(
        "Context inputs vs ID-only SASRec (test, full ranking, history excluded)\n"
        "error bars: ± the larger seed std; green / red: beyond the seed spread,\n"
        "grey: within it, hatched: one seed each (no spread)",
        fontsize=9,
    )
    ax.grid(axis="x", alpha=0.3)
    lo, hi = ax.get_xlim()
    ax.set_xlim(min(lo, -5), max(hi, 5))  # room for the "not run yet" labels
    ax.set_ylim(-0.7, len(results) - 0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--config", type=Path, default=CONFIG, help="the comparisons (TOML, [[comparison]] tables)"
    )
    p.add_argument("--runs", type=Path, default=RUNS, help="the result files of benchmarks/run.py")
    p.add_argument("--md", type=Path, default=OUT_MD, help="the report to write")
    p.add_argument("--png", type=Path, default=OUT_PNG, help="the plot to write")
    args = p.parse_args(argv)
    results = [compare(c, args.runs) for c in load_config(args.config)]
    args.md.parent.mkdir(parents=True, exist_ok=True)
    args.md.write_text(markdown(results, _rel(args.config), _rel(args.runs), git_sha()))
    plot(results, args.png)
    for r in results:
        print(
            f"{r.comparison.dataset}, {r.comparison.what}: {r.verdict()}"
            + (f" ({_pct(r.gain)})" if r.gain else "")
        )
    print(f"wrote {args.md} and {args.png}")


if __name__ == "__main__":
    main()
