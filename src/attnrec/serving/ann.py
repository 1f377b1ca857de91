"""Approximate top-K retrieval over a model's item vectors, for serving catalogs of millions of items.

Factorised models score ``query @ item_vectors.T (+ item_bias)``, so top-K is a maximum inner
product search (MIPS). :class:`Recommender.recommend_many` answers it exactly by scoring the whole
catalog in chunks; :class:`ApproximateRecommender` answers it from an inverted-file (IVF) index:
items are grouped by the nearest of ``nlist`` k-means centroids and a query scores only the items
of its ``nprobe`` best centroids. The index is faiss's ``IndexIVFFlat`` (inner product) when the
optional ``faiss-cpu`` package is installed (``pip install attnrec[ann]``), else :class:`IVFIndex`,
the same scheme in torch. An item bias ``b`` is folded in as one more dimension: items
``[e, b]``, queries ``[q, 1]``. Measure the loss against exact top-K with :func:`recall_at_k`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from attnrec.data.boundary import is_count
from attnrec.models.contracts import Factorised, ItemBiased
from attnrec.recommend import Recommendation, Recommender
from attnrec.serving.export import OnnxCore

KINDS = ("auto", "faiss", "torch")


class Index(Protocol):
    kind: str

    def search(self, queries: torch.Tensor, k: int, nprobe: int) -> tuple[torch.Tensor, torch.Tensor]: ...


def default_nlist(n: int) -> int:
    """About ``sqrt(n)`` lists (at least 1): lists of about ``sqrt(n)`` items."""
    return max(1, min(n, round(math.sqrt(n))))


def _count(name: str, value: object, low: int) -> None:
    if not is_count(value, low):
        raise ValueError(f"{name} must be a whole number >= {low}, not {value!r}")


@dataclass(frozen=True)
class IVFSettings:
    """How an IVF index is built, the same for both backends.

    ``nlist`` k-means cells (default about ``sqrt(N)``, at most ``N``), trained on a random sample
    of ``train_size`` vectors (default 64 a cell) drawn with ``seed``; ``iters`` Lloyd iterations
    (the torch index; faiss runs its own).
    """

    nlist: int | None = None
    train_size: int | None = None
    seed: int = 0
    iters: int = 10

    def __post_init__(self) -> None:
        for name in ("nlist", "train_size"):  # None: the default
            if getattr(self, name) is not None:
                _count(name, getattr(self, name), 1)
        _count("seed", self.seed, 0)
        _count("iters", self.iters, 1)

    def cells(self, n: int) -> int:
        """The number of cells for ``n`` vectors."""
        return min(n, self.nlist) if self.nlist else default_nlist(n)

    def sample_size(self, n: int, cells: int) -> int:
        """How many of ``n`` vectors the k-means of ``cells`` cells trains on."""
        return min(n, self.train_size or cells * 64)


class IVFIndex:
    """Inverted-file index for inner-product search, in torch (CPU or GPU).

    Like faiss's ``IndexIVFFlat`` with ``METRIC_INNER_PRODUCT``: k-means whose assignment step,
    the assignment of the items and the choice of cells to probe all use the inner product with
    the centroids; each probed cell's items are scored exactly.

    Parameters
    ----------
    vectors : Tensor (N, D)
        Item vectors; ``ids`` (N,) their item indices (default ``0..N-1``).
    settings : IVFSettings
        Cells, training sample, seed and k-means iterations.
    chunk : int
        Vectors assigned to cells at a time.
    """

    kind = "ivf-torch"

    def __init__(
        self,
        vectors: torch.Tensor,
        ids: torch.Tensor | None = None,
        settings: IVFSettings = IVFSettings(),
        chunk: int = 16384,
    ) -> None:
        x = vectors.detach().float().contiguous()
        n = x.shape[0]
        ids = torch.arange(n, device=x.device) if ids is None else ids.to(x.device)
        self.nlist = settings.cells(n)
        gen = torch.Generator(device="cpu").manual_seed(settings.seed)
        sample = x[torch.randperm(n, generator=gen)[: settings.sample_size(n, self.nlist)].to(x.device)]
        cent = sample[torch.randperm(len(sample), generator=gen)[: self.nlist].to(x.device)].clone()
        for _ in range(settings.iters):  # k-means on the sample; empty cells keep their centroid
            a = self._assign(sample, cent, chunk)
            sums = torch.zeros_like(cent).index_add_(0, a, sample)
            counts = torch.bincount(a, minlength=self.nlist).unsqueeze(1)
            cent = torch.where(counts > 0, sums / counts.clamp_min(1), cent)
        assign = self._assign(x, cent, chunk)
        order = torch.argsort(assign, stable=True)
        self.centroids = cent  # (L, D)
        self.vectors = x[order]  # (N, D), grouped by cell
        self.ids = ids[order]  # (N,)
        self.offsets = torch.zeros(self.nlist + 1, dtype=torch.long, device=x.device)
        self.offsets[1:] = torch.cumsum(torch.bincount(assign, minlength=self.nlist), 0)

    @staticmethod
    def _assign(x: torch.Tensor, cent: torch.Tensor, chunk: int) -> torch.Tensor:
        """The cell of each vector: the centroid of largest inner product (as faiss does for this metric)."""
        return torch.cat([(x[s : s + chunk] @ cent.T).argmax(1) for s in range(0, len(x), chunk)])

    def search(
        self, queries: torch.Tensor, k: int, nprobe: int = 16, chunk: int = 8
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` ``(scores, ids)`` ``(B, k)`` among the items of each query's ``nprobe`` best cells.

        Rows with fewer than ``k`` candidates end in ``-inf`` scores (id -1).
        """
        q = queries.detach().float().to(self.vectors.device)
        nprobe = min(nprobe, self.nlist)
        cells = torch.topk(q @ self.centroids.T, nprobe, dim=1).indices  # (B, P): by inner product
        sizes = self.offsets[1:] - self.offsets[:-1]
        out_s = torch.full((len(q), k), -torch.inf, device=q.device)
        out_i = torch.full((len(q), k), -1, dtype=torch.long, device=q.device)
        for s in range(0, len(q), chunk):
            c = cells[s : s + chunk]  # (b, P)
            lens = sizes[c].reshape(-1)  # candidates per (query, cell)
            total = sizes[c].sum(1)  # (b,)
            n = int(total.sum())
            if n == 0:
                continue
            starts = self.offsets[c].reshape(-1)
            seg = torch.cumsum(lens, 0) - lens  # where each (query, cell) block starts in the flat list
            pos = torch.repeat_interleave(starts - seg, lens) + torch.arange(n, device=q.device)  # (n,)
            row = torch.repeat_interleave(torch.arange(len(c), device=q.device), total)  # (n,)
            col = torch.arange(n, device=q.device) - torch.repeat_interleave(
                torch.cumsum(total, 0) - total, total
            )
            sc = (self.vectors[pos] * q[s + row]).sum(1)  # (n,)
            width = int(total.max())
            dense = torch.full((len(c), width), -torch.inf, device=q.device)
            dense[row, col] = sc
            where = torch.zeros((len(c), width), dtype=torch.long, device=q.device)
            where[row, col] = pos
            v, j = torch.topk(dense, min(k, width), dim=1)
            ids = self.ids[where.gather(1, j)]
            ids[~torch.isfinite(v)] = -1
            out_s[s : s + len(c), : v.shape[1]] = v
            out_i[s : s + len(c), : v.shape[1]] = ids
        return out_s, out_i


class FaissIndex:
    """faiss ``IndexIVFFlat`` with the inner-product metric (needs the ``faiss-cpu`` package)."""

    kind = "ivf-faiss"

    def __init__(
        self, vectors: torch.Tensor, ids: torch.Tensor | None = None, settings: IVFSettings = IVFSettings()
    ) -> None:
        import faiss

        x = np.ascontiguousarray(vectors.detach().float().cpu().numpy())
        n, d = x.shape
        self.nlist = settings.cells(n)
        quantizer = faiss.IndexFlatIP(d)
        index = faiss.IndexIVFFlat(quantizer, d, self.nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = settings.seed
        rng = np.random.default_rng(settings.seed)
        index.train(x[rng.permutation(n)[: settings.sample_size(n, self.nlist)]])
        index.add_with_ids(
            x, np.ascontiguousarray((np.arange(n) if ids is None else ids.cpu().numpy()).astype(np.int64))
        )
        self.index, self._quantizer = index, quantizer

    def search(self, queries: torch.Tensor, k: int, nprobe: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
        self.index.nprobe = min(nprobe, self.nlist)
        d, i = self.index.search(np.ascontiguousarray(queries.detach().float().cpu().numpy()), k)
        scores = torch.from_numpy(d)
        ids = torch.from_numpy(i)
        scores[ids < 0] = -torch.inf
        return scores, ids


def faiss_available() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def build_index(
    vectors: torch.Tensor,
    ids: torch.Tensor | None = None,
    kind: str = "auto",
    nlist: int | None = None,
    seed: int = 0,
    threads: int = 0,
) -> Index:
    """An IVF index of ``vectors``: ``kind`` is ``faiss``, ``torch`` or ``auto`` (faiss when installed);
    ``threads`` caps faiss's OpenMP threads (0: its default)."""
    if kind not in KINDS:
        raise ValueError(f"index kind must be {', '.join(KINDS)}, not {kind!r}")
    settings = IVFSettings(nlist, seed=seed)
    _count("threads", threads, 0)
    if kind == "faiss" or (kind == "auto" and faiss_available()):
        if threads:
            import faiss

            faiss.omp_set_num_threads(threads)
        return FaissIndex(vectors, ids, settings)
    return IVFIndex(vectors, ids, settings)


def recall_at_k(approx: Sequence[Sequence[object]], exact: Sequence[Sequence[object]]) -> float:
    """Mean over rows of ``|approx ∩ exact| / |exact|`` (rows with an empty exact answer are skipped)."""
    vals = [len(set(a) & set(e)) / len(e) for a, e in zip(approx, exact, strict=True) if len(e)]
    return float(np.mean(vals)) if vals else float("nan")


class ApproximateRecommender:
    """:meth:`Recommender.recommend_many` answered from an IVF index over the model's item vectors.

    Requests with an ``include`` list, and those that fall back to popularity, are answered exactly
    by the wrapped recommender; the others search ``nprobe`` cells for ``k`` plus the number of
    excluded items and drop the excluded ones. Answers carry ``method="model-ann"``.
    """

    def __init__(
        self,
        rec: Recommender,
        kind: str = "auto",
        nlist: int | None = None,
        nprobe: int = 16,
        seed: int = 0,
        threads: int = 0,
    ) -> None:
        rec._require_fitted()
        _count("nprobe", nprobe, 1)
        core = rec.core.torch_core if isinstance(rec.core, OnnxCore) else rec.core  # vectors stay in torch
        if not isinstance(core, Factorised):
            raise ValueError(
                f"{rec.name}: approximate retrieval needs a factorised model (query and item vectors)"
            )
        with torch.inference_mode():
            vectors = core.item_vectors().float()[1:]  # (I, D); row 0 is padding
            if isinstance(core, ItemBiased):
                vectors = torch.cat([vectors, core.item_bias().float()[1:, None]], 1)  # (I, D + 1)
        self.rec, self.nprobe, self.has_bias = rec, nprobe, isinstance(core, ItemBiased)
        self.index = build_index(vectors, torch.arange(1, len(vectors) + 1), kind, nlist, seed, threads)

    def recommend(
        self,
        user: object | None = None,
        history: list[object] | None = None,
        k: int = 10,
        exclude_seen: bool = True,
        include: list[object] | None = None,
        exclude: list[object] | None = None,
    ) -> Recommendation:
        return self.recommend_many(
            [
                {
                    "user": user,
                    "history": history,
                    "k": k,
                    "exclude_seen": exclude_seen,
                    "include": include,
                    "exclude": exclude,
                }
            ]
        )[0]

    def recommend_many(
        self, requests: Sequence[Mapping[str, Any]], nprobe: int | None = None
    ) -> list[Recommendation]:
        rec = self.rec
        assert rec.items_ is not None
        if nprobe is not None:
            _count("nprobe", nprobe, 1)
        prepared = rec._prepare_many(requests)
        approx = [i for i, p in enumerate(prepared) if len(p.hist) and p.allowed is None]
        out: list[Recommendation | None] = [None] * len(prepared)
        exact = [i for i in range(len(prepared)) if i not in set(approx)]
        if exact:
            for i, answer in zip(exact, rec.recommend_many([requests[i] for i in exact]), strict=True):
                out[i] = answer
        if approx:
            rows = [prepared[i] for i in approx]
            with torch.inference_mode():
                row_scores, ignored = rec._model_scores(rows)
                query = row_scores.query
                assert query is not None
                if self.has_bias:
                    query = torch.cat([query, torch.ones(len(query), 1, device=query.device)], 1)
                k_max = max(p.k for p in rows)
                extra = max(len(p.banned) for p in rows)
                scores, ids = self.index.search(
                    query, k_max + extra, self.nprobe if nprobe is None else nprobe
                )
            scores, ids = scores.cpu(), ids.cpu()
            for r, (i, p) in enumerate(zip(approx, rows, strict=True)):
                keep = torch.isfinite(scores[r]) & (ids[r] > 0)
                if len(p.banned):
                    keep &= ~torch.from_numpy(np.isin(ids[r].numpy(), p.banned))
                s, ix = scores[r][keep][: p.k], ids[r][keep][: p.k]
                items = rec.items_.to_external(ix.numpy())
                out[i] = Recommendation(
                    items,
                    s.tolist(),
                    [rec.titles_.get(t) for t in items],
                    p.user,
                    p.unknown,
                    p.fallback,
                    "model-ann",
                    ignored_inputs=ignored[r],
                )
        return [r for r in out if r is not None]
