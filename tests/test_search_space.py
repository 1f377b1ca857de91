"""Search spaces as data: TOML files over the defaults, their errors, conditional entries (no Optuna
needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attnrec.config import ConfigError
from attnrec.models.registry import get_spec
from attnrec.models.sasrec import SASRecConfig
from attnrec.search_space import Choice, Float, Int, SearchSpace, sample, space_from_toml
from attnrec.training.train_config import TrainConfig

CLASSES = {"model": SASRecConfig, "train": TrainConfig}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.toml"
    path.write_text(text)
    return path


class FirstOf:
    """A stand-in for an Optuna trial: the low end of every range, the first of every choice; records
    names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        self.names.append(name)
        return low

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        self.names.append(name)
        return low

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        self.names.append(name)
        return choices[0]


def test_toml_entries_become_typed_ranges_by_the_field_type(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[model]
dropout = {low = 0, high = 1}
n_layers = {low = 1, high = 4, step = 1}
n_negatives = {low = 16, high = 512, log = true, when = {loss = ["sampled_ce"]}}
loss = {choices = ["ce", "sampled_ce"]}
[train]
lr = {low = 1e-4, high = 1e-2, log = true}
""",
    )
    space = space_from_toml(path, CLASSES)
    assert space.model["dropout"] == Float(0.0, 1.0)  # a float field: ints in the file are floats
    assert space.model["n_layers"] == Int(1, 4, 1)
    assert space.model["n_negatives"] == Int(16, 512, 1, True, {"loss": ("sampled_ce",)})
    assert space.model["loss"] == Choice(("ce", "sampled_ce"))
    assert space.train["lr"] == Float(1e-4, 1e-2, log=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[model]\nno_such = {low = 0, high = 1}\n", r"space\.toml: unknown \[model\] key 'no_such'"),
        ("[train]\nlr_typo = {low = 0.1, high = 1}\n", r"space\.toml: unknown \[train\] key 'lr_typo'"),
        ("[optim]\nlr = {low = 0.1, high = 1}\n", r"space\.toml: unknown section\(s\) optim"),
        ("[model]\ndropout = {low = 0.1}\n", r"space\.toml: \[model\] dropout: needs low and high"),
        ("[model]\ndropout = 0.2\n", r"space\.toml: \[model\] dropout: expected a table"),
        (
            "[model]\ndropout = {low = 0.5, high = 0.1}\n",
            r"\[model\] dropout: low \(0\.5\) must be below high",
        ),
        ("[model]\nn_layers = {low = 1.5, high = 3}\n", r"\[model\] n_layers: low must be an integer"),
        # inf was an OverflowError traceback, nan "cannot convert float NaN to integer" without file or key
        ("[model]\nhidden = {low = 16, high = inf}\n", r"\[model\] hidden: high must be an integer, not inf"),
        ("[model]\nhidden = {low = nan, high = 64}\n", r"\[model\] hidden: low must be an integer, not nan"),
        # high = nan was "low (0.1) must be below high (nan)"
        ("[model]\ndropout = {low = 0.1, high = nan}\n", r"\[model\] dropout: high must be a finite number"),
        ("[model]\nloss = {low = 1, high = 3}\n", r"\[model\] loss: a str setting takes choices"),
        (
            "[model]\ndropout = {low = 0.1, high = 0.5, step = 0.1}\n",
            r"step applies to integer settings only",
        ),
        (
            "[model]\ndropout = {low = 0.1, high = 0.5, lo = 1}\n",
            r"\[model\] dropout: unknown entry key\(s\) lo",
        ),
        ("[train]\nlr = {low = 0, high = 0.1, log = true}\n", r"\[train\] lr: a log range needs low > 0"),
        ("[model]\nhidden = {choices = []}\n", r"\[model\] hidden: choices must not be empty"),
        (
            '[model]\nn_negatives = {low = 8, high = 64, when = {losss = ["ce"]}}\n',
            r"'when' names 'losss', which must be a model setting",
        ),
        ("[model]\ndropout = {low = 0.1 high = 0.2}\n", r"space\.toml: invalid TOML"),
        (
            '[model]\nloss = {choices = ["ce"], when = {hidden = [64]}}\n'
            'n_negatives = {low = 8, high = 64, when = {loss = ["sampled_ce"]}}\n',
            r"n_negatives: 'when' names 'loss', which must be a model setting, searched unconditionally",
        ),
    ],
)
def test_space_file_errors_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        space_from_toml(write(tmp_path, text), CLASSES)


def test_missing_space_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: config file not found"):
        space_from_toml(tmp_path / "nope.toml", CLASSES)


def test_values_are_checked_against_the_config(tmp_path: Path) -> None:
    space = space_from_toml(write(tmp_path, '[model]\nloss = {choices = ["ce", "hinge"]}\n'), CLASSES)
    with pytest.raises(ConfigError, match=r"space\.toml: \[model\] loss = 'hinge' is not a valid setting"):
        space.check_values({"model": SASRecConfig(), "train": TrainConfig()}, "space.toml")


def test_a_file_entry_replaces_the_default_and_fixed_keys_are_dropped(tmp_path: Path) -> None:
    default = get_spec("sasrec").search_space
    assert default is not None
    merged = default.merged(
        space_from_toml(write(tmp_path, "[model]\ndropout = {low = 0.05, high = 0.15}\n"), CLASSES)
    )
    assert merged.model["dropout"] == Float(0.05, 0.15)
    assert merged.model["hidden"] == default.model["hidden"]  # untouched defaults stay
    fewer = merged.without({"model": ["loss"], "train": ["lr"]})
    assert "loss" not in fewer.model and "lr" not in fewer.train and "dropout" in fewer.model


def test_conditional_entries_are_sampled_only_when_their_condition_holds() -> None:
    space = SearchSpace(
        model={
            "loss": Choice(("ce", "sampled_ce")),
            "n_negatives": Int(8, 64, when={"loss": ("sampled_ce",)}),
        }
    )
    trial = FirstOf()
    assert sample(space, trial, {"model": {}, "train": {}}) == {"model": {"loss": "ce"}, "train": {}}
    assert trial.names == ["model.loss"]
    # a condition on a key that is not searched reads its fixed value
    only_negatives = SearchSpace(model={"n_negatives": Int(8, 64, when={"loss": ("sampled_ce",)})})
    assert sample(only_negatives, FirstOf(), {"model": {"loss": "sampled_ce"}})["model"] == {"n_negatives": 8}
    assert sample(only_negatives, FirstOf(), {"model": {"loss": "ce"}})["model"] == {}


def test_declared_spaces_fit_their_configs() -> None:
    for name in ("sasrec", "bert4rec"):
        spec = get_spec(name)
        assert spec.search_space is not None and len(spec.search_space) >= 8
        spec.search_space.check({"model": spec.config_cls, "train": TrainConfig}, name)
        spec.search_space.check_values({"model": spec.config_cls(), "train": TrainConfig()}, name)


def test_a_range_must_fit_its_field() -> None:
    with pytest.raises(ConfigError, match=r"\[model\] hidden: a Float range does not fit a int setting"):
        SearchSpace(model={"hidden": Float(8.0, 64.0)}).check(CLASSES, "here")


def test_entries_whose_condition_can_never_hold_are_dropped() -> None:
    space = SearchSpace(
        model={"n_negatives": Int(8, 64, when={"loss": ("sampled_ce",)}), "dropout": Float(0.0, 0.5)}
    )
    assert "n_negatives" not in space.reachable({"model": {"loss": "ce"}}).model  # loss fixed to ce
    assert "n_negatives" in space.reachable({"model": {"loss": "sampled_ce"}}).model
    searched = SearchSpace(model={"loss": Choice(("bce", "ce")), **space.model})
    assert sorted(searched.reachable({"model": {"loss": "sampled_ce"}}).model) == ["dropout", "loss"]
