"""The context-gains report (benchmarks/context_gains.py) on tiny result files written here: mean, sample
standard deviation and relative gain by hand, a missing run listed as not run yet, the verdict against the
seed spread, one-seed runs, incomparable protocols, and the markdown and plot written end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from bench_scripts import load

gains = load("context_gains")

PROTOCOL_TEXT = (
    "test on toy (sha256 abc), split leave-one-out, 3 users, full ranking over all items, history excluded"
)


def record(
    name: str,
    ndcg: float,
    seed: int | None = None,
    *,
    sha: str = "abc",
    split: str = "leave-one-out",
    epochs: int = 10,
    best: int = 9,
    stopped: str = "time budget of 180s reached",
) -> dict[str, Any]:
    """A result record with the keys the report reads."""
    group = name if seed is None else name.rsplit("-seed", 1)[0]
    r: dict[str, Any] = {
        "name": name,
        "valid_protocol": "full ranking over all items, history excluded",
        "git_sha": "0" * 40,
        "finished": "2026-01-01T00:00:00Z",
        "split": split,
        "train": {"epochs": epochs, "best_epoch": best, "stopped": stopped},
        "evaluations": {
            "full": {
                "metrics": {"NDCG@10": ndcg, "HR@10": 2 * ndcg},
                "split": split,
                "n_cases": 3,
                "protocol": {"candidates": "full", "exclude_seen": True, "seed": 0},
                "data": {"name": "toy", "sha256": sha},
                "protocol_text": PROTOCOL_TEXT.replace("leave-one-out", split),
            }
        },
    }
    if seed is not None:
        r["seed_run"] = {"group": group, "seed": seed, "varies": "the training seed"}
    return r


def write_runs(runs: Path, name: str, values: list[float], **kw: Any) -> None:
    """``<name>-seed<k>.json`` per value (several), or ``<name>.json`` (one value and ``seeded=False``)."""
    runs.mkdir(parents=True, exist_ok=True)
    if not kw.pop("seeded", True):
        (runs / f"{name}.json").write_text(json.dumps(record(name, values[0], **kw)))
        return
    for k, v in enumerate(values):
        (runs / f"{name}-seed{k}.json").write_text(json.dumps(record(f"{name}-seed{k}", v, k, **kw)))


def comparison(**kw: Any) -> Any:
    return gains.Comparison(dataset="toy", what="time", baseline="toy-ce", variant="toy-ce-time", **kw)


def test_mean_std_and_gain_by_hand(tmp_path: Path) -> None:
    write_runs(tmp_path, "toy-ce", [0.10, 0.12, 0.14])
    write_runs(tmp_path, "toy-ce-time", [0.15, 0.16, 0.17])
    r = gains.compare(comparison(), tmp_path)
    assert r.status == "ok"
    assert r.baseline.spread.mean == pytest.approx(0.12)
    assert r.baseline.spread.std == pytest.approx(0.02), "sample std: sqrt((0.02^2 + 0 + 0.02^2) / 2)"
    assert r.variant.spread.mean == pytest.approx(0.16)
    assert r.variant.spread.std == pytest.approx(0.01)
    assert r.gain == pytest.approx(100 * 0.04 / 0.12), "(0.16 - 0.12) / 0.12 = +33.3%"
    assert r.gain_error == pytest.approx(100 * 0.02 / 0.12), "the larger std as a share of the baseline mean"
    assert r.beyond_spread is True and r.verdict() == "yes", "|0.04| > max(0.02, 0.01)"


def test_verdict_flips_when_the_spread_is_larger_than_the_difference(tmp_path: Path) -> None:
    write_runs(tmp_path / "narrow", "toy-ce", [0.11, 0.12, 0.13])  # std 0.01
    write_runs(tmp_path / "narrow", "toy-ce-time", [0.13, 0.14, 0.15])  # mean difference 0.02
    write_runs(tmp_path / "wide", "toy-ce", [0.09, 0.12, 0.15])  # std 0.03, same mean
    write_runs(tmp_path / "wide", "toy-ce-time", [0.13, 0.14, 0.15])
    narrow, wide = (gains.compare(comparison(), tmp_path / d) for d in ("narrow", "wide"))
    assert narrow.gain == pytest.approx(wide.gain) == pytest.approx(100 * 0.02 / 0.12), "the same means"
    assert narrow.verdict() == "yes"
    assert wide.verdict() == "no", "|0.02| < std 0.03 of the baseline"
    loss = gains.beyond_seed_spread(gains.spread([0.15, 0.16, 0.17]), gains.spread([0.10, 0.12, 0.14]))
    assert loss is True, "a loss beyond the spread counts as well (absolute difference)"


def test_missing_runs_are_not_run_yet(tmp_path: Path) -> None:
    write_runs(tmp_path, "toy-ce", [0.10, 0.12])
    r = gains.compare(comparison(), tmp_path)
    assert r.variant is None and r.status == "not run yet: variant"
    assert r.gain is None and r.verdict() == "not run yet: variant"
    both = gains.compare(gains.Comparison("toy", "events", "nope", "nope-events"), tmp_path)
    assert both.status == "not run yet: baseline and variant"
    md = gains.markdown([r, both])
    assert "| `toy-ce-time` | not run yet |" in md and "not run yet: baseline and variant" in md
    assert "no result file yet" in md


def test_seed_files_of_another_config_are_not_read(tmp_path: Path) -> None:
    write_runs(tmp_path, "toy-ce", [0.10, 0.12])
    write_runs(tmp_path, "toy-ce-time", [0.5, 0.5, 0.5])  # "toy-ce-time-seed0" must not count as "toy-ce"
    assert [r["name"] for r in gains.run_records(tmp_path, "toy-ce")] == ["toy-ce-seed0", "toy-ce-seed1"]


def test_a_run_without_seeds_is_one_seed(tmp_path: Path) -> None:
    write_runs(tmp_path, "toy-ce", [0.10], seeded=False)
    write_runs(tmp_path, "toy-ce-time", [0.11], seeded=False)
    r = gains.compare(comparison(), tmp_path)
    assert r.baseline.spread.n == 1 and math.isnan(r.baseline.spread.std)
    assert r.baseline.text() == "0.1000 (1 seed)"
    assert r.gain == pytest.approx(10.0) and r.gain_error is None
    assert r.beyond_spread is None and r.verdict().startswith("n/a: one seed each")
    write_runs(tmp_path / "half", "toy-ce", [0.10], seeded=False)
    write_runs(tmp_path / "half", "toy-ce-time", [0.12, 0.13, 0.14])
    half = gains.compare(comparison(), tmp_path / "half")
    assert half.verdict() == "yes", "|0.13 - 0.10| > 0.01, the only std there is"


def test_different_data_or_split_is_not_comparable(tmp_path: Path) -> None:
    write_runs(tmp_path, "toy-ce", [0.10, 0.12])
    write_runs(tmp_path, "toy-ce-time", [0.15, 0.16], split="last-qualifying (min_rating=4)", sha="def")
    r = gains.compare(comparison(), tmp_path)
    assert r.status == "not comparable: data sha256 differs, split differs"
    assert r.gain is None and r.beyond_spread is None


def test_config_metric_and_unknown_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[comparison]]\ndataset = "toy"\nwhat = "time"\nbaseline = "toy-ce"\nvariant = "toy-ce-time"\n'
        'metric = "HR@10"\n\n[[comparison]]\ndataset = "toy"\nwhat = "x"\nbaseline = "a"\nvariant = "b"\n'
    )
    first, second = gains.load_config(cfg)
    assert first.metric == "HR@10" and second.metric == "NDCG@10" and second.protocol == "full"
    write_runs(tmp_path / "runs", "toy-ce", [0.10, 0.12])
    write_runs(tmp_path / "runs", "toy-ce-time", [0.15, 0.16])
    assert gains.compare(first, tmp_path / "runs").baseline.spread.mean == pytest.approx(0.22), (
        "HR@10 = 2 x NDCG"
    )
    cfg.write_text(
        '[[comparison]]\ndataset = "toy"\nwhat = "x"\nbaseline = "a"\nvariant = "b"\nmetrc = "MRR"\n'
    )
    with pytest.raises(ValueError, match="unknown keys"):
        gains.load_config(cfg)


def test_still_improving_when_stopped() -> None:
    assert gains.still_rising({"epochs": 48, "best_epoch": 47, "stopped": "time budget of 180s reached"})
    assert not gains.still_rising({"epochs": 48, "best_epoch": 40, "stopped": "time budget of 180s reached"})
    assert not gains.still_rising({"epochs": 48, "best_epoch": 48, "stopped": "no validation improvement"})


def test_main_writes_the_report_and_the_plot(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_runs(runs, "toy-ce", [0.10, 0.12, 0.14])
    write_runs(runs, "toy-ce-time", [0.15, 0.16, 0.17])
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        '[[comparison]]\ndataset = "toy"\nwhat = "time"\nbaseline = "toy-ce"\nvariant = "toy-ce-time"\n'
        'note = "a note"\n\n[[comparison]]\ndataset = "toy"\nwhat = "events"\nbaseline = "toy-ce"\n'
        'variant = "toy-ce-events"\n'
    )
    md, png = tmp_path / "out" / "gains.md", tmp_path / "out" / "gains.png"
    gains.main(["--config", str(cfg), "--runs", str(runs), "--md", str(md), "--png", str(png)])
    text = md.read_text()
    assert text.startswith("<!-- generated by `python benchmarks/context_gains.py`")
    assert "| 0.1200 ± 0.0200 (3 seeds) |" in text and "| 0.1600 ± 0.0100 (3 seeds) |" in text
    assert "| +33.3% ± 16.7% | yes |" in text
    assert "not run yet: variant" in text and "Note: a note" in text
    assert PROTOCOL_TEXT in text, "the split and protocol as the result files record them"
    assert "3 of 3 still improving when stopped" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
