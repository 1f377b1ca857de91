"""Small synthetic interaction logs for tests and the processes tests start (importable by name)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from attnrec.data.build import from_columns
from attnrec.data.schema import DataSource, Interactions, Sequences
from attnrec.models.sasrec import SASRec, SASRecConfig


def ring_log(
    n_users: int = 150,
    n_items: int = 40,
    seed: int = 0,
    *,
    min_len: int = 6,
    follow: float = 0.85,
    source: DataSource | None = None,
    item_titles: dict[str, str] | None = None,
) -> Interactions:
    """Users walk a ring of items: item i is followed by i+1 with probability ``follow``."""
    rng = np.random.default_rng(seed)
    users, items = [], []
    for u in range(n_users):
        start, length = int(rng.integers(n_items)), int(rng.integers(min_len, 25))
        for t in range(length):
            step = t if rng.random() < follow else int(rng.integers(n_items))
            users.append(f"u{u}")
            items.append(f"i{(start + step) % n_items}")
    return from_columns(
        users, items, source=source or DataSource("ring", sha256="0" * 64), item_titles=item_titles
    )


def write_cycle_pairs(
    path: Path, n_users: int, n_items: int, min_len: int, max_len: int, *, named: bool = False, seed: int = 0
) -> Path:
    """A ``user item`` pair file of users walking a cycle of items (the next item is the current + 1);
    ``named``: IDs ``u1``, ``i1`` ... instead of bare numbers."""
    rng = np.random.default_rng(seed)
    u_, i_ = ("u", "i") if named else ("", "")
    lines = []
    for u in range(1, n_users + 1):
        start = int(rng.integers(1, n_items))
        length = int(rng.integers(min_len, max_len))
        lines += [f"{u_}{u} {i_}{(start + t) % n_items + 1}" for t in range(length)]
    path.write_text("\n".join(lines) + "\n")
    return path


def hourly_sequences(n_users: int, seed: int, length: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """``(items, timestamps)`` ``(n_users, length)`` whose next item depends on the hour of day only: an event
    at hour h is one of the 6 items (1..24) of group h // 6; gaps of 1..23 hours hide the next hour from the
    past."""
    rng = np.random.default_rng(seed)
    gaps = rng.integers(1, 24, (n_users, length)) * 3600 + rng.integers(0, 3600, (n_users, length))
    ts = 1_700_000_000 - 1_700_000_000 % 86400 + np.cumsum(gaps, axis=1)
    items = (ts // 3600 % 24) // 6 * 6 + rng.integers(1, 7, ts.shape)
    return items, ts


def hourly_shop_log(n_users: int = 40, length: int = 8) -> Interactions:
    """:func:`hourly_sequences` as a log of users ``u0..``, items ``i1..i24``, timestamps and events (every
    third event a ``buy``, the others ``view``)."""
    items, ts = hourly_sequences(n_users, seed=0, length=length)
    users = np.repeat([f"u{u}" for u in range(n_users)], length)
    events = np.where(np.arange(items.size) % 3 == 2, "buy", "view")
    return from_columns(
        users,
        [f"i{i}" for i in items.ravel()],
        timestamps=ts.ravel(),
        events=events,
        source=DataSource("hourly-shop"),
    )


HOURLY_VARIANTS: dict[str, dict[str, object]] = {
    "id-only": {},
    "time": {"time_features": "periodic", "request_time": True},
}
"""The two SASRec settings the hour-of-day tests compare: ID-only and periodic time with the request time."""


def train_hourly_sasrec(train: Sequences, settings: dict[str, object]) -> SASRec:
    """A small SASRec (CE) with ``settings`` trained 12 seeded epochs on an hour-of-day log; in eval mode."""
    torch.manual_seed(0)
    model = SASRec(SASRecConfig(hidden=16, n_layers=1, max_len=11, dropout=0.0, loss="ce", **settings), 1, 24)  # type: ignore[arg-type]
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for epoch in range(12):
        for batch in model.train_batches(train, 64, np.random.default_rng(epoch)):
            opt.zero_grad()
            model.loss(batch).backward()
            opt.step()
    return model.eval()


def device_frame(column: str = "device", n_users: int = 30, length: int = 8) -> pd.DataFrame:
    """A log with a per-event device column: users on a TV walk nine items forward a minute apart,
    users on a phone walk them backward (``user_id``, ``item_id``, ``timestamp``, ``column``)."""
    rows = [
        (
            f"u{u}",
            f"i{(u + (t if u % 2 else -t)) % 9}",
            1_700_000_000 + 60 * (length * u + t),
            "tv" if u % 2 else "phone",
        )
        for u in range(n_users)
        for t in range(length)
    ]
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp", column])


def daily_cycle_frame(n_users: int = 80, n_items: int = 30, days: int = 24, seed: int = 0) -> pd.DataFrame:
    """Users walking a cycle of items (the next item is the current + 1), one event a day at a random hour,
    each user starting on a random day of the first half (``user``, ``item``, ``timestamp``)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        first, start = int(rng.integers(0, days // 2)), int(rng.integers(0, n_items))
        for d in range(first, days):
            when = 1_700_006_400 + 86400 * d + int(rng.integers(0, 86400))
            rows.append((f"u{u}", f"i{(start + d - first) % n_items}", when))
    return pd.DataFrame(rows, columns=["user", "item", "timestamp"])
