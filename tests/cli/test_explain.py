"""``attnrec explain-train / explain / explain-evaluate`` on a tiny PETER-format dataset."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data.reviews import from_records, random_split, write_peter


def _dataset(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    phrases = ["the tone is warm and clear", "the strap is comfortable", "great tuner and accurate"]
    recs = [
        {
            "user": f"u{rng.integers(8)}",
            "item": f"i{(k := int(rng.integers(5)))}",
            "rating": float(2 + k % 4),
            "template": (phrases[k % 3].split()[1], "good", phrases[k % 3], 1),
        }
        for _ in range(120)
    ]
    data = from_records(recs)
    return write_peter(data, tmp_path / "peter-data", [random_split(data, 0)])


def test_explain_commands(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    data_dir = _dataset(tmp_path)
    runner = CliRunner()
    model = tmp_path / "model"
    res = runner.invoke(
        app,
        [
            "explain-train",
            "--data",
            str(data_dir),
            "--out",
            str(model),
            "--preset",
            "plus",
            "--split",
            "index:1",
            "--set",
            "emsize=16",
            "--set",
            "ffn=32",
            "--set",
            "n_heads=2",
            "--train",
            "max_epochs=2",
            "--train",
            "threads=1",
            "--quiet",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (model / "weights.safetensors").exists() and (model / "vocab.json").exists()
    res = runner.invoke(app, ["explain", "--model", str(model), "--user", "u1", "--item", "i0", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert (
        set(out) == {"user", "item", "rating", "text", "context_words", "feature"} and 1 <= out["rating"] <= 5
    )
    res = runner.invoke(
        app, ["explain", "--model", str(model), "--user", "u1", "--item", "i0", "--feature", "tone"]
    )
    assert res.exit_code == 0 and "predicted rating:" in res.output and "explanation:" in res.output
    res = runner.invoke(app, ["explain-evaluate", "--model", str(model), "--data", str(data_dir), "--json"])
    assert res.exit_code == 0, res.output
    assert {"RMSE", "BLEU-4", "ROUGE-2-F", "FMR", "DIV"} <= set(json.loads(res.output))
    res = runner.invoke(app, ["explain", "--model", str(model), "--user", "nobody", "--item", "i0"])
    assert res.exit_code == 2 and "unknown user" in res.output
    # --decoding names the paper's plain decoding and the blocked default (explain-evaluate records it)
    paper = runner.invoke(
        app,
        ["explain", "--model", str(model), "--user", "u1", "--item", "i0", "--json", "--decoding", "paper"],
    )
    zero = runner.invoke(
        app,
        [
            "explain",
            "--model",
            str(model),
            "--user",
            "u1",
            "--item",
            "i0",
            "--json",
            "--no-repeat-ngram",
            "0",
        ],
    )
    assert paper.exit_code == 0 and paper.output == zero.output
    res = runner.invoke(
        app,
        [
            "explain-evaluate",
            "--model",
            str(model),
            "--data",
            str(data_dir),
            "--json",
            "--decoding",
            "blocked",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads((model / "config.json").read_text())["decode"]["no_repeat_ngram"] == 3  # the default
    res = runner.invoke(
        app,
        [
            "explain",
            "--model",
            str(model),
            "--user",
            "u1",
            "--item",
            "i0",
            "--decoding",
            "paper",
            "--no-repeat-ngram",
            "2",
        ],
    )
    assert res.exit_code == 2 and "not both" in res.output and "Traceback" not in res.output
    res = runner.invoke(
        app, ["explain", "--model", str(model), "--user", "u1", "--item", "i0", "--decoding", "nice"]
    )
    assert res.exit_code == 2 and "paper or blocked" in res.output
