"""The user-level contract: fit on an interaction log, recommend with external IDs, save and load.

Every registered sequential model is driven through :class:`Recommender`; the CLI, the HTTP
service and the benchmarks depend only on this class.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnrec import __version__
from attnrec.checkpoint import CheckpointError, load_tensors, read_json, save_tensors, write_json
from attnrec.config import ConfigError, config_from_dict, config_to_dict
from attnrec.data.schema import DataError, DataSource, IdMap, Interactions, Sequences
from attnrec.data.split import EvalSet, Split, leave_one_out
from attnrec.evaluation.protocol import FULL, EvalResult, Protocol, evaluate
from attnrec.registry import ModelSpec, factorised, get_spec
from attnrec.training.config import TrainConfig
from attnrec.training.loop import TrainResult, resolve_device, train

if TYPE_CHECKING:
    from attnrec.explainer import Explainer

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
    method: str | None = None  # how it was scored: model, popularity, embedding-cosine, co-occurrence


RECOMMEND_KEYS = frozenset({"user", "history", "k", "exclude_seen", "include", "exclude"})
CHUNK_ELEMENTS = 1 << 22  # score-matrix elements computed at once by the chunked top-k (16 MiB float32)


def topk_chunked(
    chunk_scores: Callable[[int, int], torch.Tensor],
    n_rows: int,
    n_cols: int,
    k: int,
    banned_rows: torch.Tensor,
    banned_cols: torch.Tensor,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise top-``k`` over columns ``1..n_cols-1`` without materialising the full score matrix.

    ``chunk_scores(lo, hi)`` returns a fresh ``(n_rows, hi - lo)`` float tensor of the scores of
    columns ``lo..hi-1`` (the routine writes into it). Entries ``(banned_rows[j], banned_cols[j])``
    are excluded. Returns ``(values, indices)`` of shape ``(n_rows, min(k, n_cols - 1))``; rows
    with fewer allowed columns than ``k`` end in ``-inf`` values.
    """
    step = max(k, chunk_elements // max(n_rows, 1))
    vals, idxs = [], []
    for lo in range(1, n_cols, step):  # column 0 is padding: never a candidate
        hi = min(n_cols, lo + step)
        s = chunk_scores(lo, hi).float()  # (B, hi - lo)
        if len(banned_cols):
            sel = (banned_cols >= lo) & (banned_cols < hi)
            s[banned_rows[sel], banned_cols[sel] - lo] = -torch.inf
        v, i = torch.topk(s, min(k, hi - lo), dim=1)
        vals.append(v)
        idxs.append(i + lo)
    if len(vals) == 1:
        return vals[0], idxs[0]
    v, j = torch.topk(torch.cat(vals, 1), min(k, n_cols - 1), dim=1)
    return v, torch.gather(torch.cat(idxs, 1), 1, j)


class _RowScores:
    """Scores of a batch of rows over the catalog: ``query @ vectors.T (+ bias)`` or a full matrix."""

    def __init__(self, query: torch.Tensor | None = None, vectors: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, full: torch.Tensor | None = None) -> None:
        self.query, self.vectors, self.bias, self.full = query, vectors, bias, full

    def chunk(self, lo: int, hi: int) -> torch.Tensor:
        if self.full is not None:
            return self.full[:, lo:hi].float().clone()
        assert self.query is not None and self.vectors is not None
        s = self.query @ self.vectors[lo:hi].T  # (B, hi - lo)
        return s if self.bias is None else s + self.bias[lo:hi]

    def at(self, row: int, cols: torch.Tensor) -> torch.Tensor:
        if self.full is not None:
            return self.full[row, cols].float()
        assert self.query is not None and self.vectors is not None
        s = self.vectors[cols] @ self.query[row]  # (C,)
        return s if self.bias is None else s + self.bias[cols]


@dataclass
class _Prepared:
    """One recommendation request resolved to internal indices."""

    uid: int
    hist: np.ndarray
    k: int
    banned: np.ndarray
    allowed: np.ndarray | None
    user: str | None
    unknown: list[str]
    fallback: str | None


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
            self.config = config_from_dict(self.spec.config_cls, model_over | dict(config or {}))  # type: ignore[call-overload]
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
        self._cache: dict[str, Any] = {}  # derived serving data (popularity tensor, norms, inverted index)

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
                           split=split.describe(), target="valid", batch_size=512,
                           candidate_scorer=self.score_candidates)
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
        self._cache.clear()

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
                return self.core.score(batch)
        return self.core.score(users, histories)

    def score_candidates(self, users: np.ndarray, histories: Sequences, items: torch.Tensor) -> torch.Tensor:
        """Scores ``(B, C)`` of the internal ``items`` ``(B, C)`` only, equal to the matching columns
        of :meth:`score_histories`. Factorised models (``query_vectors``/``item_vectors``) and models
        with ``score_items(batch, items)`` score just those items, so sampled-negative evaluation
        over a large catalog costs ``C`` scores per case, not the whole catalog."""
        self._require_fitted()
        core = self.core
        by_vectors = factorised(core)
        if not (self.spec.kind == "torch" and (by_vectors or hasattr(core, "score_items"))):
            return self.score_histories(users, histories).gather(1, items.to(self.device))
        batch = {k: v.to(self.device) for k, v in core.score_inputs(users, histories).items()}
        core.eval()
        with torch.no_grad():
            if not by_vectors:  # the model scores (user, item) pairs itself, e.g. NCF's MLP
                return core.score_items(batch, items.to(self.device))
            query = core.query_vectors(batch)  # (B, D)
            idx = items.to(query.device)  # (B, C)
            scores = (core.item_vectors()[idx] @ query[:, :, None]).squeeze(-1)  # (B, C)
            if hasattr(core, "item_bias"):
                scores = scores + core.item_bias()[idx]
        return scores

    def evaluate(
        self, cases: EvalSet, protocol: Protocol = FULL, *, split: str = "leave-one-out", target: str = "test"
    ) -> EvalResult:
        """Evaluate on ``cases`` under ``protocol``; the result is also kept with the model."""
        self._require_fitted()
        res = evaluate(self.score_histories, cases, protocol, popularity=self.popularity_, data=self.source_,
                       split=split, target=target, candidate_scorer=self.score_candidates)
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
        with a history is scored from the history; an unknown user without one, or a history of
        only unknown items, gets the most popular items (``fallback`` says so in both cases).
        ``include`` restricts the candidates; ``exclude`` removes items.
        """
        return self.recommend_many([{"user": user, "history": history, "k": k, "exclude_seen": exclude_seen,
                                     "include": include, "exclude": exclude}])[0]

    def recommend_many(self, requests: Sequence[Mapping[str, Any]]) -> list[Recommendation]:
        """Answer several :meth:`recommend` requests (dicts of its keyword arguments) in one batch.

        The histories are encoded together and the catalog is scored in chunks with a running
        top-k, so a batch costs one forward pass and no per-item Python work; the answers equal
        those of :meth:`recommend` one by one (up to float rounding of the batched matrix product).
        """
        self._require_fitted()
        assert self.items_ is not None
        prepared = [self._prepare(r) for r in requests]
        out: list[Recommendation | None] = [None] * len(prepared)
        model_rows = [i for i, p in enumerate(prepared) if len(p.hist)]
        pop_rows = [i for i, p in enumerate(prepared) if not len(p.hist)]
        with torch.inference_mode():
            if model_rows:
                rows = [prepared[i] for i in model_rows]
                for i, rec in zip(model_rows, self._answer(rows, self._model_scores(rows), "model"), strict=True):
                    out[i] = rec
            if pop_rows:
                rows = [prepared[i] for i in pop_rows]
                pop = self._popularity_tensor().unsqueeze(0).expand(len(rows), -1)
                for i, rec in zip(pop_rows, self._answer(rows, _RowScores(full=pop), "popularity"), strict=True):
                    out[i] = rec
        return [r for r in out if r is not None]

    def _prepare(self, request: Mapping[str, Any]) -> _Prepared:
        assert self.items_ is not None and self.users_ is not None and self.histories_ is not None
        bad = set(request) - RECOMMEND_KEYS
        if bad:
            raise TypeError(f"unknown recommend arguments: {sorted(bad)}; known: {sorted(RECOMMEND_KEYS)}")
        user, history = request.get("user"), request.get("history")
        k = int(request.get("k", 10))
        if k < 1:
            raise ValueError("k must be at least 1")
        fallback: str | None = None
        unknown: list[str] = []
        uid = -1  # no known user: models with user embeddings fold the history in (models/_baselines.py)
        if history is not None:
            hist, unknown = self.items_.split_known(history)
            if user is not None:
                if user in self.users_:
                    uid = int(self.users_.get(user))  # type: ignore[arg-type]
                else:
                    fallback = f"unknown user {user!r}: scored from the given history"
        elif user is not None:
            idx = self.users_.get(user)
            if idx is None:
                hist, fallback = np.zeros(0, dtype=np.int64), f"unknown user {user!r}: most popular items"
            else:
                uid, hist = idx, self.histories_[idx]
        else:
            raise ValueError("give a user or a history")
        if len(hist) == 0:
            if fallback is None or history is not None:
                fallback = "no known items in the history: most popular items"
        banned = [hist] if request.get("exclude_seen", True) else []
        if request.get("exclude"):
            banned.append(self.items_.split_known(request["exclude"])[0])
        allowed = None
        if request.get("include") is not None:
            allowed = np.unique(self.items_.split_known(request["include"])[0])
        ban = np.unique(np.concatenate(banned)) if banned else np.zeros(0, dtype=np.int64)
        return _Prepared(uid, hist, k, ban, allowed, None if user is None else str(user), unknown, fallback)

    def _model_scores(self, rows: list[_Prepared]) -> _RowScores:
        """Scores of non-empty histories: factorised (query and item vectors) when the model allows.

        Rows are encoded in groups of similar length (powers of two, up to the model's ``max_len``)
        so that a short ad-hoc history batched with long stored ones is not padded to their length.
        """
        assert self.items_ is not None
        users = np.array([p.uid for p in rows], dtype=np.int64)
        lengths = np.array([len(p.hist) for p in rows], dtype=np.int64)
        cap = getattr(getattr(self.core, "config", None), "max_len", None)
        bucket = np.ceil(np.log2(np.minimum(lengths, cap or lengths.max()))).astype(np.int64)
        groups = [np.flatnonzero(bucket == b) for b in np.unique(bucket)]

        def seqs_of(g: np.ndarray) -> Sequences:
            offsets = np.zeros(len(g) + 1, dtype=np.int64)
            np.cumsum(lengths[g], out=offsets[1:])
            return Sequences(offsets, np.concatenate([rows[i].hist for i in g]), len(self.items_))  # type: ignore[arg-type]

        core = self.core
        if self.spec.kind == "torch" and factorised(core):
            if getattr(core, "training", False):  # eval() walks every submodule: only when needed
                core.eval()
            parts = []
            for g in groups:
                batch = {k: v.to(self.device) for k, v in core.score_inputs(users[g], seqs_of(g)).items()}
                parts.append(core.query_vectors(batch).float())
            query = parts[0] if len(groups) == 1 else torch.empty(len(rows), parts[0].shape[1], device=parts[0].device)
            if len(groups) > 1:
                for g, q in zip(groups, parts, strict=True):
                    query[torch.as_tensor(g, device=q.device)] = q
            bias = core.item_bias() if hasattr(core, "item_bias") else None
            return _RowScores(query=query, vectors=core.item_vectors().float(),
                              bias=None if bias is None else bias.float())
        if len(groups) == 1:
            return _RowScores(full=self.score_histories(users, seqs_of(groups[0])))
        full: torch.Tensor | None = None
        for g in groups:
            part = self.score_histories(users[g], seqs_of(g))
            if full is None:
                full = torch.empty(len(rows), part.shape[1], dtype=part.dtype, device=part.device)
            full[torch.as_tensor(g, device=part.device)] = part
        return _RowScores(full=full)

    def _answer(self, rows: list[_Prepared], scores: _RowScores, method: str) -> list[Recommendation]:
        assert self.items_ is not None
        n_cols = len(self.items_) + 1
        device = scores.query.device if scores.query is not None else scores.full.device  # type: ignore[union-attr]
        answers: list[tuple[torch.Tensor, torch.Tensor]] = [None] * len(rows)  # type: ignore[list-item]
        open_rows = [i for i, p in enumerate(rows) if p.allowed is None]
        for i, p in enumerate(rows):  # include lists: score just those candidates
            if p.allowed is not None:
                cand = p.allowed[~np.isin(p.allowed, p.banned)]
                cand_t = torch.as_tensor(cand, dtype=torch.long, device=device)
                s = scores.at(i, cand_t) if len(cand) else torch.zeros(0, device=device)
                v, j = torch.topk(s, min(p.k, len(cand)))
                answers[i] = (v, cand_t[j])
        if open_rows:
            k = max(rows[i].k for i in open_rows)
            sub = scores
            if len(open_rows) < len(rows):
                sel = torch.as_tensor(open_rows, device=device)
                sub = _RowScores(None if scores.query is None else scores.query[sel], scores.vectors, scores.bias,
                                 None if scores.full is None else scores.full[sel])
            lens = [len(rows[i].banned) for i in open_rows]
            b_rows = torch.as_tensor(np.repeat(np.arange(len(open_rows)), lens), dtype=torch.long, device=device)
            b_cols = torch.as_tensor(np.concatenate([rows[i].banned for i in open_rows]), dtype=torch.long,
                                     device=device)
            v, ix = topk_chunked(sub.chunk, len(open_rows), n_cols, k, b_rows, b_cols)
            for r, i in enumerate(open_rows):
                answers[i] = (v[r, : rows[i].k], ix[r, : rows[i].k])
        out = []
        for p, (v, ix) in zip(rows, answers, strict=True):
            v, ix = v.cpu(), ix.cpu()
            ok = torch.isfinite(v)
            v, ix = v[ok], ix[ok]
            items = self.items_.to_external(ix.numpy())
            out.append(Recommendation(items, v.tolist(), [self.titles_.get(i) for i in items], p.user, p.unknown,
                                      p.fallback, method))
        return out

    def _popularity_tensor(self) -> torch.Tensor:
        pop = self._cache.get("popularity")
        if pop is None:
            pop = torch.as_tensor(np.asarray(self.popularity_), dtype=torch.float32)
            self._cache["popularity"] = pop
        return pop

    # -- item-to-item ----------------------------------------------------------------------------
    def similar_items(self, item: object, k: int = 10) -> Recommendation:
        """The ``k`` items most similar to ``item`` (an external ID), most similar first.

        Cosine similarity of the model's item vectors when it has them (``item_vectors()``;
        ``method="embedding-cosine"``), otherwise cosine of co-occurrence in the stored user
        histories (``method="co-occurrence"``: items never seen with ``item`` are not returned).
        Raises :class:`KeyError` for an unknown item.
        """
        self._require_fitted()
        assert self.items_ is not None
        if k < 1:
            raise ValueError("k must be at least 1")
        idx = self.items_.get(item)
        if idx is None:
            raise KeyError(f"unknown item {str(item)!r}")
        n_cols = len(self.items_) + 1
        banned = torch.tensor([idx], dtype=torch.long)
        with torch.inference_mode():
            if self.spec.kind == "torch" and hasattr(self.core, "item_vectors"):
                method = "embedding-cosine"
                vectors = self.core.item_vectors().float()
                inv_norm = self._inverse_norms(vectors)
                q = (vectors[idx] * inv_norm[idx]).unsqueeze(0)  # (1, D)

                def chunk(lo: int, hi: int) -> torch.Tensor:
                    return (q @ vectors[lo:hi].T) * inv_norm[lo:hi]

                v, ix = topk_chunked(chunk, 1, n_cols, k, torch.zeros(1, dtype=torch.long, device=vectors.device),
                                     banned.to(vectors.device))
            else:
                method = "co-occurrence"
                co = torch.as_tensor(self._cooccurrence(idx), dtype=torch.float32)
                pop = self._popularity_tensor().clamp_min(1.0)
                s = co / torch.sqrt(pop * pop[idx])
                s[co == 0] = -torch.inf
                v, ix = topk_chunked(lambda lo, hi: s[lo:hi].unsqueeze(0).clone(), 1, n_cols, k,
                                     torch.zeros(1, dtype=torch.long), banned)
        v, ix = v[0].cpu(), ix[0].cpu()
        ok = torch.isfinite(v)
        items = self.items_.to_external(ix[ok].numpy())
        return Recommendation(items, v[ok].tolist(), [self.titles_.get(i) for i in items], method=method)

    def _inverse_norms(self, vectors: torch.Tensor) -> torch.Tensor:
        key = (vectors.data_ptr(), vectors._version, vectors.shape)
        hit = self._cache.get("inv_norm")
        if hit is None or hit[0] != key:
            hit = (key, 1.0 / vectors.norm(dim=1).clamp_min(1e-12))
            self._cache["inv_norm"] = hit
        return hit[1]

    def _cooccurrence(self, idx: int) -> np.ndarray:
        """Per item, how many stored interactions share a user with ``idx`` (length ``n_items + 1``)."""
        assert self.histories_ is not None and self.items_ is not None
        h = self.histories_
        inv = self._cache.get("inverted")
        if inv is None:  # item -> users, built once
            order = np.argsort(h.items, kind="stable")
            owners = np.repeat(np.arange(h.n_users, dtype=np.int64), h.lengths())[order]
            offsets = np.zeros(len(self.items_) + 2, dtype=np.int64)
            np.cumsum(np.bincount(h.items, minlength=len(self.items_) + 1), out=offsets[1:])
            inv = self._cache["inverted"] = (offsets, owners)
        offsets, owners = inv
        users = np.unique(owners[offsets[idx]: offsets[idx + 1]])
        return np.bincount(h.take(users).items, minlength=len(self.items_) + 1)

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


def load(path: str | Path, device: str = "auto") -> Recommender | Explainer:
    """Load a saved model directory: a :class:`Recommender`, or an :class:`~attnrec.explainer.Explainer`
    when the checkpoint's ``config.json`` says ``"task": "explain"`` (PETER)."""
    cfg = Path(path) / "config.json"
    if cfg.is_file() and read_json(cfg).get("task") == "explain":
        from attnrec.explainer import Explainer  # PETER's stack is only imported when needed

        return Explainer.load(path, device)
    return Recommender.load(path, device)


__all__ = ["Recommender", "Recommendation", "load", "DataError"]
