"""The one persistence path: writing and reading a self-contained model directory.

Every saved model (a :class:`~attnrec.recommend.Recommender` or an
:class:`~attnrec.recommend.Explainer`) is a directory of

* ``config.json``: format version, the attnrec version, model name, preset, model and training
  settings, catalogue sizes, data provenance, training record, evaluations, task-specific keys
  and the sha256 of every tensor file (``<name>_sha256``); written last, so it marks a complete
  directory. Explain-task directories say ``"task": "explain"``; sequential ones have no task key.
* ``id_maps.json``: the external user and item IDs in internal-index order;
* ``<name>.safetensors``: ``weights`` (the model's state dict) and task-specific tensors
  (``arrays`` of a recommender, ``rating_weights`` of an explainer);
* task-specific JSON files (``titles``; ``vocab``, ``features``).

Loading never unpickles: tensors come from safetensors (checksummed), everything else from JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol  # Any: JSON values

import numpy as np
import torch

from attnrec import __version__
from attnrec.checkpoint import CheckpointError, load_tensors, read_json, save_tensors, write_json
from attnrec.data.schema import DataSource, IdMap
from attnrec.training.loop import TrainResult

FORMAT_VERSION = 1
SEQUENTIAL, EXPLAIN = "sequential", "explain"


class Loadable(Protocol):
    """Anything that restores a state dict (every model is an ``nn.Module``)."""

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> object:
        """Restore the tensors; raises on missing keys or shapes that do not fit."""
        ...


@dataclass
class ModelRecord:
    """What every model directory holds, whatever its task."""

    model: str
    preset: str | None
    model_config: dict[str, Any]
    train_config: dict[str, Any]
    users: IdMap
    items: IdMap
    source: DataSource
    train_result: TrainResult | None
    evaluations: list[dict[str, Any]] = field(default_factory=list)


def save_model_dir(
    path: str | Path,
    record: ModelRecord,
    tensors: Mapping[str, Mapping[str, torch.Tensor]],
    files: Mapping[str, object],
    meta: Mapping[str, object],
    *,
    task: str = SEQUENTIAL,
) -> Path:
    """Write ``record`` plus the tensor files ``tensors`` (``weights`` first), the JSON ``files`` and the
    task-specific ``config.json`` keys ``meta`` to the directory ``path``; returns it."""
    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    config: dict[str, object] = {
        "format_version": FORMAT_VERSION,
        "attnrec_version": __version__,
        "model": record.model,
        "preset": record.preset,
        "model_config": record.model_config,
        "train_config": record.train_config,
        "n_users": len(record.users),
        "n_items": len(record.items),
        "data": dataclasses.asdict(record.source),
        "train_result": record.train_result.to_dict() if record.train_result else None,
        "evaluations": record.evaluations,
    }
    if task != SEQUENTIAL:  # directories of the sequential task predate the key: keep them byte-stable
        config["task"] = task
    for name, state in tensors.items():
        config[f"{name}_sha256"] = save_tensors(d / f"{name}.safetensors", dict(state))
    write_json(d / "id_maps.json", {"users": record.users.to_list(), "items": record.items.to_list()})
    for name, obj in files.items():
        write_json(d / f"{name}.json", obj)
    write_json(d / "config.json", config | dict(meta))  # last: its presence marks a complete directory
    return d


@dataclass
class SavedModel:
    """A model directory opened for reading: its ``config.json``, record and lazily read files."""

    path: Path
    meta: dict[str, Any]  # config.json
    task: str

    @property
    def record(self) -> ModelRecord:
        """The task-independent content of the directory."""
        maps = self.json("id_maps")
        tr = self.meta.get("train_result")
        if tr:
            tr = dict(tr)
            tr.pop("seconds_per_epoch", None)  # derived, written for readers of the JSON
        return ModelRecord(
            self.meta["model"], self.meta.get("preset"), self.meta["model_config"], self.meta["train_config"],
            IdMap(np.array(maps["users"], dtype=object), 0), IdMap(np.array(maps["items"], dtype=object), 1),
            DataSource(**self.meta["data"]), TrainResult(**tr) if tr else None,
            list(self.meta.get("evaluations") or []))

    def json(self, name: str, default: object = None) -> Any:
        """The content of ``<name>.json``; ``default`` when given and the file is absent."""
        f = self.path / f"{name}.json"
        if default is not None and not f.exists():
            return default
        return read_json(f)

    def has_tensors(self, name: str) -> bool:
        """Whether the directory holds ``<name>.safetensors`` (its checksum is in ``config.json``)."""
        return bool(self.meta.get(f"{name}_sha256"))

    def tensors(self, name: str) -> dict[str, torch.Tensor]:
        """``<name>.safetensors``, verified against its checksum in ``config.json``."""
        return load_tensors(self.path / f"{name}.safetensors", self.meta.get(f"{name}_sha256"))

    def load_into(self, core: Loadable, name: str = "weights") -> None:
        """Load ``<name>.safetensors`` into ``core``; a clear error when they do not fit its config."""
        state = self.tensors(name)
        try:
            core.load_state_dict(state)
        except (RuntimeError, KeyError) as e:
            what = name.replace("_", " ")
            raise CheckpointError(f"{self.path}: {what} do not match the model config ({e})") from e


def open_model_dir(path: str | Path, task: str | None = None) -> SavedModel:
    """Open the model directory ``path``, checking its format and, when given, its ``task``."""
    d = Path(path)
    if not d.is_dir():
        raise CheckpointError(f"{d}: not a directory; expected an attnrec checkpoint directory")
    meta = read_json(d / "config.json")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{d / 'config.json'}: not a JSON object; not an attnrec checkpoint directory")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{d}: unsupported checkpoint format {meta.get('format_version')!r}")
    found = str(meta.get("task", SEQUENTIAL))
    if task is not None and found != task:
        raise CheckpointError(f"{d}: a checkpoint of the {found} task ({meta.get('model')}), not of the {task} "
                              "task; load it with attnrec.load")
    return SavedModel(d, meta, found)


__all__ = ["EXPLAIN", "FORMAT_VERSION", "ModelRecord", "SEQUENTIAL", "SavedModel", "open_model_dir",
           "save_model_dir"]
