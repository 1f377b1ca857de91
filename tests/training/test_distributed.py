"""DistributedDataParallel training: sharding helpers, and a 2-process CPU (gloo) run under torchrun
that matches a 1-process run with the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from attnrec.models.sasrec import SASRec, SASRecConfig
from attnrec.training import distributed
from attnrec.training.step import loss_terms

SCRIPT = Path(__file__).with_name("train_script.py")
# Tolerance of a 2-process run against one process (same seed, same global batch, no dropout).
# Only the summation order of the gradient differs (two partial means weighted and all-reduced vs
# one mean), i.e. float32 rounding: measured weight differences are <= 6e-8 after 30 Adam steps,
# and the validation metrics and losses agree to 1e-7. The exception is the attention key bias:
# softmax ignores it, so its true gradient is exactly 0 and Adam turns rounding noise of either
# run into steps of up to lr each; it is only checked to stay within lr x steps.
WEIGHT_ATOL = 1e-6
METRIC_ATOL = 1e-6


def test_shard_bounds_follow_array_split() -> None:
    for rows in range(0, 20):
        for world in (1, 2, 3, 4):
            parts = np.array_split(np.arange(rows), world)
            for r in range(world):
                lo, hi = distributed.shard_bounds(rows, r, world)
                assert list(range(lo, hi)) == parts[r].tolist()


def test_shard_batch_splits_rows_and_keeps_shared_entries() -> None:
    m = SASRec(
        SASRecConfig(
            hidden=8,
            n_layers=1,
            max_len=6,
            loss="sampled_ce",
            sampler="popularity",
            n_negatives=5,
            in_batch_negatives=0,
        ),
        3,
        20,
    )
    from attnrec.data.schema import Sequences

    train = Sequences.from_lists([[1, 2, 3], [4, 5], [6, 7, 8, 9], [1, 3, 5, 7, 9, 11], [2, 4]], 20)
    batch = next(iter(m.train_batches(train, 5, np.random.default_rng(0))))
    assert batch["negative"].shape == (5,)  # as many negatives as rows: kept whole all the same
    a = distributed.shard_batch(batch, 0, 2, m.shared_batch_keys)
    b = distributed.shard_batch(batch, 1, 2, m.shared_batch_keys)
    assert len(a["seq"]) == 3 and len(b["seq"]) == 2
    assert torch.equal(torch.cat([a["target_logq"], b["target_logq"]]), batch["target_logq"])
    assert torch.equal(a["negative"], batch["negative"]) and torch.equal(b["neg_logq"], batch["neg_logq"])
    assert loss_terms(m, a) + loss_terms(m, b) == loss_terms(m, batch) == int((batch["target"] > 0).sum())


@pytest.mark.parametrize("loss", ["ce", "sampled_ce"])
def test_bert4rec_shards_weighted_by_masked_positions_give_the_global_loss(loss: str) -> None:
    from attnrec.data.schema import Sequences
    from attnrec.models.bert4rec import BERT4Rec, BERT4RecConfig

    torch.manual_seed(0)
    m = BERT4Rec(
        BERT4RecConfig(
            hidden=8,
            n_layers=1,
            max_len=8,
            dropout=0.0,
            attn_dropout=0.0,
            mask_prob=0.5,
            loss=loss,
            n_negatives=7,
            mask_last_prob=0.0,
        ),
        6,
        20,
    ).eval()
    train = Sequences.from_lists(
        [[1, 2, 3, 4, 5, 6, 7], [4, 5], [6, 7, 8, 9], [1, 3, 5, 7, 9, 11], [2, 4, 6]], 20
    )
    batch = next(iter(m.train_batches(train, 5, np.random.default_rng(3))))
    shards = [distributed.shard_batch(batch, r, 2, m.shared_batch_keys) for r in (0, 1)]
    terms = [loss_terms(m, s) for s in shards]
    assert sum(terms) == loss_terms(m, batch) == int((batch["labels"] > 0).sum())
    assert terms[0] != terms[1]  # unequal masked counts: weighting by rows would be wrong
    if loss == "sampled_ce":
        assert all(torch.equal(s["negative"], batch["negative"]) for s in shards)
    with torch.no_grad():
        weighted = sum(m.loss(s) * t for s, t in zip(shards, terms, strict=True)) / sum(terms)
        torch.testing.assert_close(weighted, m.loss(batch))


def _torchrun(args: list[str], tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp)


def test_two_process_ddp_matches_one_process(tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    import train_script  # type: ignore[import-not-found]

    out = tmp_path / "ddp"
    proc = _torchrun([str(SCRIPT), "ddp", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = json.loads((out / "summary.json").read_text())
    ddp_weights = load_file(str(out / "weights.safetensors"))

    one = train_script.ddp_run()  # the same run in this (single) process
    ref = train_script.summary(one)
    assert ddp["world_size"] == 2 and ref["world_size"] == 1
    # The group went once, with no DistributedDataParallel left to free after it (the shutdown abort).
    assert ddp["ddp_alive_at_destroy"] == [0]
    assert ddp["train"]["epochs"] == ref["train"]["epochs"] == train_script.DDP_TRAIN["max_epochs"]
    steps = ref["train"]["epochs"] * -(-train_script.DDP_USERS // train_script.DDP_TRAIN["batch_size"])
    for k, v in one.core.state_dict().items():
        diff = (v - ddp_weights[k]).abs().max().item()
        assert diff <= (WEIGHT_ATOL if not k.endswith("attn.k.bias") else 1e-3 * steps), (
            k,
            diff,
        )  # lr = 1e-3
    for h1, h2 in zip(ref["train"]["history"], ddp["train"]["history"], strict=True):
        assert h1["loss"] == pytest.approx(h2["loss"], abs=1e-5)  # the global batch loss, all-reduced
        for metric, value in h1["valid"].items():
            assert value == pytest.approx(h2["valid"][metric], abs=METRIC_ATOL), metric


@pytest.mark.slow
def test_cli_nproc_launches_torchrun(tmp_path: Path) -> None:
    data = tmp_path / "log.csv"
    rng = np.random.default_rng(0)
    rows = [f"u{u},i{(s + t) % 30},{t}" for u in range(60) for s in [int(rng.integers(30))] for t in range(8)]
    data.write_text("user,item,timestamp\n" + "\n".join(rows) + "\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    cmd = [
        sys.executable,
        "-m",
        "attnrec",
        "train",
        "--data",
        str(data),
        "--model",
        "sasrec",
        "--nproc",
        "2",
        "--set",
        "hidden=8",
        "--set",
        "n_layers=1",
        "--set",
        "max_len=8",
        "--set",
        "loss=ce",
        "--set",
        "batch_size=16",
        "--max-epochs",
        "2",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
        "--no-baseline",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.count("trained 2 epoch(s)") == 1  # only rank 0 reports, tests and saves
    assert (tmp_path / "run" / "weights.safetensors").exists()
    assert json.loads((tmp_path / "run" / "train_state" / "train_state.json").read_text())["epoch"] == 2
