"""The ``attnrec`` command line: train -> evaluate -> recommend on tiny data, help, and bad input.

Every bad input must end with exit code 2, one clear message and no traceback. Answers printed by
the CLI must equal those of the Python API for the same input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import attnrec
from attnrec.cli.main import app
from attnrec.config import ConfigError, resolve_overrides
from attnrec.data.readers.lines import read_pairs
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import Protocol
from attnrec.models.sasrec import SASRecConfig
from attnrec.training.train_config import TrainConfig

runner = CliRunner()
TINY = [
    "--set",
    "hidden=8",
    "--set",
    "max_len=12",
    "--set",
    "n_layers=1",
    "--set",
    "max_epochs=1",
    "--set",
    "batch_size=64",
    "--set",
    "threads=1",
    "--no-progress",
    "--quiet",
]


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    # Exit codes come from typer.Exit/SystemExit only: any other exception is a crash.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def fails(*args: str) -> str:
    code, output = run(*args)
    assert code == 2, output
    assert "error" in output.lower()
    return output


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120 users walking a 40-item cycle: the next item is the current one + 1."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("data") / "pairs.txt"
    lines = []
    for u in range(1, 121):
        start = int(rng.integers(0, 40))
        lines += [f"u{u} i{(start + t) % 40 + 1}" for t in range(int(rng.integers(5, 20)))]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def model_dir(pairs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "m"
    code, output = run("train", "--data", str(pairs), "--out", str(out), *TINY)
    assert code == 0, output
    return out


# -- the happy path --------------------------------------------------------------------------------
def test_train_saves_a_checkpoint_and_reports_protocol(pairs: Path, model_dir: Path) -> None:
    for name in ("config.json", "weights.safetensors", "arrays.safetensors", "id_maps.json"):
        assert (model_dir / name).is_file()
    meta = json.loads((model_dir / "config.json").read_text())
    assert meta["model_config"]["hidden"] == 8 and meta["train_config"]["max_epochs"] == 1
    assert meta["data"]["sha256"] == read_pairs(pairs).source.sha256
    assert meta["evaluations"][0]["target"] == "test"


def test_train_output(pairs: Path, tmp_path: Path) -> None:
    code, output = run(
        "train",
        "--data",
        str(pairs),
        "--out",
        str(tmp_path / "m"),
        *TINY,
        "--protocol",
        "sampled-uniform",
        "--negatives",
        "10",
    )
    assert code == 0, output
    assert "best epoch 1" in output and "s/epoch" in output
    assert "full ranking over all items" in output and "10 uniform-sampled negatives" in output
    assert "NDCG@10" in output and "popularity" in output
    assert "split leave-one-out" in output and "sha256" in output


def test_toml_config_and_set_overrides(pairs: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[model]\nhidden = 16\nloss = "ce"\n[train]\nlr = 0.01\nbatch_size = 32\n')
    code, output = run(
        "train",
        "--data",
        str(pairs),
        "--out",
        str(tmp_path / "m"),
        "--config",
        str(cfg),
        *TINY,
        "--set",
        "train.lr=0.005",
        "--seed",
        "3",
    )
    assert code == 0, output
    meta = json.loads((tmp_path / "m" / "config.json").read_text())
    # TOML < --set < explicit flags; TINY's hidden=8 overrides the file's 16.
    assert meta["model_config"]["hidden"] == 8 and meta["model_config"]["loss"] == "ce"
    assert meta["train_config"]["lr"] == 0.005 and meta["train_config"]["batch_size"] == 64
    assert meta["train_config"]["seed"] == 3


def test_resume_continues_from_the_saved_state(pairs: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    assert run("train", "--data", str(pairs), "--out", str(out), *TINY)[0] == 0
    assert (out / "train_state" / "train_state.json").is_file()
    first = json.loads((out / "config.json").read_text())["train_result"]
    code, output = run(
        "train", "--data", str(pairs), "--out", str(out), *TINY, "--max-epochs", "2", "--resume"
    )
    assert code == 0, output
    resumed = json.loads((out / "config.json").read_text())["train_result"]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]
    # Epoch 1 is the first run's, not a retrained one: a restart would time it anew (same seed, same loss).
    assert resumed["history"][0] == first["history"][0]
    assert resumed["history"][0]["train_seconds"] > 0


def test_demo_data_with_temporal_split(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    code, output = run(
        "train", "--data", "demo", "--split", "temporal", "--out", str(out), *TINY, "--no-baseline"
    )
    assert code == 0, output
    assert "split temporal" in output and "on demo" in output
    code, output = run("evaluate", "--model", str(out), "--data", "demo", "--target", "valid")
    assert code == 0, output
    assert "valid on demo" in output and "split temporal" in output  # the split the model was tested on


def test_validation_on_sampled_users_is_kept_by_evaluate(pairs: Path, tmp_path: Path) -> None:
    out, ev = tmp_path / "v", tmp_path / "ev.json"
    code, output = run(
        "train", "--data", str(pairs), "--valid-users", "30", "--out", str(out), *TINY, "--no-baseline"
    )
    assert code == 0, output
    assert "valid_users=30" in output and "30 validation" in output
    code, output = run(
        "evaluate", "--model", str(out), "--data", str(pairs), "--target", "valid", "--json", str(ev)
    )
    assert code == 0, output
    assert "valid_users=30" in output  # re-split as in training, not on every user
    split = leave_one_out(read_pairs(pairs), valid_users=30)
    assert json.loads(ev.read_text())["results"][0]["metrics"] == pytest.approx(
        attnrec.load(out).evaluate(split.valid, target="valid").metrics
    )
    fails("train", "--data", "demo", "--split", "temporal", "--valid-users", "5", *TINY)


def test_next_buy_split_from_the_cli_is_kept_by_evaluate(tmp_path: Path) -> None:
    log, out = tmp_path / "shop.csv", tmp_path / "buy"
    rows = ["user,item,timestamp,event"] + [
        f"u{u},i{(u + t) % 9 + 1},{t},{'buy' if t % 3 == 2 else 'view'}" for u in range(30) for t in range(10)
    ]
    log.write_text("\n".join(rows) + "\n")
    code, output = run(
        "train",
        "--data",
        str(log),
        "--split",
        "last-qualifying",
        "--target-events",
        "buy",
        "--out",
        str(out),
        *TINY,
        "--no-baseline",
    )
    assert code == 0, output
    assert "split last-qualifying (target_events=buy)" in output
    code, output = run("evaluate", "--model", str(out), "--data", str(log))
    assert code == 0, output
    assert "split last-qualifying (target_events=buy)" in output  # re-split on the same target type
    assert "last-qualifying split only" in fails("train", "--data", str(log), "--target-events", "buy", *TINY)
    assert "unknown event 'order'" in fails(
        "train", "--data", str(log), "--split", "last-qualifying", "--target-events", "order", *TINY
    )


def test_evaluate_matches_python_api(pairs: Path, model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ev.json"
    code, output = run(
        "evaluate",
        "--model",
        str(model_dir),
        "--data",
        str(pairs),
        "--protocol",
        "full",
        "--protocol",
        "sampled-popularity",
        "--negatives",
        "10",
        "--json",
        str(out),
    )
    assert code == 0, output
    assert "full ranking" in output and "10 popularity-sampled negatives (seed 0)" in output
    assert "MISMATCH" not in output
    got = json.loads(out.read_text())
    assert got["data_sha256_matches"] and got["dropped_cases"] == 0

    rec = attnrec.load(model_dir)
    split = leave_one_out(read_pairs(pairs))
    full = rec.evaluate(split.test)
    sampled = rec.evaluate(split.test, Protocol("sampled", 10, "popularity"))
    assert got["results"][0]["metrics"] == pytest.approx(full.metrics)
    assert got["results"][1]["metrics"] == pytest.approx(sampled.metrics)


def test_evaluate_warns_on_other_data(pairs: Path, model_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.txt"
    other.write_text(
        "\n".join(pairs.read_text().splitlines()[:600]) + "\nnew_user i1\nnew_user i2\nnew_user zz\n"
    )
    code, output = run("evaluate", "--model", str(model_dir), "--data", str(other), "--target", "valid")
    assert code == 0, output
    assert "DATA MISMATCH" in output and "left out" in output  # the unknown target 'zz' is dropped


def test_recommend_for_user_equals_python_api(model_dir: Path) -> None:
    code, output = run("recommend", "--model", str(model_dir), "--user", "u7", "-k", "5", "--json")
    assert code == 0, output
    got = json.loads(output)
    want = attnrec.load(model_dir).recommend(user="u7", k=5)
    assert got["items"] == want.items and got["scores"] == pytest.approx(want.scores)
    assert len(got["items"]) == 5 and got["fallback"] is None


def test_recommend_for_history_equals_python_api(model_dir: Path) -> None:
    code, output = run(
        "recommend",
        "--model",
        str(model_dir),
        "--history",
        "i3, i4,i5",
        "-k",
        "4",
        "--exclude",
        "i6",
        "--json",
    )
    assert code == 0, output
    got = json.loads(output)
    want = attnrec.load(model_dir).recommend(history=["i3", "i4", "i5"], k=4, exclude=["i6"])
    assert got["items"] == want.items and got["scores"] == pytest.approx(want.scores)
    assert not {"i3", "i4", "i5", "i6"} & set(got["items"])


def test_recommend_table_and_include_seen(model_dir: Path) -> None:
    code, output = run("recommend", "--model", str(model_dir), "--user", "u1", "-k", "3")
    assert code == 0 and "top 3 for user u1" in output and "seen items excluded" in output
    rec = attnrec.load(model_dir)
    for item in rec.recommend(user="u1", k=3).items:
        assert item in output
    code, output = run("recommend", "--model", str(model_dir), "--user", "u1", "--include-seen", "--json")
    want = rec.recommend(user="u1", exclude_seen=False)
    assert code == 0 and json.loads(output)["items"] == want.items


def test_unknown_history_items_are_reported_not_crashed_on(model_dir: Path) -> None:
    code, output = run("recommend", "--model", str(model_dir), "--history", "i1,nope,i2,ghost")
    assert code == 0, output
    assert "unknown to the model: nope, ghost" in output
    code, output = run("recommend", "--model", str(model_dir), "--history", "nope", "--json")
    got = json.loads(output)
    assert got["unknown_items"] == ["nope"] and "most popular" in got["fallback"]


def test_unknown_user_gets_popularity_and_says_so(model_dir: Path) -> None:
    code, output = run("recommend", "--model", str(model_dir), "--user", "stranger", "-k", "3")
    assert code == 0, output
    assert "not personalised" in output and "unknown user 'stranger'" in output


def test_data_and_models(pairs: Path) -> None:
    code, output = run("data", "--data", str(pairs), "--json")
    assert code == 0, output
    desc = json.loads(output)
    data = read_pairs(pairs)
    assert desc["users"] == data.n_users == 120 and desc["items"] == data.n_items == 40
    assert desc["interactions"] == len(data) and desc["source"]["sha256"] == data.source.sha256
    code, output = run("data", "--data", str(pairs))
    assert code == 0 and "120" in output
    code, output = run("models")
    assert code == 0 and "sasrec" in output and "paper" in output
    code, output = run("models", "sasrec")
    assert code == 0 and "model.hidden" in output and "train.lr" in output


def test_csv_with_mapped_columns(tmp_path: Path) -> None:
    table = tmp_path / "log.csv"
    table.write_text("who,what,when\na,x,3\na,y,1\nb,x,2\n")
    code, output = run(
        "data", "--data", str(table), "--columns", "user=who,item=what,timestamp=when", "--json"
    )
    assert code == 0, output
    desc = json.loads(output)
    assert (desc["users"], desc["items"], desc["interactions"]) == (2, 2, 3)
    assert "role=column" in fails("data", "--data", str(table), "--columns", "user")
    assert "missing column 'nobody'" in fails(
        "data", "--data", str(table), "--columns", "user=nobody,item=what"
    )


# -- help ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["train", "evaluate", "recommend", "data", "models"])
def test_every_command_has_useful_help(command: str) -> None:
    code, output = run(command, "--help")
    assert code == 0 and "Usage" in output and "Example" in output
    if command != "models":
        assert "--data" in output or "--model" in output


def test_top_level_help_lists_commands() -> None:
    code, output = run("--help")
    assert code == 0
    for command in ("train", "evaluate", "recommend", "data", "models"):
        assert command in output


def test_python_dash_m() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "attnrec", "--help"], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0 and "recommend" in proc.stdout


# -- bad input: exit code 2, one clear line, no traceback ------------------------------------------
def test_missing_data_file(tmp_path: Path) -> None:
    output = fails("train", "--data", str(tmp_path / "nope.txt"), *TINY)
    assert "nope.txt" in output and ("not found" in output or "neither an existing file" in output)


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("a x\na y\na z w\n")
    output = fails("train", "--data", str(bad), "--format", "pairs", *TINY)
    assert "bad.txt:3" in output


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "empty" in fails("data", "--data", str(empty), "--format", "pairs")


def test_users_too_short_to_split(tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("a 1\na 2\nb 1\n")
    assert "3 or more" in fails("train", "--data", str(short), "--format", "pairs", *TINY)


def test_unknown_model(pairs: Path) -> None:
    output = fails("train", "--data", str(pairs), "--model", "gpt9", *TINY)
    assert "unknown model 'gpt9'" in output and "sasrec" in output


def test_unknown_preset(pairs: Path) -> None:
    assert "unknown preset" in fails("train", "--data", str(pairs), "--preset", "nope", *TINY)


def test_unknown_config_key_lists_valid_keys(pairs: Path) -> None:
    output = fails("train", "--data", str(pairs), *TINY, "--set", "hiden=3")
    assert "hiden" in output and "model.hidden" in output and "train.lr" in output
    output = fails("train", "--data", str(pairs), *TINY, "--set", "model.lr=3")
    assert "unknown model key 'lr'" in output


def test_bad_config_values(pairs: Path, tmp_path: Path) -> None:
    assert "not a valid int" in fails("train", "--data", str(pairs), *TINY, "--set", "seed=x")
    assert "loss must be" in fails("train", "--data", str(pairs), *TINY, "--set", "loss=mse")
    assert "key=value" in fails("train", "--data", str(pairs), *TINY, "--set", "hidden")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nhidden=")
    assert "invalid TOML" in fails("train", "--data", str(pairs), "--config", str(bad), *TINY)
    assert "config file not found" in fails(
        "train", "--data", str(pairs), "--config", str(tmp_path / "x.toml")
    )
    sect = tmp_path / "sect.toml"
    sect.write_text("[modle]\nhidden = 3\n")
    assert "unknown section" in fails("train", "--data", str(pairs), "--config", str(sect))


def test_bad_checkpoint_dirs(model_dir: Path, tmp_path: Path) -> None:
    assert "not a directory" in fails("recommend", "--model", str(tmp_path / "none"), "--user", "u1")
    (tmp_path / "empty").mkdir()
    assert "config.json" in fails("recommend", "--model", str(tmp_path / "empty"), "--user", "u1")
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in model_dir.iterdir():
        if f.is_file():
            (broken / f.name).write_bytes(f.read_bytes())
    weights = broken / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert "truncated or corrupted" in fails("recommend", "--model", str(broken), "--user", "u1")


def test_recommend_needs_user_or_history(model_dir: Path) -> None:
    assert "--user" in fails("recommend", "--model", str(model_dir))


def test_bad_evaluate_options(pairs: Path, model_dir: Path) -> None:
    assert "--target" in fails(
        "evaluate", "--model", str(model_dir), "--data", str(pairs), "--target", "train"
    )
    assert "--ks" in fails("evaluate", "--model", str(model_dir), "--data", str(pairs), "--ks", "a,b")
    code, output = run("evaluate", "--model", str(model_dir), "--data", str(pairs), "--protocol", "halfway")
    assert code == 2 and "halfway" in output  # click's own usage error


def test_resolve_overrides_prefixes_and_ambiguity() -> None:
    sections = {"model": SASRecConfig, "train": TrainConfig}
    over = resolve_overrides(sections, ["hidden=4", "train.lr=0.1", "model.dropout=0"])
    assert over == {"model": {"hidden": "4", "dropout": "0"}, "train": {"lr": "0.1"}}
    with pytest.raises(ConfigError, match="valid keys"):
        resolve_overrides(sections, ["nothing=1"])
    with pytest.raises(ConfigError, match="unknown train key"):
        resolve_overrides(sections, ["train.hidden=1"])
    with pytest.raises(ConfigError, match="ambiguous, both configs have it; write model.seed or train.seed"):
        resolve_overrides({"model": TrainConfig, "train": TrainConfig}, ["seed=1"])
