from dataclasses import dataclass
from pathlib import Path

import pytest

from attnrec.config import ConfigError, config_from_dict, config_to_dict, load_toml, parse_overrides
from attnrec.models.sasrec import SASRecConfig
from attnrec.training.train_config import TrainConfig


@dataclass(frozen=True)
class Example:
    n: int = 1
    x: float = 0.5
    flag: bool = False
    name: str = "a"
    ks: tuple[int, ...] = (1, 5)
    maybe: float | None = None


def test_strings_are_coerced_to_field_types() -> None:
    c = config_from_dict(Example, {"n": "3", "x": "1e-3", "flag": "yes", "ks": "1,5,10", "maybe": "none"})
    assert c == Example(3, 1e-3, True, "a", (1, 5, 10), None)
    assert config_from_dict(Example, config_to_dict(c)) == c


def test_unknown_keys_are_errors_that_list_valid_keys() -> None:
    with pytest.raises(ConfigError, match="unknown key.*hiden.*valid keys: .*hidden"):
        config_from_dict(SASRecConfig, {"hiden": 64})


def test_bad_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="n"):
        config_from_dict(Example, {"n": "three"})
    with pytest.raises(ConfigError, match="not a valid int"):
        config_from_dict(Example, {"n": 2.5})
    with pytest.raises(ConfigError, match="loss"):
        config_from_dict(SASRecConfig, {"loss": "hinge"})
    with pytest.raises(ConfigError, match="optimizer must be adam, adamw or sgd, not 'lbfgs'"):
        config_from_dict(TrainConfig, {"optimizer": "lbfgs"})


@pytest.mark.parametrize("key", ["lr", "beta1", "weight_decay", "time_budget"])
@pytest.mark.parametrize("value", [float("nan"), "nan", float("inf")])
def test_a_training_number_that_is_not_finite_is_refused(key: str, value: object) -> None:
    """``lr=nan`` passed the "must be positive" check (nan <= 0 is false) and trained NaN weights."""
    with pytest.raises(ConfigError, match=f"TrainConfig: {key} must be a finite number, not (nan|inf)"):
        config_from_dict(TrainConfig, {key: value})


def test_overrides_and_toml(tmp_path: Path) -> None:
    assert parse_overrides(["a=1", "b = x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError, match="'novalue' is not of the form key=value"):
        parse_overrides(["novalue"])
    f = tmp_path / "c.toml"
    f.write_text("[model]\nhidden = 32\n[train]\nlr = 0.01\n")
    assert load_toml(f, ("model", "train")) == {"model": {"hidden": 32}, "train": {"lr": 0.01}}
    f.write_text("[modle]\nhidden = 32\n")
    with pytest.raises(ConfigError, match="unknown section"):
        load_toml(f, ("model", "train"))
    f.write_text("[model\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_toml(f, ("model",))


@pytest.mark.parametrize("model", ["sasrec", "bert4rec", "gsasrec", "esasrec", "peter"])
def test_a_dropout_rate_outside_zero_to_one_is_refused_with_the_settings(model: str) -> None:
    """``dropout=2`` was taken by the transformer configs and only torch refused it, when fitting."""
    from attnrec import get_spec

    config_cls = get_spec(model).config_cls
    with pytest.raises(ValueError, match="dropout must be in \\[0, 1\\), not 2.0"):
        config_cls(dropout=2.0)
    with pytest.raises(ValueError, match="must be in \\[0, 1\\), not -0.1"):
        config_cls(dropout=-0.1)


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("bprmf", "reg"),
        ("ncf", "init_std"),
        ("gru4rec", "bpreg"),
        ("hstu", "temperature"),
        ("peter", "text_weight"),
    ],
)
@pytest.mark.parametrize("value", [float("nan"), "nan", "inf", float("inf")])
def test_a_model_number_that_is_not_finite_is_refused(model: str, key: str, value: object) -> None:
    """``reg=nan`` or ``init_std=inf`` was taken by the model configs (no range check of theirs sees
    NaN) and trained NaN weights: every config's number settings are finite, as TrainConfig's are."""
    from attnrec import get_spec

    config_cls = get_spec(model).config_cls
    with pytest.raises(ConfigError, match=f"{config_cls.__name__}: {key} must be a finite number"):
        config_from_dict(config_cls, {key: value})


def test_a_settings_dataclass_given_to_a_recommender_is_checked_for_finite_numbers() -> None:
    """A config made directly (``BPRMFConfig(reg=nan)``) skipped the check of :func:`config_from_dict`
    and trained NaN weights."""
    from attnrec.models.bprmf import BPRMFConfig
    from attnrec.recommend import Recommender

    with pytest.raises(ConfigError, match="bprmf: reg must be a finite number, not nan"):
        Recommender("bprmf", config=BPRMFConfig(reg=float("nan")))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"n": True}, "Example.n: True is not a valid int"),
        ({"x": False}, "Example.x: False is not a valid float"),
        ({"flag": 2}, "Example.flag: 2 is not a valid bool"),
        ({"flag": [1]}, "Example.flag: \\[1\\] is not a valid bool"),
        ({"name": ["a"]}, "Example.name: \\['a'\\] is not a valid str"),
        ({"name": {"a": 1}}, "Example.name: \\{'a': 1\\} is not a valid str"),
        ({"n": [3]}, "Example.n: \\[3\\] is not a valid int"),
        ({"ks": 5}, "Example.ks: 5 is not a list"),
        ({"ks": {"a": 1}}, "Example.ks: \\{'a': 1\\} is not a list"),
    ],
)
def test_a_toml_value_of_the_wrong_kind_is_refused(values: dict[str, object], message: str) -> None:
    """TOML (and Python) values are typed: ``hidden = true`` was taken as 1, ``compile = 2`` as True, a
    list where a name goes as its text, and a number where a list goes was a TypeError traceback."""
    with pytest.raises(ConfigError, match=message):
        config_from_dict(Example, values)
    assert config_from_dict(Example, {"n": 2.0, "x": 1, "name": Path("p")}) == Example(n=2, x=1.0, name="p")


def test_a_toml_section_that_is_not_a_table_is_refused(tmp_path: Path) -> None:
    """``model = 3`` at the top of a config file was a TypeError traceback."""
    f = tmp_path / "c.toml"
    f.write_text("model = 3\n")
    with pytest.raises(ConfigError, match="c.toml: model must be a table \\(\\[model\\] with key = value"):
        load_toml(f, ("model", "train"))
