"""The user-level contract: fit on an interaction log, recommend with external IDs, save and load.

Every registered sequential model is driven through :class:`Recommender`; the CLI, the HTTP
service and the benchmarks depend only on this class.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnrec import __version__
from attnrec.checkpoint import CheckpointError, load_tensors, read_json, save_tensors, write_json
from attnrec.config import ConfigError, config_from_dict, config_to_dict
from attnrec.data.schema import DataError, DataSource, IdMap, Interactions, Sequences
from attnrec.data.split import EvalSet, Split, leave_one_out
from attnrec.evaluation.protocol import FULL, EvalResult, Protocol, evaluate
from attnrec.registry import ModelSpec, get_spec
from attnrec.training.config import TrainConfig
from attnrec.training.loop import TrainResult, resolve_device, train

log = logging.getLogger("attnrec")
FORMAT_VERSION = 1


@dataclass
class Recommendation:
    """Top-k answer for one request, in external IDs."""

    items: list[str]
    scores: list[float]
    titles: list[str | None] = field(default_factory=list)
    user: str | None = None
    unknown_items: list[str] = field(default_factory=list)
    fallback: str | None = None  # why the answer is not fully personalised, when it is not


class Recommender:
    """A registered model plus its ID maps, item metadata and training record.

    Parameters
    ----------
    model : str
        Registered model name (see :func:`attnrec.list_models`).
    config : dict or dataclass, optional
        Model settings over the defaults (or over ``preset``); unknown keys are errors.
    train : dict or TrainConfig, optional
        Training-loop settings (neural models).
    preset : str, optional
        Named preset of the model (e.g. ``"paper"``).
    """

    def __init__(
        self,
        model: str,
        config: dict[str, Any] | object | None = None,
        train: dict[str, Any] | TrainConfig | None = None,
        preset: str | None = None,
    ) -> None:
        self.spec: ModelSpec = get_spec(model)
        model_over: dict[str, Any] = {}
        train_over: dict[str, Any] = {}
        if preset is not None:
            if preset not in self.spec.presets:
                raise ConfigError(f"{model}: unknown preset {preset!r}; known: {', '.join(self.spec.presets) or 'none'}")
            model_over = dict(self.spec.presets[preset].get("model", {}))
            train_over = dict(self.spec.presets[preset].get("train", {}))
        if dataclasses.is_dataclass(config) and not isinstance(config, type):
            self.config: Any = config
        else:
            self.config = config_from_dict(self.spec.config_cls, model_over | dict(config or {}))  # type: ignore[arg-type]
        if isinstance(train, TrainConfig):
            self.train_config = train
        else:
            self.train_config = config_from_dict(TrainConfig, train_over | dict(train or {}))
        self.preset = preset
        self.core: Any = None
        self.users_: IdMap | None = None
        self.items_: IdMap | None = None
        self.histories_: Sequences | None = None
        self.popularity_: np.ndarray | None = None
        self.titles_: dict[str, str] = {}
        self.source_: DataSource = DataSource("unnamed")
        self.train_result_: TrainResult | None = None
        self.evaluations_: list[dict[str, Any]] = []
        self.device = torch.device("cpu")

    @property
    def name(self) -> str:
        return self.spec.name

    # -- fitting ---------------------------------------------------------------------------------
    def fit(
        self,
        data: Interactions,
        split: Split | None = None,
        *,
        valid_protocol: Protocol = FULL,
        state_dir: str | Path | None = None,
        progress: bool = True,
    ) -> Recommender:
        """Train on ``split.train`` (leave-one-out by default), selecting on ``split.valid``."""
        split = split or leave_one_out(data)
        self._set_data(data)
        n_users, n_items = data.n_users, data.n_items
        cfg = self.train_config
        with torch.random.fork_rng():  # seeded initialisation without touching the caller's RNG
            torch.manual_seed(cfg.seed)
            self.core = self.spec.cls(self.config, n_users, n_items)
        popularity = self.popularity_

        def validate(_: object) -> dict[str, float]:
            res = evaluate(self.score_histories, split.valid, valid_protocol, popularity=popularity,
                           split=split.name, target="valid", batch_size=512)
            return res.metrics

        if self.spec.kind == "torch":
            self.device = resolve_device(cfg.device)
            sd = Path(state_dir) if state_dir is not None else None
            self.train_result_ = train(self.core, split.train, validate, cfg, state_dir=sd, progress=progress)
        else:
            t0 = time.perf_counter()
            self.core.fit(split.train, np.random.default_rng(cfg.seed))
            metrics = validate(self.core)
            self.train_result_ = TrainResult(1, metrics.get(cfg.monitor, float("nan")), metrics, 1,
                                             time.perf_counter() - t0, "fitted",
                                             [{"epoch": 1, "train_seconds": time.perf_counter() - t0, "valid": metrics}])
        return self

    def _set_data(self, data: Interactions) -> None:
        self.users_, self.items_ = data.users, data.items
        self.histories_ = data.sequences()
        self.popularity_ = data.item_popularity()
        self.titles_ = dict(data.item_titles or {})
        self.source_ = data.source

    def _require_fitted(self) -> None:
        if self.core is None or self.items_ is None:
            raise RuntimeError(f"{self.name}: call fit() or Recommender.load() first")

    # -- scoring ---------------------------------------------------------------------------------
    def score_histories(self, users: np.ndarray, histories: Sequences) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` of internal-index histories (column 0 is padding)."""
        self._require_fitted()
        if self.spec.kind == "torch":
            batch = self.core.score_inputs(users, histories)
            batch = {k: v.to(self.device) for k, v in batch.items()}
            self.core.eval()
            with torch.no_grad():
                return self.core.score(batch)  # type: ignore[no-any-return]
        return self.core.score(users, histories)  # type: ignore[no-any-return]

    def evaluate(
        self, cases: EvalSet, protocol: Protocol = FULL, *, split: str = "leave-one-out", target: str = "test"
    ) -> EvalResult:
        """Evaluate on ``cases`` under ``protocol``; the result is also kept with the model."""
        self._require_fitted()
        res = evaluate(self.score_histories, cases, protocol, popularity=self.popularity_, data=self.source_,
                       split=split, target=target)
        self.evaluations_.append(res.to_dict())
        return res

    def recommend(
        self,
        user: object | None = None,
        history: list[object] | None = None,
        k: int = 10,
        exclude_seen: bool = True,
        include: list[object] | None = None,
        exclude: list[object] | None = None,
    ) -> Recommendation:
        """Top-``k`` items for a known ``user`` or an ad-hoc ``history`` of external item IDs.

        Unknown items in ``history`` are ignored and listed in ``unknown_items``. An unknown user
        without a history, or an empty history, gets the most popular items (``fallback`` says so).
        ``include`` restricts the candidates; ``exclude`` removes items.
        """
        self._require_fitted()
        assert self.items_ is not None and self.users_ is not None and self.histories_ is not None
        if k < 1:
            raise ValueError("k must be at least 1")
        fallback, unknown, uid = None, [], 0
        if history is not None:
            hist, unknown = self.items_.split_known(history)
            if user is not None and user in self.users_:
                uid = int(self.users_.get(user))  # type: ignore[arg-type]
        elif user is not None:
            idx = self.users_.get(user)
            if idx is None:
                hist, fallback = np.zeros(0, dtype=np.int64), f"unknown user {user!r}: most popular items"
            else:
                uid, hist = idx, self.histories_[idx]
        else:
            raise ValueError("give a user or a history")
        if len(hist) == 0:
            fallback = fallback or "no known items in the history: most popular items"
            scores = torch.as_tensor(self.popularity_, dtype=torch.float32).clone()
        else:
            seqs = Sequences(np.array([0, len(hist)]), hist, len(self.items_))
            scores = self.score_histories(np.array([uid]), seqs)[0].float().cpu()
        scores[0] = -torch.inf
        if exclude_seen and len(hist):
            scores[torch.as_tensor(hist)] = -torch.inf
        if include is not None:
            allowed, _ = self.items_.split_known(include)
            keep = torch.zeros_like(scores, dtype=torch.bool)
            keep[torch.as_tensor(allowed, dtype=torch.long)] = True
            scores[~keep] = -torch.inf
        if exclude:
            drop, _ = self.items_.split_known(exclude)
            scores[torch.as_tensor(drop, dtype=torch.long)] = -torch.inf
        n_ok = int(torch.isfinite(scores).sum())
        top = torch.topk(scores, min(k, n_ok))
        items = self.items_.to_external(top.indices.numpy())
        return Recommendation(items, [float(s) for s in top.values], [self.titles_.get(i) for i in items],
                              None if user is None else str(user), unknown, fallback)

    # -- persistence -----------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write a self-contained checkpoint directory (no training data needed to load it)."""
        self._require_fitted()
        assert self.items_ is not None and self.users_ is not None and self.histories_ is not None
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        weights = self.core.state_dict()
        arrays = {"popularity": torch.as_tensor(self.popularity_),
                  "history_offsets": torch.as_tensor(self.histories_.offsets),
                  "history_items": torch.as_tensor(self.histories_.items.astype(np.int32))}
        meta = {
            "format_version": FORMAT_VERSION,
            "attnrec_version": __version__,
            "model": self.name,
            "preset": self.preset,
            "model_config": config_to_dict(self.config),
            "train_config": config_to_dict(self.train_config),
            "n_users": len(self.users_),
            "n_items": len(self.items_),
            "data": dataclasses.asdict(self.source_),
            "train_result": self.train_result_.to_dict() if self.train_result_ else None,
            "evaluations": self.evaluations_,
            "weights_sha256": save_tensors(d / "weights.safetensors", weights),
            "arrays_sha256": save_tensors(d / "arrays.safetensors", arrays),
        }
        write_json(d / "id_maps.json", {"users": self.users_.to_list(), "items": self.items_.to_list()})
        write_json(d / "titles.json", self.titles_)
        write_json(d / "config.json", meta)
        return d

    @classmethod
    def load(cls, path: str | Path, device: str = "auto") -> Recommender:
        """Load a checkpoint directory written by :meth:`save`. Never unpickles."""
        d = Path(path)
        if not d.is_dir():
            raise CheckpointError(f"{d}: not a directory; expected an attnrec checkpoint directory")
        meta = read_json(d / "config.json")
        if meta.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(f"{d}: unsupported checkpoint format {meta.get('format_version')!r}")
        rec = cls(meta["model"], meta["model_config"], meta["train_config"])
        rec.preset = meta.get("preset")
        maps = read_json(d / "id_maps.json")
        rec.users_, rec.items_ = IdMap(np.array(maps["users"], dtype=object), 0), IdMap(np.array(maps["items"], dtype=object), 1)
        rec.titles_ = read_json(d / "titles.json") if (d / "titles.json").exists() else {}
        arrays = load_tensors(d / "arrays.safetensors", meta.get("arrays_sha256"))
        rec.popularity_ = arrays["popularity"].numpy()
        rec.histories_ = Sequences(arrays["history_offsets"].numpy(), arrays["history_items"].numpy().astype(np.int64),
                                   len(rec.items_))
        rec.source_ = DataSource(**meta["data"])
        rec.evaluations_ = list(meta.get("evaluations") or [])
        tr = meta.get("train_result")
        if tr:
            tr.pop("seconds_per_epoch", None)
            rec.train_result_ = TrainResult(**tr)
        rec.core = rec.spec.cls(rec.config, meta["n_users"], meta["n_items"])
        weights = load_tensors(d / "weights.safetensors", meta.get("weights_sha256"))
        try:
            rec.core.load_state_dict(weights)
        except (RuntimeError, KeyError) as e:
            raise CheckpointError(f"{d}: weights do not match the model config ({e})") from e
        if rec.spec.kind == "torch":
            rec.device = resolve_device(device)
            rec.core.to(rec.device).eval()
        return rec

    @property
    def meta(self) -> dict[str, Any]:
        """A JSON-ready description: model, config, data and the evaluations it carries."""
        return {"model": self.name, "preset": self.preset, "config": config_to_dict(self.config),
                "data": dataclasses.asdict(self.source_), "evaluations": self.evaluations_,
                "n_items": len(self.items_) if self.items_ else 0}


def load(path: str | Path, device: str = "auto") -> Recommender:
    """Load a saved model directory; see :meth:`Recommender.load`."""
    return Recommender.load(path, device)


__all__ = ["Recommender", "Recommendation", "load", "DataError"]
