"""The ``attnrec`` command line end to end: train -> evaluate -> recommend on a tiny cycle log.

Answers printed by the CLI must equal those of the Python API for the same input.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import TINY, fails, run

import attnrec
from attnrec.data.readers.lines import read_pairs
from attnrec.data.split import leave_one_out
from attnrec.evaluation.protocol import Protocol


# -- the happy path --------------------------------------------------------------------------------
def test_train_saves_a_checkpoint_and_reports_protocol(cycle_pairs: Path, cycle_model: Path) -> None:
    for name in ("config.json", "weights.safetensors", "arrays.safetensors", "id_maps.json"):
        assert (cycle_model / name).is_file()
    meta = json.loads((cycle_model / "config.json").read_text())
    assert meta["model_config"]["hidden"] == 8 and meta["train_config"]["max_epochs"] == 1
    assert meta["data"]["sha256"] == read_pairs(cycle_pairs).source.sha256
    assert meta["evaluations"][0]["target"] == "test"


def test_train_output(cycle_pairs: Path, tmp_path: Path) -> None:
    code, output = run(
        "train",
        "--data",
        str(cycle_pairs),
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


def test_toml_config_and_set_overrides(cycle_pairs: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[model]\nhidden = 16\nloss = "ce"\n[train]\nlr = 0.01\nbatch_size = 32\n')
    code, output = run(
        "train",
        "--data",
        str(cycle_pairs),
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


def test_resume_continues_from_the_saved_state(cycle_pairs: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    assert run("train", "--data", str(cycle_pairs), "--out", str(out), *TINY)[0] == 0
    assert (out / "train_state" / "train_state.json").is_file()
    first = json.loads((out / "config.json").read_text())["train_result"]
    code, output = run(
        "train", "--data", str(cycle_pairs), "--out", str(out), *TINY, "--max-epochs", "2", "--resume"
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


def test_validation_on_sampled_users_is_kept_by_evaluate(cycle_pairs: Path, tmp_path: Path) -> None:
    out, ev = tmp_path / "v", tmp_path / "ev.json"
    code, output = run(
        "train", "--data", str(cycle_pairs), "--valid-users", "30", "--out", str(out), *TINY, "--no-baseline"
    )
    assert code == 0, output
    assert "valid_users=30" in output and "30 validation" in output
    code, output = run(
        "evaluate", "--model", str(out), "--data", str(cycle_pairs), "--target", "valid", "--json", str(ev)
    )
    assert code == 0, output
    assert "valid_users=30" in output  # re-split as in training, not on every user
    split = leave_one_out(read_pairs(cycle_pairs), valid_users=30)
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


def test_evaluate_matches_python_api(cycle_pairs: Path, cycle_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "ev.json"
    code, output = run(
        "evaluate",
        "--model",
        str(cycle_model),
        "--data",
        str(cycle_pairs),
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

    rec = attnrec.load(cycle_model)
    split = leave_one_out(read_pairs(cycle_pairs))
    full = rec.evaluate(split.test)
    sampled = rec.evaluate(split.test, Protocol("sampled", 10, "popularity"))
    assert got["results"][0]["metrics"] == pytest.approx(full.metrics)
    assert got["results"][1]["metrics"] == pytest.approx(sampled.metrics)


def test_evaluate_warns_on_other_data(cycle_pairs: Path, cycle_model: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.txt"
    other.write_text(
        "\n".join(cycle_pairs.read_text().splitlines()[:600]) + "\nnew_user i1\nnew_user i2\nnew_user zz\n"
    )
    code, output = run("evaluate", "--model", str(cycle_model), "--data", str(other), "--target", "valid")
    assert code == 0, output
    assert "DATA MISMATCH" in output and "left out" in output  # the unknown target 'zz' is dropped


def test_recommend_for_user_equals_python_api(cycle_model: Path) -> None:
    code, output = run("recommend", "--model", str(cycle_model), "--user", "u7", "-k", "5", "--json")
    assert code == 0, output
    got = json.loads(output)
    want = attnrec.load(cycle_model).recommend(user="u7", k=5)
    assert got["items"] == want.items and got["scores"] == pytest.approx(want.scores)
    assert len(got["items"]) == 5 and got["fallback"] is None


def test_recommend_for_history_equals_python_api(cycle_model: Path) -> None:
    code, output = run(
        "recommend",
        "--model",
        str(cycle_model),
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
    want = attnrec.load(cycle_model).recommend(history=["i3", "i4", "i5"], k=4, exclude=["i6"])
    assert got["items"] == want.items and got["scores"] == pytest.approx(want.scores)
    assert not {"i3", "i4", "i5", "i6"} & set(got["items"])


def test_recommend_table_and_include_seen(cycle_model: Path) -> None:
    code, output = run("recommend", "--model", str(cycle_model), "--user", "u1", "-k", "3")
    assert code == 0 and "top 3 for user u1" in output and "seen items excluded" in output
    rec = attnrec.load(cycle_model)
    for item in rec.recommend(user="u1", k=3).items:
        assert item in output
    code, output = run("recommend", "--model", str(cycle_model), "--user", "u1", "--include-seen", "--json")
    want = rec.recommend(user="u1", exclude_seen=False)
    assert code == 0 and json.loads(output)["items"] == want.items


def test_unknown_history_items_are_reported_not_crashed_on(cycle_model: Path) -> None:
    code, output = run("recommend", "--model", str(cycle_model), "--history", "i1,nope,i2,ghost")
    assert code == 0, output
    assert "unknown to the model: nope, ghost" in output
    code, output = run("recommend", "--model", str(cycle_model), "--history", "nope", "--json")
    got = json.loads(output)
    assert got["unknown_items"] == ["nope"] and "most popular" in got["fallback"]


def test_unknown_user_gets_popularity_and_says_so(cycle_model: Path) -> None:
    code, output = run("recommend", "--model", str(cycle_model), "--user", "stranger", "-k", "3")
    assert code == 0, output
    assert "not personalised" in output and "unknown user 'stranger'" in output


def test_data_and_models(cycle_pairs: Path) -> None:
    code, output = run("data", "--data", str(cycle_pairs), "--json")
    assert code == 0, output
    desc = json.loads(output)
    data = read_pairs(cycle_pairs)
    assert desc["users"] == data.n_users == 120 and desc["items"] == data.n_items == 40
    assert desc["interactions"] == len(data) and desc["source"]["sha256"] == data.source.sha256
    code, output = run("data", "--data", str(cycle_pairs))
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
