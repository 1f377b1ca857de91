"""Exact resume from mid-epoch training states: in process, and after SIGKILL of a training process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnrec.checkpoint import CheckpointError
from attnrec.data.schema import Interactions
from attnrec.data.split import leave_one_out
from attnrec.models.sasrec import SASRec, SASRecConfig
from attnrec.training.loop import train
from attnrec.training.train_config import TrainConfig

SCRIPT = Path(__file__).with_name("train_script.py")
CFG = SASRecConfig(hidden=16, n_layers=1, max_len=10, loss="bce", dropout=0.3)


class Crash(Exception):
    pass


class CrashingSASRec(SASRec):
    """Raises after ``crash_after`` loss evaluations: a crash in the middle of an epoch."""

    crash_after = 10**9
    calls = 0

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.crash_after:
            raise Crash(f"crash at loss evaluation {self.calls}")
        return super().loss(batch)


def _run(
    ring: Interactions, state_dir: Path | None, crash_after: int | None = None, **over: object
) -> tuple[dict[str, torch.Tensor], list[dict[str, object]]]:
    split = leave_one_out(ring)
    torch.manual_seed(0)
    m = CrashingSASRec(CFG, ring.n_users, ring.n_items)
    if crash_after is not None:
        m.crash_after = crash_after
    cfg = TrainConfig(
        **({"max_epochs": 3, "patience": 100, "batch_size": 16, "seed": 4, "checkpoint_every": 3} | over)
    )  # type: ignore[arg-type]
    res = train(
        m, split.train, lambda _: {"NDCG@10": time.monotonic()}, cfg, state_dir=state_dir, progress=False
    )
    return m.state_dict(), [{"epoch": h["epoch"], "loss": h["loss"]} for h in res.history]


def test_mid_epoch_resume_is_exact(ring: Interactions, tmp_path: Path) -> None:
    ref_state, ref_history = _run(ring, None)
    # 150 users / 16 = 10 batches per epoch: crash in epoch 2 after 14 batches, 3 after the last save.
    with pytest.raises(Crash, match="crash at loss evaluation 18"):
        _run(ring, tmp_path, crash_after=17)
    meta = json.loads((tmp_path / "train_state.json").read_text())
    assert (meta["epoch"], meta["batch"]) == (1, 6)
    assert len(list(tmp_path.glob("*.safetensors"))) == 1  # older states are removed
    state, history = _run(ring, tmp_path)
    for k, v in ref_state.items():
        assert torch.equal(v, state[k]), k
    assert history == ref_history  # the resumed epoch's mean loss includes the batches before the crash


def test_a_state_dir_that_is_a_file_is_refused_before_training(ring: Interactions, tmp_path: Path) -> None:
    """A file as ``state_dir`` ended the first epoch in ``FileExistsError``; it is one line, before any
    batch, and the file is left as it was."""
    taken = tmp_path / "notes.txt"
    taken.write_text("mine")
    with pytest.raises(CheckpointError, match="the training state_dir is a directory, and a file is there"):
        _run(ring, taken, crash_after=0)  # a batch would crash
    assert taken.read_text() == "mine"


def test_resume_refuses_a_different_data_stream(ring: Interactions, tmp_path: Path) -> None:
    with pytest.raises(Crash, match="crash at loss evaluation 15"):
        _run(ring, tmp_path, crash_after=14)
    meta = json.loads((tmp_path / "train_state.json").read_text())
    del meta["settings"]  # a state saved before settings were recorded: the batch stream still tells
    (tmp_path / "train_state.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="different training data, batch size"):
        _run(ring, tmp_path, seed=5)


def test_resume_refuses_other_training_settings_but_takes_a_longer_budget(
    ring: Interactions, tmp_path: Path
) -> None:
    ref_state, ref_history = _run(ring, None)
    with pytest.raises(Crash, match="crash at loss evaluation 15"):
        _run(ring, tmp_path, crash_after=14)
    for over, named in (
        ({"lr": 2e-3}, "lr=0.001 (now 0.002)"),
        ({"seed": 5}, "seed=4 (now 5)"),
        ({"batch_size": 8}, "batch_size=16 (now 8)"),
        ({"weight_decay": 0.1}, "weight_decay"),
    ):
        with pytest.raises(
            CheckpointError,
            match=r"saved with other settings: .*" + named.replace("(", r"\(").replace(")", r"\)"),
        ) as err:
            _run(ring, tmp_path, **over)
        assert "\n" not in str(err.value)
    # budgets and stopping rules may change: the run continues exactly
    state, history = _run(ring, tmp_path, time_budget=3600.0, patience=50, min_epochs=2)
    assert history == ref_history and all(torch.equal(v, state[k]) for k, v in ref_state.items())


def test_time_based_checkpoints(ring: Interactions, tmp_path: Path) -> None:
    with pytest.raises(Crash, match="crash at loss evaluation 16"):
        _run(ring, tmp_path, crash_after=15, checkpoint_every=0, checkpoint_seconds=1e-9)
    meta = json.loads((tmp_path / "train_state.json").read_text())
    assert (meta["epoch"], meta["batch"]) == (1, 5)  # saved after every batch


def _wait_for_mid_epoch_state(
    state: Path, proc: subprocess.Popen[bytes], timeout: float = 120.0
) -> dict[str, int]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise AssertionError(
                f"training exited early: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        try:
            meta = json.loads(state.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            meta = {}
        if meta.get("epoch", 0) >= 1 and meta.get("batch", 0) > 0:
            return meta
        time.sleep(0.02)
    raise AssertionError("no mid-epoch training state appeared")


def test_sigkill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    import train_script  # type: ignore[import-not-found]

    state_dir = tmp_path / "state"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "resume", str(state_dir), "--sleep", "0.05"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        meta = _wait_for_mid_epoch_state(state_dir / "train_state.json", proc)
        time.sleep(0.07)  # let it train past the saved position before the kill
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = json.loads((state_dir / "train_state.json").read_text())
    assert killed_at["batch"] > 0 and killed_at["epoch"] >= meta["epoch"]

    resumed = train_script.resume_run(state_dir)
    reference = train_script.resume_run(None)
    for k, v in reference.core.state_dict().items():
        assert torch.equal(v, resumed.core.state_dict()[k]), k
    assert resumed.train_result_.best_metrics == reference.train_result_.best_metrics
    data = train_script.ring_log()
    test = leave_one_out(data).test
    assert resumed.evaluate(test).metrics == reference.evaluate(test).metrics
