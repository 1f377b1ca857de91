"""RunConfig: a benchmark run config is checked before any data is read or any model trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnrec.config import ConfigError
from attnrec.experiments.configured import RunConfig


def _config(tmp_path: Path, run: str, extra: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f"[run]\n{run}\n{extra}")
    return path


def test_a_config_reads_its_tables(tmp_path: Path) -> None:
    cfg = RunConfig.from_toml(
        _config(
            tmp_path,
            'data = "demo"\nmodel = "pop"\nprotocols = ["full", "sampled-uniform"]',
            "[train]\nmax_epochs = 2\n",
        )
    )
    assert (cfg.name, cfg.split, cfg.valid_protocol) == (
        "run",
        "leave-one-out",
        "full",
    )  # name: the file's stem
    assert cfg.protocols == ("full", "sampled-uniform") and cfg.train_settings == {"max_epochs": 2}


@pytest.mark.parametrize(
    ("run", "extra", "message"),
    [
        ('data = "demo"\nmodel = "pop"\nepochs = 3', "", r"unknown \[run\] keys \['epochs'\]"),
        ('data = "demo"', "", r"\[run\] needs model"),
        ('data = "demo"\nmodel = "pop"', "[optim]\nlr = 1\n", "unknown section"),
        ('data = "demo"\nmodel = "pop"\nsplit = "random"', "", "unknown split 'random'"),
        ('data = "demo"\nmodel = "pop"\nsplit = "temporal"\nvalid_users = 5', "", "leave-one-out split only"),
        ('data = "demo"\nmodel = "pop"\nprotocols = ["halfway"]', "", "unknown protocol 'halfway'"),
        ('data = "demo"\nmodel = "pop"\nsave = "runs/x"', "", r"save must be true or false, not 'runs/x'"),
        ('data = "demo"\nmodel = "pop"\nvalid_users = true', "", "valid_users must be an integer"),
        ('data = "demo"\nmodel = "pop"\ncold_items = "10%"', "", "cold_items must be a number"),
        (
            'data = "demo"\nmodel = "pop"\ntarget_events = "buy"',
            "",
            "last-qualifying split only, not leave-one-out",
        ),
        (
            'data = "demo"\nmodel = "pop"\nseeds = [0, 1]',
            "[train]\nseed = 3\n",
            "seeds and .train. seed both",
        ),
        ('data = "demo"\nmodel = "pop"\nseeds = [1, 1]', "", "seeds must be distinct"),
        ('data = "demo"\nmodel = "pop"\nseed_group = "x"', "", r"unknown \[run\] keys \['seed_group'\]"),
    ],
)
def test_bad_configs_fail_with_one_clear_line(tmp_path: Path, run: str, extra: str, message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        RunConfig.from_toml(_config(tmp_path, run, extra))


def test_a_config_on_a_base_overrides_it_key_by_key(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "grand.toml").write_text(
        '[run]\nname = "grand"\ndata = "demo"\nmodel = "sasrec"\n'
        'notes = "bf16"\n[model]\nhidden = 8\nfast_dropout = true\n'
        '[train]\namp = "bf16"\nmax_epochs = 3\n'
    )
    (tmp_path / "base" / "parent.toml").write_text(
        '[run]\nbase = "grand.toml"\nseeds = [0, 1]\n[model]\nn_layers = 1\n'
    )
    child = _config(
        tmp_path,
        'base = "base/parent.toml"\nnotes = "float32"',
        '[model]\nfast_dropout = false\n[train]\namp = "none"\n',
    )
    cfg = RunConfig.from_toml(child)
    assert cfg.name == "run"  # its own (the file's stem): a base's name is never inherited
    assert (cfg.data, cfg.model, cfg.notes, cfg.seeds) == ("demo", "sasrec", "float32", (0, 1))
    assert cfg.model_settings == {"hidden": 8, "fast_dropout": False, "n_layers": 1}
    assert cfg.train_settings == {"amp": "none", "max_epochs": 3}


@pytest.mark.parametrize(
    ("base", "message"),
    [
        ('"missing.toml"', r"base missing.toml: no such config file"),
        ('"run.toml"', "the bases form a loop"),
        ('"loop.toml"', "the bases form a loop"),
        ("3", "base must be the path of another config"),
    ],
)
def test_bad_bases_fail_with_one_clear_line(tmp_path: Path, base: str, message: str) -> None:
    (tmp_path / "loop.toml").write_text('[run]\nbase = "run.toml"\n')
    with pytest.raises(ConfigError, match=message):
        RunConfig.from_toml(_config(tmp_path, f'base = {base}\ndata = "demo"\nmodel = "pop"'))


def test_a_named_dataset_from_a_data_dir_brings_its_item_features(tmp_path: Path) -> None:
    import gzip
    import json

    from attnrec.experiments.configured import run_configured

    folder = tmp_path / "data" / "amazon-toys"
    folder.mkdir(parents=True)
    lines = "".join(f"{u} " + " ".join(str(1 + (u + j) % 12) for j in range(6)) + "\n" for u in range(1, 31))
    (folder / "Toys_and_Games.txt.gz").write_bytes(gzip.compress(lines.encode()))
    attributes = {str(i): [i % 3] for i in range(1, 13)}
    (folder / "Toys_and_Games_item2attributes.json").write_text(json.dumps(attributes))
    cfg = RunConfig.from_toml(
        _config(
            tmp_path,
            'name = "toys-features"\ndata = "amazon-toys"\ndata_dir = "data"\nmodel = "sasrec"',
            '[model]\nhidden = 8\nmax_len = 8\nloss = "ce"\nitem_features = "sum"\n[train]\nmax_epochs = 1\n',
        )
    )
    result = run_configured(cfg, root=tmp_path, out_dir=tmp_path / "out", git_sha="test")
    saved = json.loads(result.read_text())
    # the model trained with the attributes (without them it refuses item_features = "sum")
    assert saved["data"]["name"] == "amazon-toys" and saved["model_config"]["item_features"] == "sum"


def test_a_last_qualifying_split_from_the_config_is_recorded_with_its_target_events(tmp_path: Path) -> None:
    from attnrec.experiments.configured import run_configured

    rows = ["user,item,timestamp,event,rating"]
    for u in range(20):  # views of items 1..8, a buy (rated 5, or 2 for odd users' first) every third event
        rows += [
            f"u{u},i{(u + t) % 8 + 1},{t},{'buy' if t % 3 == 2 else 'view'},{2 if u % 2 and t == 2 else 5}"
            for t in range(12)
        ]
    (tmp_path / "log.csv").write_text("\n".join(rows) + "\n")
    cfg = RunConfig.from_toml(
        _config(
            tmp_path,
            'data = "log.csv"\nmodel = "pop"\nsplit = "last-qualifying"\n'
            'target_events = "buy"\nmin_target_rating = 4.0',
            "",
        )
    )
    saved = json.loads(
        run_configured(cfg, root=tmp_path, out_dir=tmp_path / "out", git_sha="test").read_text()
    )
    assert saved["split"] == "last-qualifying (target_events=buy, min_rating=4.0)"
    assert (
        "split last-qualifying (target_events=buy, min_rating=4.0)"
        in saved["evaluations"]["full"]["protocol_text"]
    )
    # every user's test target is its last buy (time 11); the history: every earlier event, views too
    assert saved["evaluations"]["full"]["n_cases"] == 20
