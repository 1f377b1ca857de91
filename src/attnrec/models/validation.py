"""Config checks the model configs share, each with the one-line message a user sees."""

from __future__ import annotations

from collections.abc import Mapping


def _names(values: Mapping[str, object]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    keys = list(values)
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"


def require_positive(**values: int) -> None:
    """Raise ``ValueError("a, b and c must be positive")`` unless every value is >= 1."""
    if min(values.values()) < 1:
        raise ValueError(f"{_names(values)} must be positive")


def require_rates(config: object, *names: str) -> None:
    """Each field ``names`` of a config dataclass that is set (not None) a dropout rate in [0, 1); a one-line
    ``ValueError`` naming it otherwise (``dropout=2`` was taken and only torch refused it, at fit)."""
    for name in names:
        rate = getattr(config, name)
        if rate is not None and not 0.0 <= rate < 1.0:
            raise ValueError(f"{name} must be in [0, 1), not {rate}")


def require_positive_fields(config: object, *names: str) -> None:
    """:func:`require_positive` of the fields ``names`` of a config dataclass (its message names them)."""
    require_positive(**{n: getattr(config, n) for n in names})
