"""The user-level contract of explainable recommendation: fit, evaluate, explain, save and load.

:class:`Explainer` drives any registered ``task="explain"`` model (PETER, PETER+) on
:class:`~attnrec.data.reviews.ReviewData`, through the one training loop. A saved explainer is a
self-contained model directory written by the one persistence path
(:mod:`attnrec.recommend.persistence`): ``config.json`` (model/train/decoding settings, data
provenance, training record, evaluations; ``"task": "explain"``), ``weights.safetensors``,
``vocab.json``, ``id_maps.json`` and ``features.json``; loading never unpickles.

Explain-task models are PETER's family (:class:`~attnrec.models.peter.PETER`, PETER+): the core is
typed as that class, so its rating head, decoding and settings need no probing.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # settings dicts, JSON records and explanation answers

import numpy as np
import torch
from torch import nn

from attnrec.checkpoint import CheckpointError, load_tensors, read_json, save_tensors, write_json
from attnrec.config import ConfigError, config_from_dict
from attnrec.data.reviews import EncodedReviews, ReviewData, ReviewSplit, encode_reviews
from attnrec.data.schema import DataError, DataSource, IdMap
from attnrec.data.text import SPECIALS, Vocabulary
from attnrec.evaluation.text_metrics import explanation_metrics, mae, rmse
from attnrec.models.peter import PETER, PETERConfig
from attnrec.models.registry import ModelSpec, get_spec
from attnrec.recommend.persistence import (
    EXPLAIN,
    LoadsModelDir,
    ModelRecord,
    SavedModel,
    load_policy,
    save_model_dir,
)
from attnrec.recommend.requests import check_id
from attnrec.recommend.structure import check_features, check_vocab
from attnrec.training.loop import TrainResult, resolve_device, train
from attnrec.training.train_config import TrainConfig

_TRAIN_BASE = {"monitor": "loss", "mode": "min"}
DAMPINGS = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0)
# Named decodings (the n-gram blocking size): "paper" is the authors' plain greedy/beam decoding,
# which loops on a small model ("and it for a nice and it for a ..."); "blocked", the default,
# never repeats a trigram. benchmarks/peter_reference.py measures the looping share of both.
DECODINGS: dict[str, int] = {"paper": 0, "blocked": 3}
DEFAULT_NO_REPEAT_NGRAM = DECODINGS["blocked"]


@dataclass(frozen=True)
class Decoding:
    """How an explanation is generated (:meth:`attnrec.models.peter.PETER.generate`).

    ``beam`` 1 is greedy decoding (the paper's), more is beam search; at most ``max_len`` words (None:
    the explainer's own, by default the model's ``max_words``); ``no_repeat_ngram`` n > 0 never repeats
    an n-gram (default 3, ``DECODINGS["blocked"]``), 0 is the paper's plain decoding
    (``DECODINGS["paper"]``). An :class:`Explainer` holds one as its default; ``predict``, ``evaluate``
    and ``explain`` take another for one call, e.g. ``ex.decoding.but(beam=4)``.
    """

    beam: int = 1
    max_len: int | None = None
    no_repeat_ngram: int = DEFAULT_NO_REPEAT_NGRAM

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise ConfigError(f"beam must be at least 1, not {self.beam}")
        if self.max_len is not None and self.max_len < 1:
            raise ConfigError(f"max_len must be at least 1 word, not {self.max_len}")
        if self.no_repeat_ngram < 0:
            raise ConfigError(f"no_repeat_ngram must be >= 0, not {self.no_repeat_ngram}")

    def but(self, **changes: int | None) -> Decoding:
        """This decoding with the ``changes`` that are not None (a command's options left unset keep
        the model's)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def damped_offsets(
    user: np.ndarray, item: np.ndarray, rating: np.ndarray, n_users: int, n_items: int, damping: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """Global mean and per-user/per-item rating offsets shrunk towards 0 (Koren's baseline predictor).

    ``b_i = sum(r - mu) / (damping + n_i)`` over the item's ratings, then
    ``b_u = sum(r - mu - b_i) / (damping + n_u)``; ``n_items + 1`` item rows (row 0 is padding).
    """
    r = np.asarray(rating, dtype=np.float64)
    mu = float(r.mean())
    n_i = np.bincount(item, minlength=n_items + 1)
    b_i = np.bincount(item, weights=r - mu, minlength=n_items + 1) / (damping + n_i)
    n_u = np.bincount(user, minlength=n_users)
    b_u = np.bincount(user, weights=r - mu - b_i[item], minlength=n_users) / (damping + n_u)
    return mu, b_u, b_i


class Explainer(LoadsModelDir):
    """A ``task="explain"`` model with its vocabulary, ID maps, feature set and training record.

    Parameters
    ----------
    model : str
        Registered explain-task model (``"peter"``).
    config : dict, optional
        Model settings over the preset (e.g. ``{"use_feature": True, "emsize": 256}``).
    train : dict or TrainConfig, optional
        Training-loop settings over the preset (``paper``: SGD lr 1.0, clip 1.0, batch 128,
        lr x0.25 per epoch without validation improvement, stop at the 5th drop).
    preset : str, optional
        ``paper`` (default), ``plus`` (PETER+) or ``adam``.
    max_vocab : int
        Vocabulary size (the most frequent training words; paper 20,000).
    decoding : Decoding
        How explanations are generated unless a call says otherwise (greedy, at most the model's
        ``max_words`` words, no trigram repeated); kept with the saved model.
    """

    TASK = EXPLAIN

    def __init__(
        self,
        model: str = "peter",
        config: Mapping[str, Any] | None = None,
        train: Mapping[str, Any] | TrainConfig | None = None,
        preset: str | None = "paper",
        max_vocab: int = 20_000,
        decoding: Decoding = Decoding(),
    ) -> None:
        self.spec: ModelSpec = get_spec(model)
        if self.spec.task != EXPLAIN or not issubclass(self.spec.cls, PETER):
            raise ConfigError(f"{model} is a {self.spec.task} model; Explainer needs an explain-task model")
        model_over: dict[str, Any] = {}
        train_over: dict[str, Any] = dict(_TRAIN_BASE)
        if preset is not None:
            if preset not in self.spec.presets:
                raise ConfigError(
                    f"{model}: unknown preset {preset!r}; known: {', '.join(self.spec.presets)}"
                )
            model_over = dict(self.spec.presets[preset].get("model", {}))
            train_over |= dict(self.spec.presets[preset].get("train", {}))
        self.config: PETERConfig = config_from_dict(self.spec.config_cls, model_over | dict(config or {}))
        self.train_config = (
            train
            if isinstance(train, TrainConfig)
            else config_from_dict(TrainConfig, train_over | dict(train or {}))
        )
        self.preset, self.max_vocab = preset, max_vocab
        self.decoding = decoding.but(max_len=decoding.max_len or self.config.max_words)
        self._core: PETER | None = None
        self.vocab_: Vocabulary | None = None
        self.users_: IdMap | None = None
        self.items_: IdMap | None = None
        self.features_: tuple[str, ...] = ()
        self.item_feature_: dict[str, str] = {}
        self.rating_range_: tuple[float, float] = (1.0, 5.0)
        self.source_ = DataSource("unnamed")
        self.split_name_ = ""
        self.train_result_: TrainResult | None = None
        self.rating_core_: PETER | None = (
            None  # rating_checkpoint="own": the weights of the best validation rating
        )
        self.rating_baseline_: dict[str, Any] | None = None  # rating_baseline: the chosen damping
        self.evaluations_: list[dict[str, Any]] = []
        self.device = torch.device("cpu")

    @property
    def core(self) -> PETER:
        """The fitted model (raises :class:`RuntimeError` before :meth:`fit` or :meth:`load`)."""
        if self._core is None or self.vocab_ is None:
            raise RuntimeError(f"{self.spec.name}: call fit() or Explainer.load() first")
        return self._core

    # -- fitting ---------------------------------------------------------------------------------
    def fit(
        self,
        data: ReviewData,
        split: ReviewSplit,
        *,
        state_dir: str | Path | None = None,
        progress: bool = True,
    ) -> Explainer:
        """Build the vocabulary on ``split.train``, train, and keep the weights of the best validation loss.

        The validation loss is PETER's: text NLL + rating MSE (unweighted). With the model's
        ``rating_checkpoint="own"`` the rating is predicted by a second copy of the weights, those
        of the epoch with the lowest validation rating MSE. With ``rating_baseline`` the offsets'
        damping is the one of :data:`DAMPINGS` with the lowest validation RMSE.
        """
        train_data = data.take(split.train)
        self.vocab_ = Vocabulary.build((train_data.tokens(i) for i in range(len(train_data))), self.max_vocab)
        self.users_, self.items_ = data.users, data.items
        self.features_ = tuple(sorted(data.features()))
        per_item: dict[int, Counter[str]] = {}
        for it, f in zip(train_data.item, train_data.feature, strict=True):
            per_item.setdefault(int(it), Counter())[f] += 1
        self.item_feature_ = {
            data.items.to_external([i])[0]: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0]
            for i, c in per_item.items()
        }
        self.rating_range_, self.source_, self.split_name_ = data.rating_range, data.source, split.name
        enc_train = encode_reviews(train_data, self.vocab_, self.config.max_words)
        enc_valid = encode_reviews(data.take(split.valid), self.vocab_, self.config.max_words)
        cfg = self.train_config
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            core = self._build(data.n_users, data.n_items, len(self.vocab_))
        self._core = core
        self.rating_baseline_ = None
        if self.config.rating_baseline:
            self.rating_baseline_, offsets = self._choose_offsets(data, train_data, data.take(split.valid))
            core.init_rating(*offsets)
        else:
            core.init_rating(float(np.mean(train_data.rating)))
        self.device = resolve_device(cfg.device)
        sd = Path(state_dir) if state_dir is not None else None
        own = self.config.rating_checkpoint == "own"
        best = _RatingSnapshot(sd / "rating_best.safetensors" if sd is not None else None)

        def validate(_: nn.Module) -> dict[str, float]:  # the loop validates the module it trains: core
            parts = self._mean_losses(core, enc_valid)
            if own:
                best.offer(parts["rating"], core)
            return parts | {"loss": parts["text"] + parts["rating"]}

        self.train_result_ = train(core, enc_train, validate, cfg, state_dir=sd, progress=progress)
        self.rating_core_ = None
        if own and best.state is not None:
            self.rating_core_ = self._new_core(best.state)
        return self

    def _choose_offsets(
        self, data: ReviewData, train_data: ReviewData, valid: ReviewData
    ) -> tuple[dict[str, Any], tuple[float, np.ndarray, np.ndarray]]:
        """The damping with the lowest validation RMSE, and its offsets ``(mu, b_u, b_i)``."""
        best: tuple[float, float, tuple[float, np.ndarray, np.ndarray]] | None = None
        for damping in DAMPINGS:
            mu, b_u, b_i = damped_offsets(
                train_data.user, train_data.item, train_data.rating, data.n_users, data.n_items, damping
            )
            score = rmse(mu + b_u[valid.user] + b_i[valid.item], valid.rating, data.rating_range)
            if best is None or score < best[1]:
                best = (damping, score, (mu, b_u, b_i))
        assert best is not None
        return {"damping": best[0], "valid_RMSE": best[1]}, best[2]

    def _build(self, n_users: int, n_items: int, n_words: int) -> PETER:
        core = self.spec.cls(self.config, n_users, n_items, n_words=n_words)
        assert isinstance(core, PETER)  # checked on the class in __init__
        return core

    def _new_core(self, state: dict[str, torch.Tensor]) -> PETER:
        assert self.users_ is not None and self.items_ is not None and self.vocab_ is not None
        core = self._build(len(self.users_), len(self.items_), len(self.vocab_))
        core.load_state_dict(state)
        return core.to(self.device).eval()

    def _rating(self, user: torch.Tensor, item: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
        core = self.rating_core_ if self.rating_core_ is not None else self.core
        core.eval()
        return core.predict(user, item, feature)[0]

    def _mean_losses(self, module: PETER, enc: EncodedReviews, batch_size: int = 512) -> dict[str, float]:
        sums: dict[str, float] = {}
        n = 0
        for start in range(0, len(enc), batch_size):
            rows = np.arange(start, min(start + batch_size, len(enc)))
            batch = {k: v.to(self.device) for k, v in module.batch(enc, rows).items()}
            for k, v in module.losses(batch).items():
                sums[k] = sums.get(k, 0.0) + float(v) * len(rows)
            n += len(rows)
        return {k: v / max(n, 1) for k, v in sums.items()}

    def _require_fitted(self) -> None:
        self.core  # noqa: B018  (raises when not fitted)

    # -- prediction and evaluation -----------------------------------------------------------------
    def predict(
        self,
        data: ReviewData,
        rows: np.ndarray | None = None,
        *,
        decoding: Decoding | None = None,
        batch_size: int = 256,
    ) -> tuple[np.ndarray, list[list[str]]]:
        """Predicted ratings and generated explanations (tokens) of ``data`` (records ``rows``), decoded
        as ``decoding`` says (None: :attr:`decoding`).

        ``data`` must use this explainer's ID maps (the same dataset it was trained on); PETER+
        is given each record's ground-truth feature, as in the paper.
        """
        self._require_fitted()
        assert self.vocab_ is not None
        part = data if rows is None else data.take(rows)
        enc = encode_reviews(part, self.vocab_, self.config.max_words)
        ratings: list[np.ndarray] = []
        texts: list[list[str]] = []
        self.core.eval()
        with torch.no_grad():
            for start in range(0, len(enc), batch_size):
                r = np.arange(start, min(start + batch_size, len(enc)))
                u, i = (
                    torch.from_numpy(enc.user[r]).to(self.device),
                    torch.from_numpy(enc.item[r]).to(self.device),
                )
                f = torch.from_numpy(enc.feature[r]).to(self.device)
                ratings.append(self._rating(u, i, f).float().cpu().numpy())
                ids = self.core.generate(u, i, f, **self._generation(decoding))
                texts.extend(self.vocab_.decode(x) for x in ids)
        return np.concatenate(ratings) if ratings else np.zeros(0), texts

    def evaluate(
        self,
        data: ReviewData,
        rows: np.ndarray | None = None,
        *,
        decoding: Decoding | None = None,
        target: str = "test",
    ) -> dict[str, float]:
        """RMSE/MAE and every text metric on ``data`` (records ``rows``), explanations decoded as
        ``decoding`` says (None: :attr:`decoding`); kept with the model."""
        self._require_fitted()
        assert self.vocab_ is not None
        self._check_same_maps(data)
        part = data if rows is None else data.take(rows)
        t0 = time.perf_counter()
        decoding = decoding or self.decoding
        pred, generated = self.predict(part, decoding=decoding)
        enc = encode_reviews(part, self.vocab_, self.config.max_words)
        refs = [self.vocab_.decode(row[1:]) for row in enc.text]
        metrics = {
            "RMSE": rmse(pred, part.rating, self.rating_range_),
            "MAE": mae(pred, part.rating, self.rating_range_),
        }
        metrics |= explanation_metrics(refs, generated, list(part.feature), self.features_)
        self.evaluations_.append(
            {
                "target": target,
                "records": len(part),
                "split": self.split_name_,
                "data": dataclasses.asdict(part.source),
                "beam": decoding.beam,
                "no_repeat_ngram": decoding.no_repeat_ngram,
                "seconds": time.perf_counter() - t0,
                "metrics": metrics,
            }
        )
        return metrics

    def _generation(self, decoding: Decoding | None) -> dict[str, int]:
        """The keywords of ``PETER.generate`` for ``decoding`` (None: the explainer's own)."""
        d = decoding or self.decoding
        max_len = d.max_len or self.decoding.max_len
        assert max_len is not None  # the explainer's own is resolved in __init__
        return {"max_len": max_len, "beam": d.beam, "no_repeat_ngram": d.no_repeat_ngram}

    def _check_same_maps(self, data: ReviewData) -> None:
        assert self.users_ is not None and self.items_ is not None
        if data.users.to_list() != self.users_.to_list() or data.items.to_list() != self.items_.to_list():
            raise DataError(
                "the data's user/item IDs differ from the model's; evaluate on the dataset it was "
                "trained on (same file and template extractor)"
            )

    def explain(
        self,
        user: object,
        item: object,
        feature: str | None = None,
        *,
        decoding: Decoding | None = None,
        n_context: int = 10,
    ) -> dict[str, Any]:
        """``{"rating", "text", "context_words", "feature"}`` for a known ``user`` and ``item``, the text
        decoded as ``decoding`` says (None: :attr:`decoding`).

        PETER+ uses ``feature`` when given, else the item's most frequent training feature.
        """
        self._require_fitted()
        assert self.users_ is not None and self.items_ is not None and self.vocab_ is not None
        u, i = self.users_.get(check_id("user", user)), self.items_.get(check_id("item", item))
        if u is None or i is None:
            unknown = [f"user {user!r}"] * (u is None) + [f"item {item!r}"] * (i is None)
            raise DataError(f"unknown {' and '.join(unknown)}; explanations need IDs seen in training")
        if self.config.use_feature and feature is None:
            feature = self.item_feature_.get(str(self.items_.external[i - self.items_.offset]))  # as trained
        fid = self.vocab_.index(feature) if feature else self.vocab_.unk
        ut, it = torch.tensor([u], device=self.device), torch.tensor([i], device=self.device)
        ft = torch.tensor([fid], device=self.device)
        self.core.eval()
        with torch.no_grad():
            rating, context = self.core.predict(ut, it, ft)
            if self.rating_core_ is not None:  # rating_checkpoint="own": the rating's own weights
                rating = self._rating(ut, it, ft)
            ids = self.core.generate(ut, it, ft, **self._generation(decoding))[0]
        top = context[0].topk(n_context + len(SPECIALS)).indices.tolist()
        words = [self.vocab_.words[j] for j in top if j >= len(SPECIALS)][:n_context]
        lo, hi = self.rating_range_
        return {
            "user": str(user),
            "item": str(item),
            "rating": float(np.clip(float(rating[0]), lo, hi)),
            "text": " ".join(self.vocab_.decode(ids)),
            "context_words": words,
            "feature": feature if self.config.use_feature else None,
        }

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path: str | Path, *, manifest_key: str | bytes | None = None) -> Path:
        """Write a self-contained model directory (see :mod:`attnrec.recommend.persistence`); with
        ``manifest_key``, its manifest is signed."""
        core = self.core
        assert self.users_ is not None and self.items_ is not None and self.vocab_ is not None
        record = ModelRecord.of(self)
        tensors = {"weights": core.state_dict()}
        if self.rating_core_ is not None:
            tensors["rating_weights"] = self.rating_core_.state_dict()
        files = {
            "vocab": list(self.vocab_.words),
            "features": {"features": list(self.features_), "item_feature": self.item_feature_},
        }
        meta = {
            "max_vocab": self.max_vocab,
            "decode": dataclasses.asdict(self.decoding),
            "n_words": len(self.vocab_),
            "rating_range": list(self.rating_range_),
            "split": self.split_name_,
            "rating_baseline": self.rating_baseline_,
        }
        key = load_policy(manifest_key=manifest_key).manifest_key
        return save_model_dir(path, record, tensors, files, meta, task=EXPLAIN, manifest_key=key)

    @classmethod
    def from_saved(cls, saved: SavedModel, device: str = "auto") -> Explainer:
        """The explainer of an opened model directory (see :func:`~attnrec.recommend.load`)."""
        meta, record = saved.meta, saved.record
        ex = cls(
            record.model,
            record.model_config,
            record.train_config,
            preset=None,
            max_vocab=meta["max_vocab"],
            decoding=Decoding(
                beam=meta["decode"]["beam"],
                max_len=meta["decode"]["max_len"],
                # directories saved before n-gram blocking existed get today's default
                no_repeat_ngram=int(meta["decode"].get("no_repeat_ngram", DEFAULT_NO_REPEAT_NGRAM)),
            ),
        )
        ex.preset = record.preset
        try:
            ex.vocab_ = Vocabulary(
                tuple(check_vocab(saved.json("vocab"), meta.get("n_words"), saved.path / "vocab.json"))
            )
        except ValueError as e:  # not the special tokens first
            raise CheckpointError(f"{saved.path / 'vocab.json'}: {e}") from None
        ex.users_, ex.items_ = record.users, record.items
        words, item_feature = check_features(saved.json("features"), saved.path / "features.json")
        ex.features_, ex.item_feature_ = tuple(words), item_feature
        ex.rating_range_ = (float(meta["rating_range"][0]), float(meta["rating_range"][1]))
        ex.source_, ex.split_name_ = record.source, meta.get("split", "")
        ex.evaluations_, ex.train_result_ = record.evaluations, record.train_result
        core = saved.build(lambda: ex._build(meta["n_users"], meta["n_items"], meta["n_words"]))
        ex.device = resolve_device(device)
        ex._core = core.to(ex.device).eval()
        ex.rating_baseline_ = meta.get("rating_baseline")
        if saved.has_tensors("rating_weights"):
            rating_core = saved.build(
                lambda: ex._build(meta["n_users"], meta["n_items"], meta["n_words"]), "rating_weights"
            )
            ex.rating_core_ = rating_core.to(ex.device).eval()
        return ex


class _RatingSnapshot:
    """The weights of the lowest validation rating MSE so far; beside the loop's state when resumable."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.mse, self.state = path, math.inf, None
        if path is not None and path.exists():  # resuming: the snapshot of the interrupted run
            self.state = load_tensors(path)
            self.mse = float(read_json(path.with_suffix(".json"))["mse"])

    def offer(self, mse: float, module: torch.nn.Module) -> None:
        if mse < self.mse:
            self.mse = mse
            self.state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
            if self.path is not None:
                save_tensors(self.path, self.state)
                write_json(self.path.with_suffix(".json"), {"mse": mse})


__all__ = ["DAMPINGS", "DECODINGS", "DEFAULT_NO_REPEAT_NGRAM", "Decoding", "Explainer", "damped_offsets"]
