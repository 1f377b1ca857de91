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


def require_positive_fields(config: object, *names: str) -> None:
    """:func:`require_positive` of the fields ``names`` of a config dataclass (its message names them)."""
    require_positive(**{n: getattr(config, n) for n in names})
