"""benchmarks/peter_reference.py: the reference's input format, its launcher, output parsing and resuming."""

from __future__ import annotations

import json
import pickle
import random
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bench_scripts import load

from attnrec.data.reviews import ReviewData, from_records, random_split

pr = load("peter_reference")
CFG: dict[str, Any] = {
    "data": {"max_vocab": 20000, "max_words": 15, "seeds": [1, 2]},
    "model": {
        "emsize": 512,
        "n_heads": 2,
        "ffn": 2048,
        "n_layers": 2,
        "dropout": 0.2,
        "text_weight": 1.0,
        "context_weight": 1.0,
        "rating_weight": 0.1,
    },
    "train": {
        "lr": 1.0,
        "lr_decay": 0.25,
        "grad_clip": 1.0,
        "batch_size": 128,
        "max_lr_decays": 5,
        "max_epochs": 6,
        "threads": 1,
    },
}


def _data(n: int = 60) -> ReviewData:
    rng = np.random.default_rng(3)
    recs = [
        {
            "user": f"u{rng.integers(9)}",
            "item": f"i{rng.integers(7)}",
            "rating": float(rng.integers(1, 6)),
            "template": ("tone", "warm", f"the tone is warm {k}", 1 if k % 3 else -1),
        }
        for k in range(n)
    ]
    return from_records(recs)


class _PlainData(pickle.Unpickler):
    """Reads plain containers only: the export must hold nothing that could run code when loaded."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the export holds an object of {module}.{name}, not plain data")


def test_export_is_what_the_reference_loader_reads(tmp_path: Path) -> None:
    """Read back with a reader written from the format: a pickled list of dicts, one index line per part."""
    data = _data()
    split = random_split(data, 1)
    d = pr.export_reference_input(data, split, tmp_path / "export")
    with open(d / "reviews.pickle", "rb") as fh:
        reviews = _PlainData(fh).load()
    assert isinstance(reviews, list) and len(reviews) == len(data)
    for k, r in enumerate(reviews):
        fea, adj, text, sentiment = r["template"]  # the reference unpacks exactly four fields
        assert (r["user"], r["item"]) == (
            data.users.to_external([data.user[k]])[0],
            data.items.to_external([data.item[k]])[0],
        )
        assert r["rating"] == float(data.rating[k]) and text == data.sentence[k] and fea == data.feature[k]
        assert adj == data.adjective[k] and sentiment == int(data.sentiment[k])
    for part, idx in (("train", split.train), ("validation", split.valid), ("test", split.test)):
        with open(d / "1" / f"{part}.index") as fh:
            first = fh.readline()
        assert [int(x) for x in first.split(" ")] == idx.tolist()  # the reference reads one line split on " "


def test_reference_argv_has_the_papers_settings_and_equal_budget(tmp_path: Path) -> None:
    argv = pr.reference_argv(tmp_path / "data", tmp_path / "ckpt", CFG, seed=2, use_feature=True)
    flags = dict(zip(argv[::2], argv[1::2], strict=False))
    assert flags["--data_path"] == str(tmp_path / "data" / "reviews.pickle")
    assert flags["--index_dir"] == str(tmp_path / "data" / "1")
    assert (flags["--emsize"], flags["--nhead"], flags["--nhid"], flags["--nlayers"]) == (
        "512",
        "2",
        "2048",
        "2",
    )
    assert (flags["--dropout"], flags["--lr"], flags["--epochs"], flags["--seed"]) == ("0.2", "1.0", "6", "2")
    assert flags["--vocab_size"] == "20000" and flags["--words"] == "15" and flags["--endure_times"] == "5"
    assert argv[-2:] == ["--peter_mask", "--use_feature"] and "--cuda" not in argv
    assert "--use_feature" not in pr.reference_argv(tmp_path, tmp_path, CFG, seed=2, use_feature=False)


def test_launcher_runs_an_unedited_main_with_its_argv_cwd_and_loose_torch_load(tmp_path: Path) -> None:
    ref = tmp_path / "PETER"
    ref.mkdir()
    (ref / "helper.py").write_text("VALUE = 7\n")  # main.py imports its neighbours, as the reference does
    (ref / "main.py").write_text(
        "import json, os, random, sys, torch\nfrom helper import VALUE\n"
        "torch.save({'a': 1}, 'obj.pt')\nclass Box: pass\ntorch.save(Box(), 'box.pt')\n"
        # a plain torch.load of a pickled object, like the reference's
        "box = torch.load(open('box.pt', 'rb'))\n"
        "json.dump({'argv': sys.argv, 'cwd': os.getcwd(), 'value': VALUE, 'box': type(box).__name__,"
        " 'random': random.random(), 'threads': torch.get_num_threads()}, open('out.json', 'w'))\n"
    )
    cmd = pr.reference_command(ref, ["--epochs", "6", "--seed", "3"], seed=3, threads=1)
    assert cmd[1] == "-c" and cmd[3:6] == [str(ref), "3", "1"]
    p = subprocess.run(
        cmd, cwd=ref, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    )
    assert p.returncode == 0, p.stderr
    out = json.loads((ref / "out.json").read_text())
    assert out["argv"] == [str(ref / "main.py"), "--epochs", "6", "--seed", "3"] and out["cwd"] == str(ref)
    assert out["value"] == 7 and out["box"] == "Box" and out["threads"] == 1
    random.seed(3)
    assert out["random"] == random.random()  # the reference's batch shuffling is seeded


def test_generated_text_and_log_are_parsed_line_by_line() -> None:
    text = "the tone is warm\ntone warm <eos>\nthe tone\n\ngreat strings\nstrings\n\n\n"  # 2nd output empty
    blocks = pr.parse_generated(text)
    assert blocks == [
        (["the", "tone", "is", "warm"], ["tone", "warm", "<eos>"], ["the", "tone"]),
        (["great", "strings"], ["strings"], []),
    ]
    with pytest.raises(pr.BenchError, match="blocks of 4"):
        pr.parse_generated("a\nb\n")
    log = (
        "[2026-01-01 10:00:00.000000]: epoch 1\n[2026-01-01 10:00:01.000000]: context ppl 9 | x\n"
        "[2026-01-01 10:00:10.500000]: context ppl 1.0 | text ppl 2.0 | valid loss 3.0 on validation\n"
        "[2026-01-01 10:00:11.000000]: epoch 2\n"
        "[2026-01-01 10:00:20.000000]: context ppl 1.0 | valid loss 3.0 on validation\n"
        "[2026-01-01 10:00:21.000000]: RMSE  0.9123\n[2026-01-01 10:00:21.000000]: BLEU-1 12.5000\n"
        "[2026-01-01 10:00:22.000000]: rouge_2/f_score  3.7800\n"
    )
    parsed = pr.parse_log(log)
    assert parsed["epochs"] == 2 and parsed["epoch_seconds"] == [10.5, 9.0]
    assert parsed["printed"] == {"RMSE": 0.9123, "BLEU-1": 12.5, "rouge_2/f_score": 3.78}


class _CutOff(Exception):
    """The run stopped from outside (a killed job)."""


def _fake_cells(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data: ReviewData, fake: Any) -> Path:
    """The records and both implementations' cells replaced by fakes; an empty reference checkout."""
    monkeypatch.setattr(pr, "review_data", lambda cfg: (Path("x.json.gz"), data))
    monkeypatch.setattr(pr, "run_reference", fake("reference"))
    monkeypatch.setattr(pr, "run_attnrec", fake("attnrec"))
    ref = tmp_path / "PETER"
    ref.mkdir()
    for f in pr.REFERENCE_FILES:
        (ref / f).write_text("")
    return ref


def test_finished_cells_are_not_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data()
    calls: list[str] = []
    cut: list[bool] = []

    def fake(kind: str):  # type: ignore[no-untyped-def]
        def cell(*args: Any) -> dict[str, Any]:
            calls.append(kind)
            if len(calls) == 3 and not cut:
                cut.append(True)
                raise _CutOff  # the first run is cut off in its third cell
            return {
                "decodings": {"d": {"BLEU-1": 1.0}},
                "epoch_seconds": 1.0,
                "cpu_seconds_per_epoch": 1.0,
                "epochs": 6,
            }

        return cell

    ref = _fake_cells(monkeypatch, tmp_path, data, fake)
    with pytest.raises(_CutOff):
        pr.run(CFG, ref, tmp_path / "state", quick=False)
    done = json.loads((tmp_path / "state" / "state.json").read_text())["cells"]
    assert sorted(done) == ["attnrec/PETER/1", "reference/PETER/1"]
    calls.clear()
    results = pr.run(CFG, ref, tmp_path / "state", quick=False)
    assert (
        calls == ["reference", "attnrec"] * 3 and len(results["cells"]) == 8
    )  # 2 seeds x 2 models x 2 implementations
    assert "| reference | PETER | d |" in pr.markdown(results)
    with pytest.raises(pr.BenchError, match="another config"):
        pr.run(CFG | {"train": CFG["train"] | {"max_epochs": 7}}, ref, tmp_path / "state", quick=False)


def test_processes_sharing_a_state_dir_split_the_cells_and_keep_each_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data()
    state = tmp_path / "state"
    other = subprocess.Popen(["sleep", "60"])  # a live process that has claimed one cell
    (state / "claims").mkdir(parents=True)
    (state / "claims" / "reference_PETER-plus_2").write_text(str(other.pid))
    (state / "claims" / "attnrec_PETER_2").write_text("999999999")  # a claimant that has ended: taken over
    calls: list[str] = []
    theirs = {
        "decodings": {"d": {"BLEU-1": 2.0}},
        "epoch_seconds": 1.0,
        "cpu_seconds_per_epoch": 1.0,
        "epochs": 6,
    }

    def fake(kind: str):  # type: ignore[no-untyped-def]
        def cell(*args: Any) -> dict[str, Any]:
            seed, use_feature = (
                args[4:6] if kind == "reference" else args[3:5]
            )  # the reference's takes its path first
            calls.append(f"{kind}/{'PETER+' if use_feature else 'PETER'}/{seed}")
            if len(calls) == 1:  # meanwhile the other process saves a cell of its own
                saved = (
                    json.loads((state / "state.json").read_text()) if (state / "state.json").exists() else {}
                )
                saved.setdefault("cells", {})["attnrec/PETER+/2"] = theirs
                (state / "state.json").write_text(json.dumps(saved))
            return {
                "decodings": {"d": {"BLEU-1": 1.0}},
                "epoch_seconds": 1.0,
                "cpu_seconds_per_epoch": 1.0,
                "epochs": 6,
            }

        return cell

    ref = _fake_cells(monkeypatch, tmp_path, data, fake)
    try:
        results = pr.run(CFG, ref, state, quick=False)
    finally:
        other.kill()
        other.wait()
    assert "reference/PETER+/2" not in calls and "attnrec/PETER+/2" not in calls
    assert "attnrec/PETER/2" in calls and len(calls) == 6
    assert results["cells"]["attnrec/PETER+/2"] == theirs and len(results["cells"]) == 7
    assert json.loads((state / "state.json").read_text())["cells"]["attnrec/PETER+/2"] == theirs
