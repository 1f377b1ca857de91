"""Scores of prepared recommendation requests with non-empty histories (what ``recommend_many`` ranks).

Rows are encoded in groups of similar length (powers of two, up to the model's ``max_len``), so that a
short ad-hoc history batched with long stored ones is not padded to their length, and of the same
per-event fields (the columns and the request time they carry), so that every row of a batch has what
the batch holds. Which of the fields a row sent the model's batch does not read is reported back
(the model ignores them: an ID-only model reads no time, no event type and no rating).
"""

from __future__ import annotations

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.recommend.event_requests import ignored_inputs
from attnrec.recommend.model_core import CoreView
from attnrec.recommend.requests import Prepared
from attnrec.recommend.topk import RowScores


def _groups(rows: list[Prepared], lengths: np.ndarray, max_len: int | None) -> list[np.ndarray]:
    """Row indices by (length bucket, column names, has a request time), in a fixed (sorted) order."""
    bucket = np.ceil(np.log2(np.minimum(lengths, max_len or lengths.max()))).astype(np.int64)
    groups: dict[tuple[int, tuple[str, ...], bool], list[int]] = {}
    for i, (b, p) in enumerate(
        zip(bucket, rows, strict=True)
    ):  # one pass: batch scoring sends thousands of rows
        groups.setdefault((int(b), tuple(sorted(p.columns)), p.request_time is not None), []).append(i)
    return [np.array(groups[key], dtype=np.int64) for key in sorted(groups)]


def _sequences(rows: list[Prepared], g: np.ndarray, n_items: int) -> Sequences:
    """The histories of rows ``g`` with their per-event columns (every row of a group has the same ones)."""
    lengths = np.array([len(rows[i].hist) for i in g], dtype=np.int64)
    offsets = np.zeros(len(g) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    columns = {name: np.concatenate([rows[i].columns[name] for i in g]) for name in rows[g[0]].columns}
    return Sequences(offsets, np.concatenate([rows[i].hist for i in g]), n_items, columns)


def model_scores(
    view: CoreView, rows: list[Prepared], n_items: int, max_len: int | None, device: torch.device
) -> tuple[RowScores, list[list[str]]]:
    """Scores of ``rows`` (factorised: query and item vectors, when the model allows) and, per row, the
    per-event request fields its model batch did not read. Call under ``torch.inference_mode()``."""
    users = np.array([p.uid for p in rows], dtype=np.int64)
    lengths = np.array([len(p.hist) for p in rows], dtype=np.int64)
    groups = _groups(rows, lengths, max_len)
    ignored: list[list[str]] = [[] for _ in rows]
    parts = []
    for g in groups:
        when = None if rows[g[0]].request_time is None else np.array([rows[i].request_time for i in g])
        inputs = view.core.score_inputs(users[g], _sequences(rows, g, n_items), when)
        batch = {k: v.to(device) for k, v in inputs.items()}
        for i in g:
            ignored[i] = ignored_inputs(rows[i].sent, set(batch))
        parts.append(
            view.factorised.query_vectors(batch).float()
            if view.factorised is not None
            else view.core.score(batch)
        )  # (len(g), D) or (len(g), I + 1)
    out = parts[0]
    if len(groups) > 1:
        out = torch.empty(len(rows), parts[0].shape[1], dtype=parts[0].dtype, device=parts[0].device)
        for g, part in zip(groups, parts, strict=True):
            out[torch.as_tensor(g, device=part.device)] = part
    if view.factorised is None:
        return RowScores(full=out), ignored
    bias = view.item_bias.item_bias().float() if view.item_bias is not None else None
    return RowScores(query=out, vectors=view.factorised.item_vectors().float(), bias=bias), ignored


__all__ = ["model_scores"]
