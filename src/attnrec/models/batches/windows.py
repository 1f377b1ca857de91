"""Training rows and batches the models share: shuffled batches, next-item positions, history windows.

Everything here is drawn from the epoch's seeded generator, so an epoch is a function of its seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models.objectives.negatives import draw_negatives


def positions(
    train: Sequences, n_prev: int, n_next: int = 1, min_prev: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every training position as ``(user, previous items, next items)``.

    Row ``r`` describes position ``p`` of a user's sequence: ``prev[r]`` holds the ``n_prev``
    items before ``p`` (oldest first, left-padded with 0), ``nxt[r]`` the ``n_next`` items from
    ``p`` on (right-padded with 0 past the end). Positions with fewer than ``min_prev`` earlier
    items are dropped. Returns ``users (N,)``, ``prev (N, n_prev)`` and ``nxt (N, n_next)``.
    """
    lengths = train.lengths()
    users = train.owners()  # (M,)
    starts = np.repeat(train.offsets[:-1], lengths)  # (M,) first index of the row's user
    ends = np.repeat(train.offsets[1:], lengths)  # (M,) one past the user's last index
    idx = np.arange(len(train.items), dtype=np.int64)  # (M,)
    keep = idx - starts >= min_prev
    users, starts, ends, idx = users[keep], starts[keep], ends[keep], idx[keep]
    last = max(len(train.items) - 1, 0)
    prev_idx = idx[:, None] + np.arange(-n_prev, 0)[None, :]  # (N, n_prev)
    prev = np.where(prev_idx >= starts[:, None], train.items[prev_idx.clip(0, last)], 0)
    next_idx = idx[:, None] + np.arange(n_next)[None, :]  # (N, n_next)
    nxt = np.where(next_idx < ends[:, None], train.items[next_idx.clip(0, last)], 0)
    return users, prev.astype(np.int64), nxt.astype(np.int64)


def batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A seeded shuffle of ``range(n)`` cut into batches of at most ``batch_size`` rows."""
    return np.array_split(rng.permutation(n), max(1, -(-n // batch_size)))


def last_items(histories: Sequences, n: int) -> torch.Tensor:
    """The ``n`` most recent items of each history, left-padded with 0: ``(B, n)`` int64."""
    return torch.from_numpy(histories.padded(n))


def prefix_windows(history: torch.Tensor, n: int) -> torch.Tensor:
    """``(R, T, n)``: for each position ``t`` of ``history`` ``(R, T)`` the ``n`` items before it
    (left-padded)."""
    padded = torch.nn.functional.pad(history, (n, 0))  # (R, n + T)
    return padded.unfold(1, n, 1)[:, : history.shape[1]]  # (R, T, n)


def inference_width(histories: Sequences, max_len: int) -> int:
    """The width a batch of ``histories`` is padded to for scoring: its longest history, at most ``max_len``.

    Not ``max_len``: the shifted-sequence models count positions from the window's end and mask
    padding keys, so the scores are the same and a batch of short histories costs less.
    """
    return int(min(max_len, max(1, histories.lengths().max(initial=0))))


def next_item_rows(train: Sequences) -> int:
    """Training rows of a next-item model: one window per user with at least two items."""
    return int((train.lengths() >= 2).sum())


def next_item_windows(train: Sequences, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The users ``(U,)`` with at least two items and their last ``max_len + 1`` items ``(U, max_len + 1)``,
    left-padded: inputs ``[:, :-1]``, next-item targets ``[:, 1:]``."""
    users = np.flatnonzero(train.lengths() >= 2)
    return users, train.padded(max_len + 1, users)


def shifted_pair(windows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``seq`` and next-item targets ``target`` ``(B, T)`` of left-padded windows ``(B, T + 1)``.

    A target is kept only where its input is a real item. The first item of a history shorter than
    the window follows padding: predicting it from nothing is no next-item case, and the papers'
    objective (SASRec's o_t is padding where the input s_t is) and the authors' code never train it.
    """
    seq = windows[:, :-1]  # (B, T)
    return torch.from_numpy(seq), torch.from_numpy(np.where(seq > 0, windows[:, 1:], 0))  # (B, T) each


def negative_batches(
    train: Sequences,
    users: np.ndarray,
    n_items: int,
    n_negatives: int,
    batch_size: int,
    rng: np.random.Generator,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One epoch over training rows whose users are ``users`` ``(N,)``: ``(rows (B,), negatives (B, K))``.

    Rows are shuffled; each gets ``n_negatives`` fresh items in ``1..n_items`` its user never
    interacted with in ``train`` (:func:`attnrec.models.objectives.negatives.draw_negatives`).
    """
    seen = train.user_item_keys()
    for idx in batches(len(users), batch_size, rng):
        yield idx, draw_negatives(users[idx], (len(idx), n_negatives), n_items, seen, rng)


def interaction_batches(
    train: Sequences, n_items: int, n_negatives: int, batch_size: int, rng: np.random.Generator
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every training interaction once per epoch, shuffled: ``(users (B,), items (B,), negatives (B, K))``,
    each with ``n_negatives`` fresh items its user never interacted with (:func:`negative_batches`)."""
    users = train.owners()  # (M,)
    for idx, neg in negative_batches(train, users, n_items, n_negatives, batch_size, rng):
        yield users[idx], train.items[idx], neg


def sliding_windows(
    lengths: np.ndarray, max_len: int, step: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows ``(row, begin, length)`` over sequences of ``lengths`` (rows with length 0 get none).

    A sequence of ``L <= max_len`` items is one window. A longer one gets the windows of the
    authors' code: begins ``L - max_len, L - max_len - step, ...`` while positive, then 0, so every
    item is in some window and the most recent window is always there. ``step == 0`` keeps only
    the most recent ``max_len`` items.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    excess = np.maximum(lengths - max_len, 0)  # (U,)
    n_win = np.where(lengths > 0, 1, 0)
    if step > 0:
        n_win = n_win + np.where(excess > 0, -(-excess // step), 0)
    rows = np.repeat(np.arange(len(lengths)), n_win)  # (R,)
    k = np.arange(len(rows)) - np.repeat(np.cumsum(n_win) - n_win, n_win)  # window number per row
    begin = np.maximum(excess[rows] - k * step, 0)
    return rows, begin, np.minimum(lengths[rows] - begin, max_len)


def sliding_window_matrix(
    train: Sequences, max_len: int, step: int, values: np.ndarray | None = None
) -> np.ndarray:
    """The :func:`sliding_windows` of ``train``'s sequences as a left-padded item matrix ``(R, max_len)``
    (or, with ``values``, of that array aligned with the items, e.g. a per-event column)."""
    rows, begin, length = sliding_windows(train.lengths(), max_len, step)
    start = train.offsets[rows] + begin  # (R,) absolute index of each window's first item
    col = np.arange(max_len)[None, :]  # (1, T)
    valid = col >= (max_len - length)[:, None]  # (R, T) left padding before each window's items
    src = (start + length - max_len)[:, None] + col  # (R, T) absolute index of each cell's item
    items = train.items if values is None else values
    out = np.zeros((len(rows), max_len), dtype=items.dtype)
    out[valid] = items[src[valid]]
    return out


def length_chunks(seq: torch.Tensor, n_chunks: int) -> list[tuple[torch.Tensor, int]]:
    """``(rows, width)`` chunks of a left-padded batch ``seq`` ``(B, T)``: with ``n_chunks = K > 1`` the rows,
    sorted by length, cut into K chunks, each trimmed to its longest row (the last columns hold every
    item)."""
    if n_chunks <= 1:
        return [(torch.arange(len(seq), device=seq.device), seq.shape[1])]
    n_real = (seq > 0).sum(1)  # (B,)
    parts = torch.tensor_split(torch.argsort(n_real), n_chunks)
    return [(rows, int(n_real[rows].max())) for rows in parts if len(rows)]


def encode_in_chunks(
    encode: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    batch: dict[str, torch.Tensor],
    sel: torch.Tensor,
    n_chunks: int,
) -> torch.Tensor:
    """States ``(N, D)`` at the positions ``sel`` ``(B, T)`` selects, in ``batch["seq"][sel]`` order, encoded
    chunk by chunk (:func:`length_chunks`): ``encode(part)`` gives the states ``(b, w, D)`` of ``part``, the
    chunk's rows of every ``(B, T)`` entry of ``batch`` (``seq`` and its per-event columns) trimmed to their
    last ``w`` columns.

    For a model whose positions count from the end and whose padding keys are masked, a trimmed chunk
    gives the padded batch's states, with far less work when most rows are much shorter than ``T``.
    """
    seq = batch["seq"]
    place = torch.zeros_like(seq)
    place[sel] = torch.arange(int(sel.sum()), device=seq.device)  # (B, T) rank of each selected position
    states, places = [], []
    for rows, w in length_chunks(seq, n_chunks):
        part = {k: v[rows, -w:] for k, v in batch.items() if v.shape == seq.shape}  # (b, w) each
        states.append(encode(part)[sel[rows, -w:]])  # (n, D)
        places.append(place[rows, -w:][sel[rows, -w:]])
    return torch.cat(states)[torch.argsort(torch.cat(places))]  # (N, D) back in seq[sel] order
