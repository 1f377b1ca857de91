"""What a model directory's ``config.json`` asks of memory, estimated before anything is built.

A ``config.json`` names a model and its settings; building that model allocates its parameters, and
scoring a sequence allocates its activations. Both are estimated here from the settings alone
(:func:`estimate`) and compared with the :class:`~attnrec.checkpoint.LoadLimits` before the model
is built, even on the meta device (building ten thousand layers takes minutes without any memory).
The estimate reads the settings by their role, declared once in :data:`ROLES`, so that it covers
every model of the registry: widths (``hidden``, ``dim``, ``emsize`` ...), depth (``n_layers``),
heads, sequence lengths and the rows of embedding tables (users, items, words, buckets).

It is an upper-side estimate (a transformer layer counted with its attention and feed-forward
blocks), meant to refuse what no machine should try, not to size real models tightly; the exact
check follows when the stored weights are compared, shape by shape, with the model built from
the config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # Any: JSON values

from attnrec.checkpoint import CheckpointError, LoadLimits
from attnrec.models.registry import get_spec

# model_config keys by the role they play in the model's size
ROLES: dict[str, tuple[str, ...]] = {
    "width": ("hidden", "dim", "emb_dim", "emsize", "dqk", "dv", "gmf_dim", "n_horizontal", "n_vertical"),
    "inner": ("ffn",),  # the feed-forward width, when the config names it
    "inner_multiplier": ("ff_multiplier",),  # the feed-forward width as a multiple of the width
    "depth": ("n_layers",),
    "heads": ("n_heads",),
    "length": ("max_len", "max_positions", "max_words", "window", "targets"),
    "rows": ("time_intervals", "time_buckets", "n_events"),  # embedding tables beside the catalog
}
# config.json keys counting the rows of the catalog's embedding tables
CATALOG = ("n_users", "n_items", "n_words")


@dataclass(frozen=True)
class ModelSize:
    """The estimate of one config: parameters, activations of one scored sequence, depth."""

    params: int
    activation: int
    layers: int


def _ints(config: Mapping[str, Any], role: str) -> list[int]:
    return [
        v for k in ROLES[role] if isinstance(v := config.get(k), int) and not isinstance(v, bool) and v > 0
    ]


def estimate(config: Mapping[str, Any], catalog: Mapping[str, Any]) -> ModelSize:
    """The size of the model of ``config`` (its settings, defaults filled in) over ``catalog`` (the
    ``n_users``/``n_items``/``n_words`` counts of ``config.json``)."""
    width = max(_ints(config, "width"), default=1)
    inner = max(_ints(config, "inner") + [m * width for m in _ints(config, "inner_multiplier")] + [4 * width])
    layers = max(_ints(config, "depth"), default=1)
    heads = max(_ints(config, "heads"), default=1)
    length = max(_ints(config, "length"), default=1)
    counts = [v for k in CATALOG if isinstance(v := catalog.get(k), int) and not isinstance(v, bool)]
    rows = sum(counts) + sum(_ints(config, "rows")) + length + 1
    per_layer = 4 * width * width + 2 * width * inner
    params = rows * width + layers * per_layer
    scores = max((v for k, v in catalog.items() if k == "n_items" and isinstance(v, int)), default=0)
    activation = layers * (length * (4 * width + inner) + heads * length * length) + scores
    return ModelSize(params, activation, layers)


def check_model_size(meta: Mapping[str, Any], limits: LoadLimits, path: Path) -> None:
    """Refuse ``config.json`` (``meta``, already structure-checked) when its model name is unknown or
    its estimated size (:func:`estimate`) is over ``limits``: one :class:`CheckpointError` line."""
    try:
        spec = get_spec(meta["model"])
    except KeyError as e:
        raise CheckpointError(f"{path}: {e.args[0]}") from None
    config = dict(meta["model_config"])
    if dataclasses.is_dataclass(spec.config_cls):
        defaults = {
            f.name: f.default
            for f in dataclasses.fields(spec.config_cls)
            if f.default is not dataclasses.MISSING
        }
        config = defaults | config
    size = estimate(config, meta)
    over = [
        f"{what} {got:,} over the limit of {limit:,}"
        for what, got, limit in (
            ("depth (layers)", size.layers, limits.max_layers),
            ("parameters", size.params, limits.max_params),
            ("activations per sequence", size.activation, limits.max_activation),
        )
        if got > limit
    ]
    if over:
        raise CheckpointError(
            f"{path}: the model it describes is too large to build ({'; '.join(over)}); refused before "
            "allocating it (raise LoadLimits if the model is really this large)"
        )


__all__ = ["ModelSize", "ROLES", "check_model_size", "estimate"]
