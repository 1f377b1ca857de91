"""Batch scoring: the top-k of every user of a log (or of a file of users) into one Parquet file.

:func:`score_to_parquet` reads the users in chunks (:mod:`attnrec.recommend.batch_input`), answers
each chunk with :meth:`Recommender.recommend_many` (the very code ``recommend`` and the HTTP service
use, so the answers are theirs), writes each chunk as a part and merges the parts at the end
(:mod:`attnrec.recommend.batch_parts`). Memory does not grow with the number of users: one chunk of
requests and answers is held at a time, the input streams, and the merge copies one part at a
time. A killed run resumes from its finished parts when re-run with the same arguments.

Output (``layout="wide"``, one row per input row, in input order):

* ``user`` (string; null for a row with only a history),
* ``items`` (list<string>): the top-k external item IDs, best first,
* ``scores`` (list<float32>): their scores,
* ``titles`` (list<string>, only when the model has item titles; null for an untitled item),
* ``fallback`` (string, null when personalised): why the answer is not personalised, e.g.
  ``unknown user 'x': most popular items``.

``layout="long"`` writes one row per recommended item instead: ``user``, ``rank`` (int32, from 1),
``item``, ``score`` (float32), ``title`` (with titles) and ``fallback``; a row with no answer (an
``include`` list the user has all seen) has no rows there.

The schema metadata key ``attnrec.batch`` holds the run as JSON (:func:`read_batch_metadata`): the
model (name, label, sha256 of its weights and data), the input (kind, name, sha256), ``k``, the
filters, the layout, the number of users and the creation time.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from typing import Any  # JSON values

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from attnrec import __version__
from attnrec.config import config_to_dict
from attnrec.data.schema import Interactions
from attnrec.recommend.batch_input import DatasetUsers, FileUsers, Request, UserSource
from attnrec.recommend.batch_parts import BatchError, Parts
from attnrec.recommend.recommender import Recommender
from attnrec.recommend.requests import check_k
from attnrec.recommend.topk import Recommendation

FORMAT_VERSION = 1
LAYOUTS = ("wide", "long")
METADATA_KEY = b"attnrec.batch"
DEFAULT_CHUNK_USERS = 4096


@dataclass(frozen=True)
class ChunkDone:
    """Progress of a run, reported after each chunk: ``users`` rows in it, ``users_done`` so far."""

    index: int
    users: int
    users_done: int
    fallbacks: int  # rows of the chunk answered without full personalisation (``fallback`` set)
    resumed: bool  # finished by an earlier, interrupted run: skipped


@dataclass(frozen=True)
class BatchResult:
    """What :func:`score_to_parquet` wrote."""

    path: Path
    users: int
    fallbacks: int  # users answered without full personalisation (``fallback`` set)
    chunks: int
    resumed_chunks: int
    seconds: float
    metadata: dict[str, Any]


def output_schema(layout: str, titles: bool) -> pa.Schema:
    """The columns of a batch output file (see the module doc)."""
    if layout == "wide":
        cols = [("user", pa.string()), ("items", pa.list_(pa.string())), ("scores", pa.list_(pa.float32()))]
        cols += [("titles", pa.list_(pa.string()))] if titles else []
    else:
        cols = [("user", pa.string()), ("rank", pa.int32()), ("item", pa.string()), ("score", pa.float32())]
        cols += [("title", pa.string())] if titles else []
    return pa.schema([*cols, ("fallback", pa.string())])


def answers_table(answers: Sequence[Recommendation], schema: pa.Schema, layout: str) -> pa.Table:
    """The rows of one chunk's answers under ``schema``."""
    lengths = np.fromiter((len(r.items) for r in answers), dtype=np.int64, count=len(answers))
    offsets = np.zeros(len(answers) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    items = pa.array([i for r in answers for i in r.items], pa.string())
    scores = pa.array(
        np.fromiter((s for r in answers for s in r.scores), dtype=np.float32, count=int(offsets[-1]))
    )
    titles = "titles" in schema.names or "title" in schema.names
    title_values = pa.array([t for r in answers for t in r.titles], pa.string()) if titles else None
    users = pa.array([r.user for r in answers], pa.string())
    fallback = pa.array([r.fallback for r in answers], pa.string())
    if layout == "wide":
        off = pa.array(offsets)
        cols = [users, pa.ListArray.from_arrays(off, items), pa.ListArray.from_arrays(off, scores)]
        cols += [pa.ListArray.from_arrays(off, title_values)] if title_values is not None else []
        return pa.Table.from_arrays([*cols, fallback], schema=schema)
    owner = pa.array(np.repeat(np.arange(len(answers)), lengths))
    rank = (np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths) + 1).astype(np.int32)
    cols = [users.take(owner), pa.array(rank), items, scores] + (
        [title_values] if title_values is not None else []
    )
    return pa.Table.from_arrays([*cols, fallback.take(owner)], schema=schema)


def model_fingerprint(rec: Recommender) -> str:
    """sha256 of what a batch answer depends on: the model's name, settings, weights, ID maps,
    stored histories, popularity and titles."""
    assert rec.items_ is not None and rec.users_ is not None and rec.histories_ is not None
    h = hashlib.sha256(
        json.dumps(
            {"model": rec.name, "config": config_to_dict(rec.config)}, sort_keys=True, default=str
        ).encode()
    )
    for name, t in sorted(rec.core.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    for ids in (rec.users_, rec.items_):
        h.update("\n".join(ids.to_list()).encode() + b"\0")
    for arr in (rec.histories_.offsets, rec.histories_.items, rec.popularity_):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    h.update(json.dumps(rec.titles_, sort_keys=True).encode())
    return h.hexdigest()


def unknown_filter_items(
    rec: Recommender, include: Sequence[object] | None, exclude: Sequence[object] | None
) -> list[str]:
    """The ``include``/``exclude`` items the model does not know (they filter nothing); raises
    :class:`BatchError` when ``include`` is given and none of its items is known (every answer would be
    empty)."""
    assert rec.items_ is not None
    unknown = [str(i) for i in [*(include or []), *(exclude or [])] if i not in rec.items_]
    if include is not None and all(i not in rec.items_ for i in include):
        raise BatchError(f"include: none of its {len(include)} item(s) is known to the model")
    return unknown


def _chunks(rows: Iterator[Request], size: int) -> Iterator[list[Request]]:
    while chunk := list(islice(rows, size)):
        yield chunk


def _source(source: UserSource | Interactions | str | Path) -> UserSource:
    if isinstance(source, Interactions):
        return DatasetUsers(source)
    if isinstance(source, (str, Path)):
        return FileUsers(source)
    return source


def _check_arguments(k: int, chunk_users: int, layout: str) -> None:
    check_k(k)
    if chunk_users < 1:
        raise ValueError(f"chunk_users must be at least 1, not {chunk_users}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")


def score_to_parquet(
    rec: Recommender,
    source: UserSource | Interactions | str | Path,
    out_path: str | Path,
    *,
    k: int = 100,
    chunk_users: int = DEFAULT_CHUNK_USERS,
    exclude_seen: bool = True,
    include: Sequence[object] | None = None,
    exclude: Sequence[object] | None = None,
    layout: str = "wide",
    resume: bool = True,
    progress: Callable[[ChunkDone], None] | None = None,
    model_label: str | None = None,
) -> BatchResult:
    """Write the top-``k`` of every user of ``source`` to the Parquet file ``out_path``.

    Parameters
    ----------
    rec : Recommender
        A fitted or loaded model.
    source : Interactions, path or UserSource
        An interaction log (every user, each scored from its history in the log, in user-index
        order), or a CSV/TSV/JSON-lines/Parquet file of ``user`` and/or ``history`` rows (see
        :mod:`attnrec.recommend.batch_input` for what is accepted), or any :class:`UserSource`.
    k, exclude_seen, include, exclude
        As in :meth:`Recommender.recommend`, for every user.
    chunk_users : int
        Users scored and written per part; bounds the memory of a run.
    layout : str
        ``"wide"`` (one row per user) or ``"long"`` (one row per recommended item).
    resume : bool
        Skip the chunks an interrupted run with the same arguments finished (kept in
        ``<out_path>.parts/``); ``False`` starts afresh. A run with other arguments, another model
        or other input data is refused (:class:`BatchError`).
    progress : callable, optional
        Called with a :class:`ChunkDone` after each chunk (resumed ones included).
    model_label : str, optional
        How the model is named in the output's metadata (e.g. its directory).
    """
    _check_arguments(k, chunk_users, layout)
    rec.capabilities  # noqa: B018 (raises RuntimeError for a model neither fitted nor loaded)
    unknown_filter_items(rec, include, exclude)
    src, out = _source(source), Path(out_path)
    if out.is_dir():
        raise BatchError(f"{out}: is a directory; give the output file's path")
    filters = {
        "exclude_seen": exclude_seen,
        "include": None if include is None else sorted(map(str, include)),
        "exclude": sorted(map(str, exclude or [])),
    }
    data = src.describe()
    # The run's identity: where the input lies (name, path) is not part of it, its content is.
    key = {
        "format_version": FORMAT_VERSION,
        "model": rec.name,
        "model_sha256": model_fingerprint(rec),
        "data": {n: v for n, v in data.items() if n not in ("name", "path")},
        "k": k,
        "chunk_users": chunk_users,
        "layout": layout,
    } | filters
    parts = Parts(out.with_name(out.name + ".parts"), key, resume)
    schema = output_schema(layout, titles=bool(rec.titles_))
    options = {
        "k": k,
        "exclude_seen": exclude_seen,
        "include": filters["include"],
        "exclude": filters["exclude"],
    }
    start, done, n_chunks, resumed_chunks = time.perf_counter(), 0, 0, 0
    for index, rows in enumerate(_chunks(src.rows(), chunk_users)):
        n_chunks, done = index + 1, done + len(rows)
        resumed = parts.is_finished(index, len(rows))
        resumed_chunks += resumed
        if not resumed:
            answers = rec.recommend_many([row | options for row in rows])
            parts.write(
                index,
                answers_table(answers, schema, layout),
                len(rows),
                sum(r.fallback is not None for r in answers),
            )
            del answers
        del rows
        if progress is not None:
            progress(ChunkDone(index, parts.finished[index][0], done, parts.finished[index][1], resumed))
    fallbacks = sum(parts.finished[i][1] for i in range(n_chunks))
    meta = (
        {
            "model": rec.name,
            "model_label": model_label,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "users": done,
            "fallbacks": fallbacks,
            "attnrec_version": __version__,
        }
        | key
        | {"data": data}
    )
    parts.merge(out, n_chunks, schema.with_metadata({METADATA_KEY: json.dumps(meta).encode()}))
    return BatchResult(out, done, fallbacks, n_chunks, resumed_chunks, time.perf_counter() - start, meta)


def read_batch_metadata(path: str | Path) -> dict[str, Any]:
    """The run recorded in a batch output file's schema metadata (see the module doc)."""
    raw = (pq.read_schema(path).metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise BatchError(f"{path}: not written by attnrec batch (no {METADATA_KEY.decode()} metadata)")
    return json.loads(raw)  # type: ignore[no-any-return]


__all__ = [
    "BatchError",
    "BatchResult",
    "ChunkDone",
    "LAYOUTS",
    "answers_table",
    "model_fingerprint",
    "output_schema",
    "read_batch_metadata",
    "score_to_parquet",
    "unknown_filter_items",
]
