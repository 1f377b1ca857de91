"""Structure checks of a model directory's files, after their checksums (or when it has no manifest).

A checksum proves a file is the one that was saved; these checks prove the files fit together
(the ID maps have as many IDs as ``config.json`` counts, titles map IDs to text, the stored
histories index real items), so that a directory saved before manifests existed, or one whose
manifest was rewritten along with the files, cannot answer with the wrong items either; and before a
save, that the folder's ``config.json``, if any, is a model's (:func:`check_replaceable`). Every failure
is a one-line :class:`~attnrec.checkpoint.CheckpointError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any  # Any: JSON values

import torch

from attnrec.checkpoint import CheckpointError
from attnrec.data.schema import IdMap, event_vocabulary

# config.json keys every task needs, with the JSON types they must have
_CONFIG_KEYS: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "model_config": (dict,),
    "train_config": (dict,),
    "n_users": (int,),
    "n_items": (int,),
    "data": (dict,),
}


_JSON_TYPE = {str: "string", dict: "object", int: "integer"}


def one_line(e: BaseException) -> str:
    """``e``'s message on one line (torch's state-dict errors span several)."""
    return "; ".join(part.strip() for part in str(e).splitlines() if part.strip()) or type(e).__name__


def check_replaceable(config: Path) -> None:
    """A :class:`CheckpointError` when ``config`` exists and is not a model directory's ``config.json``: a
    save writes over it, and a folder of the user's own (``rec.save(".")`` in a project) lost its file."""
    if not config.exists():
        return
    try:
        ours = (
            isinstance(meta := json.loads(config.read_text(encoding="utf-8")), dict)
            and "format_version" in meta
        )
    except (OSError, ValueError):
        ours = False
    if not ours:
        raise CheckpointError(
            f"{config.parent}: holds a config.json that is not a saved model's; save into a new or empty "
            "folder (or a model directory, which is replaced)"
        )


def check_config(meta: Mapping[str, Any], path: Path) -> None:
    """``config.json`` has the keys every task reads, of the right JSON types."""
    for key, types in _CONFIG_KEYS.items():
        value = meta.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise CheckpointError(f"{path}: {key!r} is missing or not of JSON type {_JSON_TYPE[types[0]]}")
    if meta["n_users"] < 0 or meta["n_items"] < 0:
        raise CheckpointError(f"{path}: negative n_users or n_items")
    if not isinstance(meta.get("train_result"), (dict, type(None))):
        raise CheckpointError(f"{path}: 'train_result' is not an object")
    if not isinstance(meta.get("evaluations"), (list, type(None))):
        raise CheckpointError(f"{path}: 'evaluations' is not a list")


def check_id_maps(maps: object, n_users: int, n_items: int, path: Path) -> tuple[list[str], list[str]]:
    """``id_maps.json`` as ``(users, items)``: two lists of distinct string IDs, as many as
    ``config.json`` counts."""
    if not isinstance(maps, dict):
        raise CheckpointError(f"{path}: not an object with 'users' and 'items' lists")
    out: list[list[str]] = []
    for key, n in (("users", n_users), ("items", n_items)):
        ids = maps.get(key)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise CheckpointError(f"{path}: {key!r} is not a list of string IDs")
        if len(ids) != n:
            raise CheckpointError(
                f"{path}: {len(ids)} {key} where config.json says n_{key} = {n}; the ID map "
                "was edited or belongs to another model"
            )
        if len(set(ids)) != len(ids):
            raise CheckpointError(f"{path}: the {key} IDs are not unique")
        out.append(ids)
    return out[0], out[1]


def check_titles(titles: object, path: Path) -> dict[str, str]:
    """``titles.json``: a mapping of item ID to title, both strings."""
    if not isinstance(titles, dict) or not all(isinstance(v, str) for v in titles.values()):
        raise CheckpointError(f"{path}: not a mapping of item ID to title text")
    return dict(titles)


def check_arrays(arrays: Mapping[str, torch.Tensor], n_users: int, n_items: int, path: Path) -> None:
    """``arrays.safetensors`` of a recommender: popularity per item (index 0 is padding) and the
    users' histories in CSR form over the item indices ``1..n_items``."""
    want = ("popularity", "history_offsets", "history_items")
    if any(k not in arrays or arrays[k].dim() != 1 for k in want):
        raise CheckpointError(f"{path}: expected the 1-D arrays {', '.join(want)}")
    pop, offsets, items = (arrays[k] for k in want)
    if len(pop) != n_items + 1:
        raise CheckpointError(f"{path}: popularity has {len(pop)} entries for {n_items} items")
    if (
        len(offsets) != n_users + 1
        or int(offsets[0]) != 0
        or int(offsets[-1]) != len(items)
        or bool((offsets[1:] < offsets[:-1]).any())
    ):
        raise CheckpointError(
            f"{path}: the history offsets do not fit {n_users} users and {len(items)} history items"
        )
    if len(items) and (int(items.min()) < 1 or int(items.max()) > n_items):
        raise CheckpointError(f"{path}: history items outside 1..{n_items}")


def check_events(names: object, path: Path) -> IdMap | None:
    """``events.json`` of a recommender: the training log's event type names (sorted, distinct); none when
    the file is absent (``[]``: a log without event types)."""
    if names == []:
        return None
    if (
        not isinstance(names, list)
        or not all(isinstance(n, str) for n in names)
        or names != sorted(set(names))
    ):
        raise CheckpointError(f"{path}: not a sorted list of distinct event type names")
    return event_vocabulary(names)


def check_vocab(vocab: object, n_words: object, path: Path) -> list[str]:
    """``vocab.json`` of an explainer: ``n_words`` strings."""
    if not isinstance(vocab, list) or not all(isinstance(w, str) for w in vocab):
        raise CheckpointError(f"{path}: not a list of words")
    if len(vocab) != n_words:
        raise CheckpointError(f"{path}: {len(vocab)} words where config.json says n_words = {n_words}")
    return vocab


def check_features(feats: object, path: Path) -> tuple[list[str], dict[str, str]]:
    """``features.json`` of an explainer: the feature words and each item's feature."""
    words = feats.get("features") if isinstance(feats, dict) else None
    item_feature = feats.get("item_feature") if isinstance(feats, dict) else None
    if (
        not isinstance(words, list)
        or not all(isinstance(w, str) for w in words)
        or not isinstance(item_feature, dict)
        or not all(isinstance(v, str) for v in item_feature.values())
    ):
        raise CheckpointError(
            f"{path}: expected 'features' (a list of words) and 'item_feature' (item ID -> word)"
        )
    return words, item_feature


__all__ = [
    "check_arrays",
    "check_config",
    "check_features",
    "check_id_maps",
    "check_replaceable",
    "check_titles",
    "check_vocab",
    "one_line",
]
