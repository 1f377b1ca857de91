"""Item features of a recommender's model: building its context, saving it, and adding cold items.

A model trained with ``item_features`` sum/concat/gate (:mod:`attnrec.models.item_context`) keeps its
items' feature codes in its weights and the value vocabularies in ``item_features.json``, so a
saved model needs no data to load, and new items can be encoded with the training codes:
:func:`extend_items` appends them to the item ID map and the model's table, with all-zero ID
vectors (their representation comes from their features alone, as with ``id_dropout`` in training).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeAlias  # Any: JSON values

import numpy as np
import pandas as pd

from attnrec.checkpoint import CheckpointError
from attnrec.config import ConfigError
from attnrec.data.features import FeatureTable
from attnrec.data.schema import DataError, IdMap, Interactions
from attnrec.models.event_context import EventFields
from attnrec.models.item_context import (
    ItemExtensible,
    ItemFeatures,
    ModelContext,
    context_for,
    feature_settings,
)
from attnrec.recommend.persistence import SavedModel
from attnrec.recommend.structure import one_line

FILE = "item_features"  # <model dir>/item_features.json
ID_COLUMNS = ("item_id", "id", "itemId", "movieId", "asin", "aid")
ItemFeatureInput: TypeAlias = pd.DataFrame | FeatureTable  # what Recommender.add_items takes


def feature_context(model: str, config: object, data: Interactions) -> tuple[object, ModelContext | None]:
    """``config`` (with ``event_input``'s ``n_events`` taken from ``data``, so that a saved model rebuilds
    without data) and the context it asks for on ``data`` (``None``: no features, no event vocabulary); a
    :class:`ConfigError` when the data cannot give it (no item features, unknown ``feature_fields``, log
    items without a row)."""
    if (
        isinstance(config, EventFields)
        and config.event_input
        and not config.n_events
        and data.events is not None
    ):
        config = dataclasses.replace(config, n_events=len(data.events))
    try:
        return config, context_for(config, data.item_features, data.items, data.events, data.vocabularies)
    except ValueError as e:  # DataError included
        raise ConfigError(f"{model}: {one_line(e)}") from None


def context_files(context: ModelContext | None) -> dict[str, object]:
    """The JSON files of a model directory that rebuild ``context`` (none without item features)."""
    return {} if context is None or context.item_features is None else {FILE: context.item_features.to_json()}


def load_context(saved: SavedModel) -> ModelContext | None:
    """The context saved by :func:`context_files` (sized by ``config.json``'s item count), or ``None``."""
    obj: Any = saved.json(FILE, default={})
    if not obj:
        return None
    try:
        return ModelContext(ItemFeatures.from_json(obj, int(saved.meta["n_items"]) + 1))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(
            f"{saved.path / (FILE + '.json')}: not a valid item feature spec ({one_line(e)})"
        ) from None


def as_table(features: ItemFeatureInput, spec: ItemFeatures, id_column: str | None) -> FeatureTable:
    """``features`` as a table; a DataFrame's columns named like the model's fields get the model's kinds."""
    if isinstance(features, FeatureTable):
        return features
    if not isinstance(features, pd.DataFrame):
        raise TypeError(f"item features must be a DataFrame or a FeatureTable, not {type(features).__name__}")
    col = id_column or next((c for c in ID_COLUMNS if c in features.columns), None)
    if col is None or col not in features.columns:
        raise DataError(
            f"item features: no ID column {id_column or 'item_id/id'!r}; "
            f"columns are {', '.join(map(str, features.columns))}"
        )
    kinds: Mapping[str, str] = spec.aligned.kinds
    fields = {k: kinds[k] for k in kinds if k in features.columns}
    if not fields:
        raise DataError(f"item features: none of the model's fields ({', '.join(kinds)}) is a column")
    return FeatureTable.from_frame(features, col, fields)


def takes_new_items(core: object, context: ModelContext | None, config: object) -> bool:
    """Whether a fitted ``core`` (with ``config`` and ``context``) can add items from their features alone:
    its item table is built from features (not DIF-SR alone) and it implements ``add_items``."""
    mode, _, _ = feature_settings(config)
    return (
        mode != "none"
        and context is not None
        and context.item_features is not None
        and isinstance(core, ItemExtensible)
    )


def extend_items(
    core: object,
    context: ModelContext | None,
    items: IdMap,
    features: ItemFeatureInput,
    id_column: str | None = None,
) -> tuple[IdMap, list[str]]:
    """Append the items of ``features`` to ``core`` (in place) and to ``items``: the new ID map and the
    added IDs. Errors: the model reads no item features, or an ID is already in the catalog."""
    if context is None or context.item_features is None or not isinstance(core, ItemExtensible):
        raise ConfigError(
            "adding items needs a model trained with item features (item_features=sum, concat or "
            "gate); this one knows items by their IDs only"
        )
    table = as_table(features, context.item_features, id_column)
    new = [str(x) for x in table.ids.external]
    if not new:
        raise DataError("item features: no items to add")
    known = [x for x in new if x in items]
    if known:
        raise DataError(
            f"{len(known):,} of the items to add are already in the catalog (e.g. {', '.join(known[:5])})"
        )
    try:
        rows = context.item_features.encode(table)
        core.add_items(rows)
    except ValueError as e:
        raise ConfigError(one_line(e)) from None
    return IdMap(np.concatenate([items.external, np.array(new, dtype=object)]), items.offset), new


__all__ = [
    "ItemFeatureInput",
    "as_table",
    "context_files",
    "extend_items",
    "feature_context",
    "load_context",
    "takes_new_items",
]
