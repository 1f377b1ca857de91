"""The model core the user-level layer holds: what it must offer, how it is built and how it is fitted.

Every registered sequential model is an ``nn.Module`` implementing a required contract of
:mod:`attnrec.models.contracts` (:class:`~attnrec.models.contracts.SequentialModel` for the training
loop, :class:`~attnrec.models.contracts.ClosedForm` for POP). The recommender holds it as a
:class:`ModelCore` and asks :func:`~attnrec.models.contracts.capabilities` once what else it can do.
:func:`fit_core` is the one place that decides between a closed-form fit and the training loop.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import torch
from torch import nn

from attnrec.config import ConfigError
from attnrec.data.schema import Sequences
from attnrec.evaluation.protocol import EvalResult
from attnrec.models.contracts import (
    CandidateScorer,
    Capabilities,
    ClosedForm,
    Factorised,
    ItemBiased,
    Scorer,
    Trainable,
    capabilities,
)
from attnrec.models.item_context import ModelContext
from attnrec.models.registry import ModelSpec
from attnrec.training.callbacks import EpochCallback, run_callbacks
from attnrec.training.loop import TrainResult, train
from attnrec.training.result import EpochRecord
from attnrec.training.train_config import TrainConfig

if TYPE_CHECKING:  # typing.Self is 3.11+; annotations are not evaluated at run time
    from typing import Self

log = logging.getLogger("attnrec.recommend")


class ModelCore(Scorer, Protocol):
    """What the user-level layer calls on a core: the catalog scorer plus the module methods it uses.

    Every registered sequential model is an ``nn.Module`` and matches this; so does serving's ONNX
    stand-in (:class:`~attnrec.serving.export.OnnxCore`, which implements it explicitly).
    """

    training: bool

    def eval(self) -> Self:
        """Inference mode (dropout off)."""
        ...

    def to(self, device: torch.device) -> Self:
        """Move the weights to ``device``."""
        ...

    def cpu(self) -> Self:
        """Move the weights to the CPU (ONNX export traces there)."""
        ...

    def state_dict(self) -> Mapping[str, torch.Tensor]:
        """The tensors a model directory stores as ``weights.safetensors``."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> object:
        """Restore the tensors of :meth:`state_dict`; raises on missing keys or shapes that do not fit."""
        ...


@dataclass(frozen=True)
class CoreView:
    """A core with its :func:`~attnrec.models.contracts.capabilities` asked once, as typed handles.

    Each handle is the core itself seen through one optional contract, or ``None`` when the core
    lacks it; scoring code branches on these, never on the model's name or kind.
    """

    core: ModelCore
    caps: Capabilities
    factorised: Factorised | None  # score = query_vectors @ item_vectors.T (+ bias)
    item_bias: ItemBiased | None
    candidates: CandidateScorer | None  # scores given candidates itself (NCF, TransRec)

    @classmethod
    def of(cls, core: ModelCore) -> CoreView:
        caps = capabilities(core)
        return cls(
            core,
            caps,
            cast(Factorised, core) if caps.factorised else None,
            cast(ItemBiased, core) if caps.item_bias else None,
            cast(CandidateScorer, core) if caps.candidate_scoring else None,
        )


def build_core(
    spec: ModelSpec,
    config: object,
    n_users: int,
    n_items: int,
    seed: int | None = None,
    context: ModelContext | None = None,
) -> ModelCore:
    """A fresh ``spec`` model; seeded from ``seed`` without touching the caller's RNG when given.

    ``context`` (item features, :mod:`attnrec.models.item_context`) goes to models whose constructor
    takes one.
    """
    args: tuple[object, ...] = (config, n_users, n_items)
    if context is not None:
        if "context" not in inspect.signature(spec.cls).parameters:
            raise ConfigError(f"{spec.name} does not read item features; drop them from its settings")
        args += (context,)
    core: ModelCore
    if seed is None:
        core = spec.cls(*args)
    else:
        with torch.random.fork_rng():  # seeded initialisation without touching the caller's RNG
            torch.manual_seed(seed)
            core = spec.cls(*args)
    if not isinstance(core, Scorer):  # the registry's classes are untyped: checked here, once
        raise ConfigError(f"{spec.name}: {type(core).__name__} does not implement score_inputs/score")
    return core


def fit_core(
    core: ModelCore,
    train_data: Sequences,
    validate: Callable[[], dict[str, float]] | None,
    cfg: TrainConfig,
    device: torch.device,
    *,
    state_dir: Path | None = None,
    progress: bool = True,
    callbacks: tuple[EpochCallback, ...] = (),
) -> TrainResult:
    """Fit ``core`` on ``train_data``: in closed form if it is :class:`ClosedForm`, else by the training loop.

    ``validate()`` scores the validation cases with the current weights; a closed-form fit is
    validated once and recorded as one epoch that ``stopped="fitted"``. ``validate=None``: a final fit
    of ``cfg.max_epochs`` epochs without validation (:func:`~attnrec.training.loop.train`).
    """
    if isinstance(core, ClosedForm):
        t0 = time.perf_counter()
        core.to(device)
        core.fit(train_data, np.random.default_rng(cfg.seed))
        metrics = validate() if validate is not None else {}
        seconds = time.perf_counter() - t0
        record: EpochRecord = {"epoch": 1, "train_seconds": seconds, "valid": metrics}
        run_callbacks(callbacks, record)  # one "epoch": nothing left to stop
        return TrainResult(1, metrics.get(cfg.monitor, math.nan), metrics, 1, seconds, "fitted", [record])
    if isinstance(core, nn.Module) and isinstance(core, Trainable):
        return train(
            core,
            train_data,
            None if validate is None else lambda _: validate(),
            cfg,
            state_dir=state_dir,
            progress=progress,
            callbacks=callbacks,
        )
    raise ConfigError(
        f"{type(core).__name__}: neither closed-form nor trainable; see attnrec.models.contracts"
    )


__all__ = ["CoreView", "ModelCore", "build_core", "fit_core"]


NOISY_RELATIVE_SE = 0.05
"""Validation is called too small to decide when its monitored metric's standard error exceeds this
share of the metric (e.g. NDCG@10 0.027 +- 0.0035 on 1,090 users: 13%)."""


def warn_if_noisy(result: EvalResult, cfg: TrainConfig) -> str:
    """Warn (log, and return the text) when ``result``'s validation is too small to stop on reliably.

    Early stopping compares validation values between epochs; when the monitored metric's standard
    error is a large share of it, patience counts noise. Silent when the rule already smooths
    (``smooth`` > 1) or waits (``min_epochs``), or when the metric has no standard error.
    """
    value, se = result.metrics.get(cfg.monitor), result.standard_errors.get(cfg.monitor)
    if value is None or se is None or value <= 0 or cfg.smooth > 1 or cfg.min_epochs > 0:
        return ""
    if se / value <= NOISY_RELATIVE_SE:
        return ""
    text = (
        f"validation is small for its signal: {cfg.monitor} {value:.4f} +- {se:.4f} (standard error over "
        f"{result.n_cases:,} users, {se / value:.0%} of the value), so changes between epochs below about "
        f"{2 * se:.4f} can be noise and patience {cfg.patience} may stop on them; consider train.smooth=3, "
        "train.min_epochs, a larger patience or more validation users"
    )
    log.warning(text)
    return text
