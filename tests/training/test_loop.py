import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from attnrec.checkpoint import CheckpointError
from attnrec.data.build import from_columns
from attnrec.data.schema import DataSource, Interactions
from attnrec.data.split import leave_one_out
from attnrec.models.sasrec import SASRec, SASRecConfig
from attnrec.training.loop import train
from attnrec.training.train_config import TrainConfig

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

    res = train(
        m, split.train, validate, TrainConfig(max_epochs=6, patience=3, batch_size=64), progress=False
    )
    assert res.best_epoch == 2 and res.epochs == 5 and "no validation improvement" in res.stopped
    for k, v in m.state_dict().items():
        assert torch.equal(v, snapshots[1][k])


def test_training_data_without_a_training_row_is_a_clear_error_not_a_nan_loss() -> None:
    # three events a user: leave-one-out keeps one for training, and a next-item model needs two
    log = from_columns(
        ["u1"] * 3 + ["u2"] * 3, ["a", "b", "c", "b", "c", "d"], source=DataSource("tiny", sha256="0" * 64)
    )
    split = leave_one_out(log)
    m = SASRec(CFG, log.n_users, log.n_items)
    with pytest.raises(ValueError, match="no training rows"):
        train(m, split.train, lambda _: {"NDCG@10": 0.0}, TrainConfig(max_epochs=1), progress=False)


def test_min_mode_and_lr_decay_stop(ring: Interactions) -> None:
    split = leave_one_out(ring)
    m = _model(ring)
    cfg = TrainConfig(
        max_epochs=20,
        optimizer="sgd",
        lr=0.5,
        lr_decay=0.25,
        max_lr_decays=2,
        monitor="loss",
        mode="min",
        batch_size=64,
        grad_clip=1.0,
    )
    res = train(m, split.train, lambda _: {"loss": 1.0}, cfg, progress=False)
    assert res.best_epoch == 1 and res.epochs == 3 and "lowered 2 times" in res.stopped


def _final_state(
    ring: Interactions, epochs: int, state_dir: Path | None, seed: int = 3
) -> dict[str, torch.Tensor]:
    split = leave_one_out(ring)
    m = _model(ring)  # the same initial weights whatever the training seed
    cfg = TrainConfig(max_epochs=epochs, patience=100, batch_size=64, seed=seed)
    # Always improving, so the final weights are those of the last epoch in both runs.
    train(m, split.train, lambda _: {"NDCG@10": time.monotonic()}, cfg, state_dir=state_dir, progress=False)
    return m.state_dict()


def test_bf16_autocast_trains_float32_weights_to_the_float32_runs_losses(ring: Interactions) -> None:
    """``amp = "bf16"`` changes the arithmetic of the forward pass, not the model: the weights and their
    optimizer stay float32, and each epoch's loss is the float32 run's to bfloat16 rounding (but not
    equal to it: autocast took effect)."""
    split = leave_one_out(ring)
    losses = {}
    for amp in ("none", "bf16"):
        m = _model(ring)
        cfg = TrainConfig(max_epochs=3, patience=100, batch_size=64, seed=1, amp=amp)
        res = train(m, split.train, lambda _: {"NDCG@10": time.monotonic()}, cfg, progress=False)
        assert all(p.dtype == torch.float32 for p in m.parameters())
        losses[amp] = np.array([h["loss"] for h in res.history])
    assert np.isfinite(losses["bf16"]).all() and losses["bf16"][-1] < losses["bf16"][0]
    assert np.allclose(losses["bf16"], losses["none"], rtol=0.02) and not np.array_equal(
        losses["bf16"], losses["none"]
    )


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
    res = train(
        _model(ring),
        split.train,
        lambda _: {"NDCG@10": 0.0},
        TrainConfig(max_epochs=50, time_budget=1e-6, batch_size=64),
        progress=False,
    )
    assert res.epochs == 1 and "time budget" in res.stopped
    with pytest.raises(KeyError, match="monitor"):
        train(_model(ring), split.train, lambda _: {"HR@10": 0.0}, TrainConfig(max_epochs=1), progress=False)
    assert np.isfinite(res.history[0]["loss"])


def test_cosine_schedule_sets_each_epochs_learning_rate(
    ring: Interactions, monkeypatch: pytest.MonkeyPatch
) -> None:
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


def _stop_epoch(ring: Interactions, values: list[float], **cfg: object) -> tuple[int, int, str]:
    """(epochs run, best epoch, stop reason) for a scripted validation curve."""
    split = leave_one_out(ring)
    curve = iter(values)
    res = train(
        _model(ring),
        split.train,
        lambda _: {"NDCG@10": next(curve)},
        TrainConfig(max_epochs=len(values), batch_size=64, **cfg),
        progress=False,
    )  # type: ignore[arg-type]
    return res.epochs, res.best_epoch, res.stopped


# A slowly rising curve with noise: raw patience 2 stops at the first dip pair, a 3-point mean does not.
NOISY = [0.10, 0.14, 0.12, 0.11, 0.15, 0.13, 0.16, 0.15, 0.14, 0.13, 0.12, 0.11]


def test_smoothed_patience_rides_out_noise_that_stops_raw_patience(ring: Interactions) -> None:
    assert _stop_epoch(ring, NOISY, patience=2)[:2] == (4, 2)
    epochs, best, stopped = _stop_epoch(ring, NOISY, patience=2, smooth=3)
    # 3-point means: .10 .12 .12 .123 .127 .13 .147 .147 .15 .14 .13 .12 -> best at epoch 9, stop 2 later
    assert (epochs, best) == (11, 7) and "mean of the last 3 validations" in stopped


def test_min_epochs_defers_patience_but_not_the_best_weights(ring: Interactions) -> None:
    epochs, best, _ = _stop_epoch(ring, NOISY, patience=2, min_epochs=8)
    assert (epochs, best) == (9, 7)  # patience exhausted at 4 but allowed to stop only from epoch 8 on


def test_smoothed_bad_counts_from_the_best_moving_average() -> None:
    from attnrec.training.loop import smoothed_bad

    assert smoothed_bad([], 3, "max") == 0
    assert smoothed_bad([0.3, 0.2, 0.1], 1, "max") == 2
    assert smoothed_bad([0.3, 0.2, 0.1], 1, "min") == 0
    assert smoothed_bad([0.1, 0.3, 0.2, 0.2], 2, "max") == 1  # means .1 .2 .25 .2


def test_noise_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="smooth >= 1"):
        TrainConfig(smooth=0)
    with pytest.raises(ValueError, match="min_epochs"):
        TrainConfig(min_epochs=-1)


def test_small_validation_is_called_noisy_and_a_large_one_is_not(caplog: pytest.LogCaptureFixture) -> None:
    from attnrec.data.schema import DataSource
    from attnrec.evaluation.metrics import ranking_metrics, ranking_standard_errors
    from attnrec.evaluation.protocol import FULL, EvalResult
    from attnrec.recommend.model_core import warn_if_noisy

    def result(n: int) -> EvalResult:
        ranks = np.where(np.arange(n) % 20 == 0, 0, 500)  # 5% hits at rank 0: NDCG@10 0.05
        return EvalResult(
            ranking_metrics(ranks),
            FULL,
            "s",
            "valid",
            n,
            DataSource("d"),
            0.0,
            standard_errors=ranking_standard_errors(ranks),
        )

    # se = sqrt(.05 * .95 / n): 0.0069 (14%) on 1,000 users, 0.0015 (3%) on 20,000
    text = warn_if_noisy(result(1000), TrainConfig(patience=5))
    assert "NDCG@10 0.0500 +- 0.0069" in text and "1,000 users" in text and "patience 5" in text
    assert text in caplog.text
    assert warn_if_noisy(result(20_000), TrainConfig()) == ""
    assert warn_if_noisy(result(1000), TrainConfig(smooth=3)) == ""  # the rule already smooths


def test_time_budget_stops_inside_an_epoch_and_keeps_the_validated_weights(ring: Interactions) -> None:
    split = leave_one_out(ring)
    m = _model(ring)
    drawn = []
    batches = m.train_batches

    def counted(*args: object, **kwargs: object) -> object:
        for b in batches(*args, **kwargs):  # type: ignore[arg-type]
            drawn.append(1)
            yield b

    m.train_batches = counted  # type: ignore[method-assign]
    validated: list[dict[str, torch.Tensor]] = []

    def validate(module: torch.nn.Module) -> dict[str, float]:
        validated.append({k: v.clone() for k, v in module.state_dict().items()})
        return {"NDCG@10": 0.1}

    cfg = TrainConfig(max_epochs=50, time_budget=1e-6, batch_size=8)
    assert m.train_rows(split.train) > 8 * 3  # several batches an epoch, only the first is trained
    res = train(m, split.train, validate, cfg, progress=False)
    assert len(drawn) == 1 and res.epochs == 1 and "valid" in res.history[0]
    assert "time budget" in res.stopped
    assert len(validated) == 1 and all(torch.equal(v, m.state_dict()[k]) for k, v in validated[0].items())


def test_the_stop_reason_names_the_epoch_limit_when_patience_could_not_stop_earlier(
    ring: Interactions,
) -> None:
    split = leave_one_out(ring)
    values = iter([0.5, 0.4, 0.3, 0.2])
    cfg = TrainConfig(max_epochs=4, min_epochs=4, patience=1, batch_size=64)
    res = train(_model(ring), split.train, lambda _: {"NDCG@10": next(values)}, cfg, progress=False)
    assert res.epochs == 4 and res.stopped == "epoch limit of 4 reached"
