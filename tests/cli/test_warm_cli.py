"""``attnrec train --init-from`` (warm start), ``--split none`` (final fit) and ``--epochs-from``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from cli_runner import run

from attnrec.recommend import Recommender

TINY = ["--set", "hidden=8", "--set", "max_len=12", "--set", "n_layers=1", "--set", "batch_size=64"]
QUIET = ["--set", "threads=1", "--no-progress", "--quiet", "--no-auto"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A cycle log (first part) and the whole log with new users on new items."""
    where = tmp_path_factory.mktemp("logs")
    rows = [(f"u{u}", f"i{(u + t) % 30}", 1000 * u + t) for u in range(80) for t in range(4 + u % 9)]
    new = [(f"n{u}", f"new{(u + t) % 4}", 200_000 + t) for u in range(5) for t in range(6)]
    frame = pd.DataFrame(rows + new, columns=["user", "item", "timestamp"])
    first, everything = where / "first.csv", where / "all.csv"
    frame.iloc[: len(rows) * 4 // 5].to_csv(first, index=False)
    frame.to_csv(everything, index=False)
    return first, everything


@pytest.fixture(scope="module")
def old_model(logs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("old") / "m"
    code, output = run("train", "--data", str(logs[0]), "--out", str(out), *TINY, "--max-epochs", "2", *QUIET)
    assert code == 0, output
    return out


def test_final_fit_warm_started_with_the_best_epoch_of_a_validated_run(
    logs: tuple[Path, Path], old_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "new"
    code, output = run(
        "train",
        "--data",
        str(logs[1]),
        "--out",
        str(out),
        "--init-from",
        str(old_model),
        "--split",
        "none",
        "--epochs-from",
        str(old_model),
        *QUIET,
    )
    assert code == 0, output
    assert "final fit" in output
    old, new = Recommender.load(old_model), Recommender.load(out)
    best = json.loads((old_model / "config.json").read_text())["train_result"]["best_epoch"]
    assert new.train_result_ is not None and new.train_result_.epochs == best
    assert (
        old.items_ is not None
        and new.items_ is not None
        and old.users_ is not None
        and new.users_ is not None
    )
    assert new.items_.to_list()[: len(old.items_)] == old.items_.to_list()
    assert new.users_.to_list()[: len(old.users_)] == old.users_.to_list()
    assert new.config == old.config
    assert set(new.recommend(user="n1", k=40, exclude_seen=False).items) >= {f"new{i}" for i in range(4)}


def test_warm_start_resumes_exactly(logs: tuple[Path, Path], old_model: Path, tmp_path: Path) -> None:
    out, args = tmp_path / "new", ["--data", str(logs[1]), "--init-from", str(old_model), *QUIET]
    assert run("train", *args, "--out", str(out), "--max-epochs", "1")[0] == 0
    code, output = run("train", *args, "--out", str(out), "--max-epochs", "2", "--resume")
    assert code == 0, output
    assert run("train", *args, "--out", str(tmp_path / "straight"), "--max-epochs", "2")[0] == 0
    resumed = json.loads((out / "config.json").read_text())["train_result"]["history"]
    straight = json.loads((tmp_path / "straight" / "config.json").read_text())["train_result"]["history"]
    assert [r["loss"] for r in resumed] == pytest.approx([r["loss"] for r in straight], rel=1e-6)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "bert4rec"], "a sasrec model; a bert4rec model cannot start from it"),
        (["--set", "hidden=16"], r"hidden=16 \(the old model has 8\)"),
        (["--epochs-from", "OLD", "--max-epochs", "3"], "give one"),
    ],
)
def test_warm_start_refusals_are_one_line(
    logs: tuple[Path, Path], old_model: Path, tmp_path: Path, extra: list[str], message: str
) -> None:
    extra = [str(old_model) if e == "OLD" else e for e in extra]
    code, output = run(
        "train",
        "--data",
        str(logs[1]),
        "--out",
        str(tmp_path / "x"),
        "--init-from",
        str(old_model),
        *extra,
        *QUIET,
    )
    assert code == 2, output
    assert len(re.findall(message, " ".join(output.split()))) == 1, output


def test_epochs_from_a_model_without_validation_is_refused(
    logs: tuple[Path, Path], old_model: Path, tmp_path: Path
) -> None:
    final = tmp_path / "final"
    assert (
        run(
            "train",
            "--data",
            str(logs[0]),
            "--out",
            str(final),
            *TINY,
            "--split",
            "none",
            "--max-epochs",
            "1",
            *QUIET,
        )[0]
        == 0
    )
    code, output = run(
        "train", "--data", str(logs[0]), "--out", str(tmp_path / "x"), "--epochs-from", str(final), *QUIET
    )
    assert code == 2 and "no validated best epoch" in output, output


def test_a_final_fit_refuses_the_options_of_a_held_out_split(logs: tuple[Path, Path], tmp_path: Path) -> None:
    code, output = run(
        "train",
        "--data",
        str(logs[0]),
        "--out",
        str(tmp_path / "x"),
        "--split",
        "none",
        "--valid-users",
        "5",
        "--protocol",
        "sampled-uniform",
        *QUIET,
    )
    assert code == 2 and "drop --valid-users, --protocol" in " ".join(output.split()), output


@pytest.mark.parametrize("rows", ["histories", "initial"])
def test_new_item_rows_reach_the_warm_start(
    logs: tuple[Path, Path], old_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: str
) -> None:
    from attnrec.recommend import warm

    seeded: list[int] = []
    seed = warm.seed_new_items
    monkeypatch.setattr(warm, "seed_new_items", lambda *a, **k: seeded.append(seed(*a, **k)) or 0)
    args = ["--init-from", str(old_model), "--split", "none", "--max-epochs", "1", "--new-item-rows", rows]
    code, output = run("train", "--data", str(logs[1]), "--out", str(tmp_path / "m"), *args, *QUIET)
    assert code == 0, output
    assert seeded == ([4] if rows == "histories" else [])  # new0..new3 followed histories; initial: none


def test_seeded_rows_without_a_warm_start_are_refused_before_reading_the_data(tmp_path: Path) -> None:
    code, output = run(
        "train", "--data", str(tmp_path / "absent.csv"), "--new-item-rows", "histories", *QUIET
    )
    assert (
        code == 2
        and "--new-item-rows histories seeds the new items of a warm start: add --init-from" in output
    )
