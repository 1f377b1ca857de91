import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from attnrec.checkpoint import CheckpointError
from attnrec.data.schema import Interactions
from attnrec.data.split import leave_one_out
from attnrec.models.sasrec import SASRec, SASRecConfig
from attnrec.training.config import TrainConfig
from attnrec.training.loop import train

CFG = SASRecConfig(hidden=16, n_layers=1, max_len=10, loss="ce")


def _model(ring: Interactions) -> SASRec:
    torch.manual_seed(0)
    return SASRec(CFG, ring.n_users, ring.n_items)


def test_best_validation_epoch_weights_are_restored(ring: Interactions) -> None:
    split = leave_one_out(ring)
    m = _model(ring)
    values = iter([0.1, 0.5, 0.3, 0.2, 0.1, 0.0])
    snapshots = []

    def validate(module: torch.nn.Module) -> dict[str, float]:
        snapshots.append({k: v.clone() for k, v in module.state_dict().items()})
        return {"NDCG@10": next(values)}

    res = train(m, split.train, validate, TrainConfig(max_epochs=6, patience=3, batch_size=64), progress=False)
    assert res.best_epoch == 2 and res.epochs == 5 and "no validation improvement" in res.stopped
    for k, v in m.state_dict().items():
        assert torch.equal(v, snapshots[1][k])


def test_min_mode_and_lr_decay_stop(ring: Interactions) -> None:
    split = leave_one_out(ring)
    m = _model(ring)
    cfg = TrainConfig(max_epochs=20, optimizer="sgd", lr=0.5, lr_decay=0.25, max_lr_decays=2, monitor="loss",
                      mode="min", batch_size=64, grad_clip=1.0)
    res = train(m, split.train, lambda _: {"loss": 1.0}, cfg, progress=False)
    assert res.best_epoch == 1 and res.epochs == 3 and "lowered 2 times" in res.stopped


def _final_state(ring: Interactions, epochs: int, state_dir: Path | None, seed: int = 3) -> dict[str, torch.Tensor]:
    split = leave_one_out(ring)
    m = _model(ring)  # the same initial weights whatever the training seed
    cfg = TrainConfig(max_epochs=epochs, patience=100, batch_size=64, seed=seed)
    # Always improving, so the final weights are those of the last epoch in both runs.
    train(m, split.train, lambda _: {"NDCG@10": time.monotonic()}, cfg, state_dir=state_dir, progress=False)
    return m.state_dict()


def test_resume_continues_exactly(ring: Interactions, tmp_path: Path) -> None:
    uninterrupted = _final_state(ring, 4, None)
    _final_state(ring, 2, tmp_path)  # "crash" after epoch 2
    resumed = _final_state(ring, 4, tmp_path)
    for k, v in uninterrupted.items():
        assert torch.equal(v, resumed[k]), k


def test_same_seed_same_weights_other_seed_differs(ring: Interactions) -> None:
    a = _final_state(ring, 2, None)
    b = _final_state(ring, 2, None)
    other = _final_state(ring, 2, None, seed=4)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # Another seed shuffles (and drops out) differently from the same start: the training seed is used.
    changed = [k for k in a if not torch.equal(a[k], other[k])]
    assert "item_emb.weight" in changed and len(changed) > len(a) // 2, changed


def _state_file(state_dir: Path) -> Path:
    return state_dir / json.loads((state_dir / "train_state.json").read_text())["tensors"]


def test_corrupted_training_state_is_detected(ring: Interactions, tmp_path: Path) -> None:
    _final_state(ring, 1, tmp_path)
    f = _state_file(tmp_path)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        _final_state(ring, 2, tmp_path)


def test_truncated_training_state_is_detected(ring: Interactions, tmp_path: Path) -> None:
    _final_state(ring, 1, tmp_path)
    f = _state_file(tmp_path)
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        _final_state(ring, 2, tmp_path)
    f.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        _final_state(ring, 2, tmp_path)
    meta = tmp_path / "train_state.json"
    _final_state(ring, 1, tmp_path / "fresh")
    text = (tmp_path / "fresh" / "train_state.json").read_text()
    meta.write_text(text[: len(text) // 2])  # a JSON cut off mid-write
    with pytest.raises(CheckpointError, match="corrupted JSON"):
        _final_state(ring, 2, tmp_path)
    meta.write_text('{"epoch": 1}')  # valid JSON, but not a complete state
    with pytest.raises(CheckpointError, match="incomplete"):
        _final_state(ring, 2, tmp_path)


def test_time_budget_and_monitor_errors(ring: Interactions) -> None:
    split = leave_one_out(ring)
    res = train(_model(ring), split.train, lambda _: {"NDCG@10": 0.0},
                TrainConfig(max_epochs=50, time_budget=1e-6, batch_size=64), progress=False)
    assert res.epochs == 1 and "time budget" in res.stopped
    with pytest.raises(KeyError, match="monitor"):
        train(_model(ring), split.train, lambda _: {"HR@10": 0.0}, TrainConfig(max_epochs=1), progress=False)
    assert np.isfinite(res.history[0]["loss"])


def test_cosine_schedule_sets_each_epochs_learning_rate(ring: Interactions, monkeypatch: pytest.MonkeyPatch) -> None:
    import attnrec.training.loop as loop

    seen: list[float] = []
    real = loop.make_optimizer

    def spy(module: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
        opt = real(module, cfg)
        step = opt.step

        def recording_step(*args: object, **kwargs: object) -> object:
            seen.append(opt.param_groups[0]["lr"])
            return step(*args, **kwargs)

        opt.step = recording_step  # type: ignore[method-assign]
        return opt

    monkeypatch.setattr(loop, "make_optimizer", spy)
    split = leave_one_out(ring)
    cfg = TrainConfig(max_epochs=4, patience=100, batch_size=100_000, lr=0.01, lr_schedule="cosine")
    train(_model(ring), split.train, lambda _: {"NDCG@10": time.monotonic()}, cfg, progress=False)
    # one batch per epoch: 0.01 * (1 + cos(pi * e / 4)) / 2 for e = 0..3
    assert seen == pytest.approx([0.01, 0.01 * (1 + 2**-0.5) / 2, 0.005, 0.01 * (1 - 2**-0.5) / 2])


def test_learning_rate_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="lr_schedule must be"):
        TrainConfig(lr_schedule="step")
    with pytest.raises(ValueError, match="choose one"):
        TrainConfig(lr_schedule="cosine", lr_decay=0.5)
