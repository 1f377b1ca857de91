"""Config checks the model configs share, each with the one-line message a user sees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


def _names(values: Mapping[str, object]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    keys = list(values)
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"


def require_positive(**values: int) -> None:
    """Raise ``ValueError("a, b and c must be positive")`` unless every value is >= 1."""
    if min(values.values()) < 1:
        raise ValueError(f"{_names(values)} must be positive")


def require_positive_fields(config: object, *names: str) -> None:
    """:func:`require_positive` of the fields ``names`` of a config dataclass (its message names them)."""
    require_positive(**{n: getattr(config, n) for n in names})


class FactorSettings(Protocol):
    """The settings every factor model's config has (BPR-MF, FPMC, TransRec)."""

    @property
    def dim(self) -> int: ...
    @property
    def n_negatives(self) -> int: ...
    @property
    def reg(self) -> float: ...
    @property
    def init_std(self) -> float: ...
    @property
    def fold_in_steps(self) -> int: ...


def require_factor_settings(config: FactorSettings, *positive: str) -> None:
    """A factor model's config: ``dim``, the fields ``positive`` and ``n_negatives`` at least 1, the L2
    weight ``reg`` and ``fold_in_steps`` >= 0, the initial spread ``init_std`` > 0."""
    require_positive_fields(config, "dim", *positive, "n_negatives")
    if config.reg < 0 or config.init_std <= 0 or config.fold_in_steps < 0:
        raise ValueError("reg and fold_in_steps must be >= 0 and init_std > 0")
