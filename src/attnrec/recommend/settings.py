"""The settings a :class:`~attnrec.recommend.Recommender` is built with: a preset's, under the caller's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any  # settings dicts and the model's settings dataclass

from attnrec.config import ConfigError, check_finite, config_from_dict
from attnrec.models.registry import ModelSpec
from attnrec.training.train_config import TrainConfig


@dataclass(frozen=True)
class Settings:
    """A model's settings and training settings, and those of them the caller gave (the ones settings
    chosen from the data never replace)."""

    config: Any  # the model's settings dataclass
    train: TrainConfig
    given_model: dict[str, Any]
    given_train: dict[str, Any]


def resolve_settings(
    spec: ModelSpec, config: Mapping[str, Any] | object | None, train: object, preset: str | None
) -> Settings:
    """``preset``'s settings of the model ``spec`` (none: the defaults) under ``config`` (a dict, or a
    settings dataclass taken as it is) and ``train`` (a dict or a :class:`TrainConfig`); a one-line
    :class:`ConfigError` for an unknown preset, an unknown or ill-typed setting, or arguments of the
    wrong kind."""
    model_over: dict[str, Any] = {}
    train_over: dict[str, Any] = {}
    if preset is not None:
        if preset not in spec.presets:
            raise ConfigError(
                f"{spec.name}: unknown preset {preset!r}; known: {', '.join(spec.presets) or 'none'}"
            )
        model_over = dict(spec.presets[preset].get("model", {}))
        train_over = dict(spec.presets[preset].get("train", {}))
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        model = config
        try:  # config_from_dict checks a dict's settings; a dataclass made directly skipped it
            check_finite(model)
        except ValueError as e:
            raise ConfigError(f"{spec.name}: {e}") from None
    elif config is None or isinstance(config, Mapping):
        model = config_from_dict(spec.config_cls, model_over | dict(config or {}))
    else:
        raise ConfigError(
            f"{spec.name}: config must be a dict or a settings dataclass, not {type(config).__name__}"
        )
    if isinstance(train, TrainConfig):
        training = train
    elif train is None or isinstance(train, Mapping):
        training = config_from_dict(TrainConfig, train_over | dict(train or {}))
    else:
        raise ConfigError(
            f"{spec.name}: train must be a dict or a TrainConfig, not {type(train).__name__} {train!r:.40}"
        )
    given_model = dict(config) if isinstance(config, Mapping) else {}
    given_train = dict(train) if isinstance(train, Mapping) else {}
    return Settings(model, training, given_model, given_train)


__all__ = ["Settings", "resolve_settings"]
