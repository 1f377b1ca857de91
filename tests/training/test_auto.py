"""Settings chosen from the data (attnrec.training.auto) and where they apply.

The rules are pure functions of a split's shape; these tests pin each rule at its thresholds, that a
given setting is never replaced, and that the Recommender and the CLI use them exactly when no preset
(or config file) is named.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from attnrec import Recommender, get_spec
from attnrec.cli.main import app
from attnrec.config import ConfigError
from attnrec.data.build import from_columns
from attnrec.data.split import leave_one_out
from attnrec.models.sasrec import SASRecConfig
from attnrec.training.auto import CE_LOGITS_PER_EPOCH, CE_MAX_ITEMS, SPARSE_EVENTS, DataShape, choose
from synthetic_logs import ring_log

SASREC = get_spec("sasrec")


def shape(**kw: object) -> DataShape:
    values: dict[str, object] = {
        "n_items": 1_000,
        "train_events": 50_000,
        "history_p90": 40.0,
        "valid_users": 1_000,
        "train_users": 3_000,
        "positions": {50: 40_000, 100: 45_000, 200: 48_000},
    }
    return DataShape(**(values | kw))  # type: ignore[arg-type]


def test_data_shape_counts_the_training_split() -> None:
    # users of 5, 3 and 12 items; leave-one-out holds out two of each (validation, test)
    users = ["a"] * 5 + ["b"] * 3 + ["c"] * 12
    data = from_columns(users, [f"i{k}" for k in range(len(users))])
    s = DataShape.of(leave_one_out(data), data.n_items)
    assert (s.n_items, s.train_events, s.valid_users, s.train_users) == (20, 3 + 1 + 10, 3, 2)
    # one next-item position fewer than items, at most the window
    assert s.positions == {50: 2 + 0 + 9, 100: 11, 200: 11}
    assert s.history_p90 == pytest.approx(np.percentile([3, 1, 10], 90))


@pytest.mark.parametrize(("p90", "window"), [(12.0, 50), (50.0, 50), (51.0, 100), (180.0, 200), (900.0, 200)])
def test_on_dense_data_the_window_is_the_smallest_that_covers_most_histories(p90: float, window: int) -> None:
    chosen = choose(SASREC, shape(history_p90=p90, train_events=SPARSE_EVENTS), {}, {})
    assert chosen.model["max_len"] == window


def test_on_sparse_data_the_window_is_the_papers_50_however_long_the_histories() -> None:
    chosen = choose(SASREC, shape(history_p90=900.0, train_events=SPARSE_EVENTS - 1), {}, {})
    assert chosen.model["max_len"] == 50


@pytest.mark.parametrize(
    ("users", "batch"), [(100_000, 128), (2_560, 128), (2_559, 64), (1_280, 64), (1_279, 32), (50, 32)]
)
def test_the_batch_gives_about_20_steps_an_epoch(users: int, batch: int) -> None:
    assert choose(SASREC, shape(train_users=users), {}, {}).train["batch_size"] == batch


def test_dropout_follows_the_papers_sparse_and_dense_regimes() -> None:
    sparse = choose(SASREC, shape(train_events=SPARSE_EVENTS - 1), {}, {})
    dense = choose(SASREC, shape(train_events=SPARSE_EVENTS), {}, {})
    assert (sparse.model["dropout"], dense.model["dropout"]) == (0.5, 0.2)


def test_a_full_softmax_unless_an_epoch_of_it_is_too_long() -> None:
    positions = {50: 400_000, 100: 450_000, 200: 480_000}
    at_bound = CE_LOGITS_PER_EPOCH // 400_000  # the catalog at which 400,000 positions reach the bound
    assert at_bound <= CE_MAX_ITEMS
    small = choose(SASREC, shape(n_items=at_bound, positions=positions), {}, {})
    large = choose(SASREC, shape(n_items=at_bound + 1, positions=positions), {}, {})
    assert (small.model["loss"], small.model["fast_ce"]) == ("ce", True)
    assert (large.model["loss"], large.model["n_negatives"]) == ("sampled_ce", 256)
    assert "fast_ce" not in large.model


def test_a_large_catalog_takes_the_sampled_softmax_however_little_data() -> None:
    small = choose(SASREC, shape(n_items=CE_MAX_ITEMS), {}, {})
    large = choose(SASREC, shape(n_items=CE_MAX_ITEMS + 1, positions={50: 100}), {}, {})
    assert (small.model["loss"], large.model["loss"]) == ("ce", "sampled_ce")
    assert any(f"items is over {CE_MAX_ITEMS:,}" in r for r in large.reasons)


def test_noise_aware_stopping_only_on_a_small_validation_set() -> None:
    small = choose(SASREC, shape(valid_users=2_000), {}, {})
    large = choose(SASREC, shape(valid_users=20_000), {}, {})
    assert (small.train["smooth"], small.train["min_epochs"], small.train["patience"]) == (3, 20, 10)
    assert "smooth" not in large.train and large.train["patience"] == 10


def test_given_settings_are_never_replaced_and_their_reasons_are_not_claimed() -> None:
    chosen = choose(SASREC, shape(), {"max_len": 20, "dropout": 0.1, "loss": "bce"}, {"patience": 3})
    assert {"max_len", "dropout", "loss", "fast_ce"}.isdisjoint(chosen.model)
    assert "patience" not in chosen.train and chosen.train["smooth"] == 3
    assert not any(r.startswith(("max_len", "loss")) for r in chosen.reasons)


def test_models_take_only_the_rules_they_have_settings_for() -> None:
    bert = choose(get_spec("bert4rec"), shape(), {}, {})
    assert set(bert.model) == {"max_len"}  # its own objective and width stay the model's
    pop = choose(get_spec("pop"), shape(), {}, {})
    assert pop.model == {}


def test_recommender_chooses_only_without_preset_and_settings() -> None:
    data = ring_log(n_users=40, n_items=30)
    rec = Recommender("sasrec", train={"max_epochs": 1, "min_epochs": 0}).fit(data, progress=False)
    chosen: SASRecConfig = rec.config  # type: ignore[assignment]
    assert rec.auto_ is not None and chosen.loss == "ce" and chosen.max_len == 50
    assert rec.train_config.batch_size == 32  # 40 users
    assert rec.train_config.max_epochs == 1 and rec.train_config.smooth == 3  # given kept, rest chosen

    plain = Recommender("sasrec", {"hidden": 16}, {"max_epochs": 1}).fit(data, progress=False)
    assert plain.auto_ is None and plain.config.loss == "bce"  # type: ignore[attr-defined]

    filled = Recommender("sasrec", {"hidden": 16}, {"max_epochs": 1}, auto=True).fit(data, progress=False)
    assert filled.config.hidden == 16 and filled.config.loss == "ce"  # type: ignore[attr-defined]

    preset = Recommender("sasrec", train={"max_epochs": 1}, preset="paper-sparse")
    assert not preset.auto
    with pytest.raises(ConfigError, match="complete recipe"):
        Recommender("sasrec", preset="paper", auto=True)


def test_a_saved_auto_model_loads_with_its_chosen_settings(tmp_path: Path) -> None:
    rec = Recommender("sasrec", train={"max_epochs": 1}).fit(ring_log(n_users=30), progress=False)
    back = Recommender.load(rec.save(tmp_path / "m"))
    assert back.config == rec.config and not back.auto


def test_cli_train_prints_what_it_chose_and_no_auto_keeps_the_defaults(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["train", "--data", "demo", "--max-epochs", "1", "--no-baseline", "--out"]
    chosen = runner.invoke(app, [*args, str(tmp_path / "a")])
    assert chosen.exit_code == 0, chosen.output
    assert "chosen from the data: loss ce" in " ".join(chosen.output.split())
    plain = runner.invoke(app, [*args, str(tmp_path / "b"), "--no-auto"])
    assert plain.exit_code == 0, plain.output
    assert "chosen from the data" not in plain.output
    assert Recommender.load(tmp_path / "b").config.loss == "bce"  # type: ignore[attr-defined]
    assert Recommender.load(tmp_path / "a").config.loss == "ce"  # type: ignore[attr-defined]
