"""The top-k engine: row scores over the catalog, a chunked running top-k, and answers in external IDs.

Scores of a batch of rows are either factorised (``query @ item_vectors.T + bias``) or a full
matrix; :func:`topk_chunked` never materialises more than :data:`CHUNK_ELEMENTS` of them at once,
so a 1M-item catalog is ranked in bounded memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from attnrec.data.schema import IdMap
from attnrec.recommend.reasons import ItemExplanation
from attnrec.recommend.requests import Prepared

CHUNK_ELEMENTS = 1 << 22  # score-matrix elements computed at once by the chunked top-k (16 MiB float32)


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
    # aligned with items when explanations were asked for (None past the explained ones), else None
    explanations: list[ItemExplanation | None] | None = None
    # per-event request fields (timestamps, events, ratings, request_time) the model does not read
    ignored_inputs: list[str] = field(default_factory=list)


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


@dataclass
class RowScores:
    """Scores of a batch of rows over the catalog: ``query @ vectors.T (+ bias)`` or a ``full`` matrix."""

    query: torch.Tensor | None = None  # (B, D)
    vectors: torch.Tensor | None = None  # (I + 1, D)
    bias: torch.Tensor | None = None  # (I + 1,)
    full: torch.Tensor | None = None  # (B, I + 1)

    @property
    def device(self) -> torch.device:
        scores = self.full if self.full is not None else self.query
        assert scores is not None, "RowScores needs a query or a full matrix"
        return scores.device

    def chunk(self, lo: int, hi: int) -> torch.Tensor:
        """A fresh ``(B, hi - lo)`` tensor of the scores of columns ``lo..hi-1``."""
        if self.full is not None:
            return self.full[:, lo:hi].float().clone()
        assert self.query is not None and self.vectors is not None
        s = self.query @ self.vectors[lo:hi].T  # (B, hi - lo)
        return s if self.bias is None else s + self.bias[lo:hi]

    def at(self, row: int, cols: torch.Tensor) -> torch.Tensor:
        """Scores ``(C,)`` of row ``row`` at the columns ``cols`` ``(C,)``."""
        if self.full is not None:
            return self.full[row, cols].float()
        assert self.query is not None and self.vectors is not None
        s = self.vectors[cols] @ self.query[row]  # (C,)
        return s if self.bias is None else s + self.bias[cols]

    def rows(self, sel: torch.Tensor) -> RowScores:
        """The scores of the rows ``sel`` only."""
        return RowScores(
            None if self.query is None else self.query[sel],
            self.vectors,
            self.bias,
            None if self.full is None else self.full[sel],
        )


def answer(
    rows: list[Prepared], scores: RowScores, method: str, items: IdMap, titles: Mapping[str, str]
) -> list[Recommendation]:
    """The top-``k`` of each prepared request under ``scores`` (row ``i`` scores ``rows[i]``).

    Requests with an ``include`` list score just those candidates; the others share one chunked
    top-k over the whole catalog with their banned items removed.
    """
    n_cols = len(items) + 1
    device = scores.device
    answers: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(rows)
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
        sub = (
            scores if len(open_rows) == len(rows) else scores.rows(torch.as_tensor(open_rows, device=device))
        )
        lens = [len(rows[i].banned) for i in open_rows]
        b_rows = torch.as_tensor(np.repeat(np.arange(len(open_rows)), lens), dtype=torch.long, device=device)
        b_cols = torch.as_tensor(
            np.concatenate([rows[i].banned for i in open_rows]), dtype=torch.long, device=device
        )
        v, ix = topk_chunked(sub.chunk, len(open_rows), n_cols, k, b_rows, b_cols)
        for r, i in enumerate(open_rows):
            answers[i] = (v[r, : rows[i].k], ix[r, : rows[i].k])
    out = []
    for p, found in zip(rows, answers, strict=True):
        assert found is not None
        v, ix = found[0].cpu(), found[1].cpu()
        ok = torch.isfinite(v)
        v, ix = v[ok], ix[ok]
        ext = items.to_external(ix.numpy())
        out.append(
            Recommendation(
                ext, v.tolist(), [titles.get(i) for i in ext], p.user, p.unknown, p.fallback, method
            )
        )
    return out


__all__ = ["CHUNK_ELEMENTS", "Recommendation", "RowScores", "answer", "topk_chunked"]
