"""The one persistence path: writing and reading a self-contained model directory.

Every saved model (a :class:`~attnrec.recommend.Recommender` or an
:class:`~attnrec.recommend.Explainer`) is a directory of

* ``config.json``: format version, the attnrec version, model name, preset, model and training
  settings, catalogue sizes, data provenance, training record, evaluations, task-specific keys
  and the sha256 of every tensor file (``<name>_sha256``). Explain-task directories say
  ``"task": "explain"``; sequential ones have no task key.
* ``id_maps.json``: the external user and item IDs in internal-index order;
* ``<name>.safetensors``: ``weights`` (the model's state dict) and task-specific tensors
  (``arrays`` of a recommender, ``rating_weights`` of an explainer);
* task-specific JSON files (``titles``; ``vocab``, ``features``);
* ``manifest.json``, written last: the sha256 and size of each file above
  (:func:`~attnrec.checkpoint.write_manifest`).

Opening a directory reads every file its manifest lists and checks each against it before
anything is parsed (each file checked to be a regular file of the manifest's size before it is
read, the manifest's signature verified when a key is given); then the files' structure is checked
(:mod:`attnrec.recommend.structure`), the model ``config.json`` describes is sized against the
:class:`~attnrec.checkpoint.LoadLimits` before it is built (:mod:`attnrec.recommend.model_size`),
and every tensor is checked finite. A directory without a manifest (saved before manifests
existed) is refused unless the :class:`~attnrec.checkpoint.LoadPolicy` allows unsigned
directories: nothing would tell an edited file from the saved one. Allowed, it loads with a
warning (nothing is written into it), its files read under the same limits, and its structure
checks and the tensor checksums in ``config.json`` still apply. Loading never unpickles: tensors
come from safetensors, everything else from JSON.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, TypeVar  # Any: JSON values

import numpy as np
import torch

from attnrec import __version__
from attnrec.checkpoint import (
    MANIFEST,
    CheckpointError,
    LoadLimits,
    LoadPolicy,
    check_dir_target,
    check_finite,
    load_tensor_bytes,
    load_tensors,
    parse_json,
    read_json,
    read_verified,
    save_tensors,
    write_json,
    write_manifest,
)
from attnrec.checkpoint import manifest_key as check_manifest_key
from attnrec.config import ConfigError, config_to_dict
from attnrec.data.schema import DataError, DataSource, IdMap
from attnrec.models.registry import ModelSpec
from attnrec.recommend.model_size import check_model_size
from attnrec.recommend.structure import check_config, check_id_maps, check_replaceable, one_line
from attnrec.training.loop import TrainResult
from attnrec.training.train_config import TrainConfig

FORMAT_VERSION = 1
SEQUENTIAL, EXPLAIN = "sequential", "explain"
log = logging.getLogger("attnrec.recommend")


class Loadable(Protocol):
    """Anything that gives and restores a state dict (every model is an ``nn.Module``)."""

    def state_dict(self) -> Mapping[str, torch.Tensor]:
        """The model's tensors."""
        ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> object:
        """Restore the tensors; raises on missing keys or shapes that do not fit."""
        ...


L = TypeVar("L", bound=Loadable)


class Recorded(Protocol):
    """A model class's attributes that every model directory records (:meth:`ModelRecord.of`)."""

    spec: ModelSpec
    preset: str | None
    train_config: TrainConfig
    users_: IdMap | None
    items_: IdMap | None
    source_: DataSource
    train_result_: TrainResult | None
    evaluations_: list[dict[str, Any]]

    @property
    def config(self) -> object:
        """The model's settings dataclass (its class varies by model)."""
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

    @classmethod
    def of(cls, model: Recorded) -> ModelRecord:
        """The record of a fitted ``model`` (a recommender or an explainer), as its ``save`` writes it."""
        assert model.users_ is not None and model.items_ is not None
        return cls(
            model.spec.name,
            model.preset,
            config_to_dict(model.config),
            config_to_dict(model.train_config),
            model.users_,
            model.items_,
            model.source_,
            model.train_result_,
            model.evaluations_,
        )


def save_model_dir(
    path: str | Path,
    record: ModelRecord,
    tensors: Mapping[str, Mapping[str, torch.Tensor]],
    files: Mapping[str, object],
    meta: Mapping[str, object],
    *,
    task: str = SEQUENTIAL,
    manifest_key: bytes | None = None,
) -> Path:
    """Write ``record`` plus the tensor files ``tensors`` (``weights`` first), the JSON ``files`` and the
    task-specific ``config.json`` keys ``meta`` to the directory ``path``; returns it. With
    ``manifest_key`` the manifest is signed (:func:`~attnrec.checkpoint.write_manifest`)."""
    d = check_dir_target(path, "a model")
    check_replaceable(d / "config.json")
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
    names = ["config.json", "id_maps.json"]
    for name, state in tensors.items():
        config[f"{name}_sha256"] = save_tensors(d / f"{name}.safetensors", dict(state))
        names.append(f"{name}.safetensors")
    write_json(d / "id_maps.json", {"users": record.users.to_list(), "items": record.items.to_list()})
    for name, obj in files.items():
        write_json(d / f"{name}.json", obj)
        names.append(f"{name}.json")
    write_json(d / "config.json", config | dict(meta))
    write_manifest(d, names, manifest_key)  # last: it vouches for a complete directory
    return d


@dataclass
class SavedModel:
    """A model directory opened for reading: its ``config.json``, record and files.

    ``files`` holds the bytes of every file of the manifest, already verified against it; it is
    ``None`` for a directory without a manifest, whose files are read when asked for, under the
    ``policy``'s limits.
    """

    path: Path
    meta: dict[str, Any]  # config.json
    task: str
    files: dict[str, bytes] | None = None
    policy: LoadPolicy = field(default_factory=LoadPolicy)

    @property
    def record(self) -> ModelRecord:
        """The task-independent content of the directory, its ID maps checked against ``config.json``."""
        users, items = check_id_maps(
            self.json("id_maps"), self.meta["n_users"], self.meta["n_items"], self.path / "id_maps.json"
        )
        tr = self.meta.get("train_result")
        if tr:
            tr = dict(tr)
            tr.pop("seconds_per_epoch", None)  # derived, written for readers of the JSON
        try:
            return ModelRecord(
                self.meta["model"],
                self.meta.get("preset"),
                self.meta["model_config"],
                self.meta["train_config"],
                IdMap(np.array(users, dtype=object), 0),
                IdMap(np.array(items, dtype=object), 1),
                DataSource(**self.meta["data"]),
                TrainResult(**tr) if tr else None,
                list(self.meta.get("evaluations") or []),
            )
        except (TypeError, DataError) as e:  # unknown keys in 'data' or 'train_result'
            raise CheckpointError(f"{self.path / 'config.json'}: {one_line(e)}") from None

    def json(self, name: str, default: object = None) -> Any:
        """The content of ``<name>.json``; ``default`` when given and the file is absent."""
        fname = f"{name}.json"
        f = self.path / fname
        if self.files is None:
            if default is not None and not f.exists() and not f.is_symlink():
                return default
            return read_json(f, self.path, self.policy.limits.max_file_bytes)
        if fname in self.files:
            return parse_json(self.files[fname], f)
        if default is not None:
            return default
        raise CheckpointError(f"{f}: not listed in {MANIFEST}; the directory is incomplete")

    def has_tensors(self, name: str) -> bool:
        """Whether the directory holds ``<name>.safetensors`` (its checksum is in ``config.json``)."""
        return bool(self.meta.get(f"{name}_sha256"))

    def tensors(self, name: str) -> dict[str, torch.Tensor]:
        """``<name>.safetensors``, verified against its checksum (the manifest's, else ``config.json``'s);
        a tensor holding NaN or infinity is refused."""
        fname = f"{name}.safetensors"
        f = self.path / fname
        if self.files is None:
            sha = self.meta.get(f"{name}_sha256")
            out = load_tensors(f, sha, self.path, self.policy.limits.max_file_bytes)
        elif fname not in self.files:
            raise CheckpointError(f"{f}: not listed in {MANIFEST}; the directory is incomplete")
        else:
            out = load_tensor_bytes(self.files[fname], f)
        check_finite(out, f)
        return out

    def build(self, make: Callable[[], L], name: str = "weights") -> L:
        """``make()`` with ``<name>.safetensors`` loaded; a clear error when they do not fit its config.

        ``make`` runs first on the meta device (no memory): the tensors' names and shapes are
        compared there, so an edited ``config.json`` asking for a huge model is refused at once
        instead of being allocated.
        """
        state = self.tensors(name)
        what = name.replace("_", " ")
        try:
            with torch.random.fork_rng(devices=[]), torch.device("meta"):  # the caller's RNG as before
                shell = make()
        except (
            ValueError,
            TypeError,
            KeyError,
            AssertionError,
            RuntimeError,
        ) as e:  # e.g. a config value of the wrong type
            raise CheckpointError(
                f"{self.path / 'config.json'}: cannot build the model ({one_line(e)})"
            ) from None
        want = {k: tuple(v.shape) for k, v in shell.state_dict().items()}
        got = {k: tuple(v.shape) for k, v in state.items()}
        if want != got:
            key = next(iter(sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))))
            raise CheckpointError(
                f"{self.path}: {what} do not match config.json ({key}: "
                f"{got.get(key, 'missing')} stored, {want.get(key, 'none')} expected)"
            )
        core = make()
        try:
            core.load_state_dict(state)
        except (RuntimeError, KeyError) as e:
            raise CheckpointError(
                f"{self.path}: {what} do not match the model config ({one_line(e)})"
            ) from None
        return core


def load_policy(
    allow_unsigned: bool = False, manifest_key: str | bytes | None = None, limits: LoadLimits | None = None
) -> LoadPolicy:
    """The :class:`~attnrec.checkpoint.LoadPolicy` of :func:`~attnrec.recommend.load`'s keywords; a
    :class:`~attnrec.config.ConfigError` for a key too short to be one."""
    try:
        key = check_manifest_key(manifest_key)
    except ValueError as e:
        raise ConfigError(f"manifest_key: {e}") from None
    return LoadPolicy(allow_unsigned, key, limits or LoadLimits())


class LoadsModelDir:
    """A model class whose directories :func:`open_model_dir` opens for its ``TASK``: the keywords
    of :func:`~attnrec.recommend.load` stated once for every such class."""

    TASK: ClassVar[str]

    @classmethod
    def load(
        cls,
        path: str | Path,
        device: str = "auto",
        *,
        allow_unsigned: bool = False,
        manifest_key: str | bytes | None = None,
        limits: LoadLimits | None = None,
    ) -> Self:
        """Load a model directory written by ``save`` (keywords: see :func:`~attnrec.recommend.load`).
        Never unpickles."""
        policy = load_policy(allow_unsigned, manifest_key, limits)
        return cls.from_saved(open_model_dir(path, cls.TASK, policy), device)

    @classmethod
    def from_saved(cls, saved: SavedModel, device: str = "auto") -> Self:
        """The model of an opened model directory (see :func:`~attnrec.recommend.load`)."""
        raise NotImplementedError


def open_model_dir(path: str | Path, task: str | None = None, policy: LoadPolicy | None = None) -> SavedModel:
    """Open the model directory ``path`` under ``policy`` (default: unsigned directories refused,
    the default :class:`~attnrec.checkpoint.LoadLimits`): verify its files against its manifest,
    then check ``config.json``'s format, its structure, the size of the model it describes and,
    when given, its ``task``."""
    policy = policy or LoadPolicy()
    d = Path(path)
    if not d.is_dir():
        raise CheckpointError(f"{d}: not a directory; expected an attnrec checkpoint directory")
    files = read_verified(d, policy)
    if files is None:
        if not (d / "config.json").exists():
            raise CheckpointError(
                f"{d}: no {MANIFEST} and no config.json; not an attnrec checkpoint directory"
            )
        if not policy.allow_unsigned:
            raise CheckpointError(
                f"{d}: no {MANIFEST}, so nothing tells an edited file from the saved one; refused "
                "(save the model again to add one, or allow unsigned directories if you trust it: "
                "allow_unsigned=True, --allow-unsigned)"
            )
        log.warning(
            "%s: no %s (saved before model directories had one), so its files are not verified "
            "as a whole; save the model again to add one",
            d,
            MANIFEST,
        )
    saved = SavedModel(d, {}, SEQUENTIAL, files, policy)
    meta = saved.json("config")
    if not isinstance(meta, dict):
        raise CheckpointError(f"{d / 'config.json'}: not a JSON object; not an attnrec checkpoint directory")
    if "format_version" not in meta:  # another tool's config.json: was "unsupported checkpoint format None"
        raise CheckpointError(
            f"{d / 'config.json'}: no format_version; not an attnrec checkpoint directory (another tool's?)"
        )
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{d}: unsupported checkpoint format {repr(meta.get('format_version'))[:40]}")
    check_config(meta, d / "config.json")
    check_model_size(meta, policy.limits, d / "config.json")
    found = str(meta.get("task", SEQUENTIAL))
    if task is not None and found != task:
        raise CheckpointError(
            f"{d}: a checkpoint of the {found} task ({meta.get('model')}), not of the {task} "
            "task; load it with attnrec.load"
        )
    saved.meta, saved.task = meta, found
    return saved


__all__ = [
    "EXPLAIN",
    "FORMAT_VERSION",
    "ModelRecord",
    "SEQUENTIAL",
    "SavedModel",
    "load_policy",
    "open_model_dir",
    "save_model_dir",
]
