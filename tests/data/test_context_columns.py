"""Per-event columns (timestamp, event code, rating) travel with the sequences through every operation
and split, aligned with the items; logs without them behave exactly as before (issue #19, data)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from shared_data import SHARED, needs

from attnrec.data import from_columns, leave_one_out, load_dataset, temporal_split
from attnrec.data.catalog import DATASETS
from attnrec.data.filters import min_count_filter, rebuild
from attnrec.data.schema import (
    COLUMN_DTYPES,
    DataError,
    Sequences,
    event_codes,
    event_names,
    event_vocabulary,
)

EVENTS = ["view", "cart", "buy"]


def _log():
    """Three users; user a's rows arrive out of time order. Timestamps encode (user, position)."""
    users, items, times, ratings, events = [], [], [], [], []
    for u, n in (("a", 6), ("b", 4), ("c", 2)):
        for k in reversed(range(n)):  # newest first in the file: the build must sort
            users.append(u)
            items.append(f"{u}{k}")
            times.append(1000.0 * (ord(u) - 96) + k + 0.75)  # fractional seconds are floored
            ratings.append(0.5 + k)
            events.append(EVENTS[k % 3])
    return from_columns(users, items, times, ratings, events)


def _pairs(seqs: Sequences) -> list[list[tuple[int, int, str, float]]]:
    """Each row as (item index, timestamp, event name, rating) tuples."""
    return [
        [
            (int(i), int(t), e, float(r))
            for i, t, e, r in zip(
                seqs[u],
                seqs.columns["timestamp"][seqs.offsets[u] : seqs.offsets[u + 1]],
                event_names(_log().events, seqs.columns["event"][seqs.offsets[u] : seqs.offsets[u + 1]]),
                seqs.columns["rating"][seqs.offsets[u] : seqs.offsets[u + 1]],
                strict=True,
            )
        ]
        for u in range(seqs.n_users)
    ]


def test_sequences_carry_the_logs_columns_in_their_dtypes() -> None:
    data = _log()
    seqs = data.sequences()
    assert set(seqs.columns) == {"timestamp", "event", "rating"}
    assert {k: v.dtype for k, v in seqs.columns.items()} == COLUMN_DTYPES
    a = data.users.get("a")
    assert a is not None
    ts = seqs.columns["timestamp"][seqs.offsets[a] : seqs.offsets[a + 1]]
    assert ts.tolist() == [1000, 1001, 1002, 1003, 1004, 1005]  # sorted by time, floored to seconds
    assert data.items.to_external(seqs[a]) == ["a0", "a1", "a2", "a3", "a4", "a5"]
    codes = seqs.columns["event"][seqs.offsets[a] : seqs.offsets[a + 1]]
    assert event_names(data.events, codes) == ["view", "cart", "buy", "view", "cart", "buy"]  # type: ignore[arg-type]
    assert seqs.columns["rating"][seqs.offsets[a] : seqs.offsets[a + 1]].tolist() == [
        0.5,
        1.5,
        2.5,
        3.5,
        4.5,
        5.5,
    ]
    assert data.sequences(columns=False).columns == {}


def test_event_vocabulary_is_sorted_names_with_codes_from_one() -> None:
    data = _log()
    assert data.events is not None and data.events.to_list() == ["buy", "cart", "view"]
    assert event_codes(data.events, ["buy", "view", "cart"]).tolist() == [1, 3, 2]
    assert event_names(data.events, [0, 1, 3]) == ["", "buy", "view"]
    assert event_vocabulary(np.array(["x", "a", "x"], dtype=object)).to_list() == ["a", "x"]
    with pytest.raises(
        DataError, match=r"event 'refund' is not in the event vocabulary \['buy', 'cart', 'view'\]"
    ):
        event_codes(data.events, ["buy", "refund"])


def test_take_truncate_select_and_padded_column_keep_columns_aligned() -> None:
    data = _log()
    seqs = data.sequences()
    full = _pairs(seqs)
    taken = seqs.take(np.array([2, 0]))
    assert _pairs(taken) == [full[2], full[0]]
    assert _pairs(seqs.truncate_end(2)) == [row[:-2] for row in full]
    keep = seqs.columns["rating"] > 2.0
    assert _pairs(seqs.select(keep)) == [[p for p in row if p[3] > 2.0] for row in full]
    flat = [p for row in full for p in row]  # spans index the flat arrays: rows of any slices, in order
    spans = seqs.spans(np.array([1, 0, 4]), np.array([3, 0, 6]))
    assert _pairs(spans) == [flat[1:3], [], flat[4:6]]
    for max_len in (3, 8):
        items = seqs.padded(max_len)
        stamps = seqs.padded_column("timestamp", max_len)
        ratings = seqs.padded_column("rating", max_len, rows=np.array([1, 0]))
        assert stamps.dtype == np.int64 and ratings.dtype == np.float32
        assert np.array_equal(stamps == 0, items == 0)  # same padding positions
        for r in range(seqs.n_users):
            lookup = {i: t for i, t, _, _ in full[r]}
            assert all(lookup[int(i)] == t for i, t in zip(items[r], stamps[r], strict=True) if i)
        assert np.array_equal(
            ratings[1][items[0] > 0], seqs.padded_column("rating", max_len)[0][items[0] > 0]
        )


def test_sequence_columns_are_checked() -> None:
    with pytest.raises(DataError, match="unknown sequence column 'price'; use timestamp, event, rating"):
        Sequences(np.array([0, 2]), np.array([1, 2]), 2, {"price": np.array([1.0, 2.0])})
    with pytest.raises(DataError, match=r"sequence column 'event' has shape \(1,\), expected \(2,\)"):
        Sequences(np.array([0, 2]), np.array([1, 2]), 2, {"event": np.array([1])})
    plain = Sequences(np.array([0, 2]), np.array([1, 2]), 2)
    with pytest.raises(DataError, match=r"no 'timestamp' column \(columns: none\)"):
        plain.padded_column("timestamp", 4)


def test_leave_one_out_carries_columns_and_the_targets_own() -> None:
    data = _log()
    split = leave_one_out(data)
    full = _pairs(data.sequences())
    assert _pairs(split.train) == [row[:-2] if len(row) >= 3 else row for row in full]
    assert _pairs(split.test.histories) == [full[u][:-1] for u in split.test.users]
    assert _pairs(split.valid.histories) == [full[u][:-2] for u in split.valid.users]
    test_ts = split.test.target_columns["timestamp"]
    assert test_ts.tolist() == [full[u][-1][1] for u in split.test.users]
    assert event_names(data.events, split.test.target_columns["event"]) == [
        full[u][-1][2] for u in split.test.users
    ]  # type: ignore[arg-type]
    assert split.valid.target_columns["rating"].tolist() == [full[u][-2][3] for u in split.valid.users]


def test_temporal_split_targets_keep_their_columns() -> None:
    data = _log()
    split = temporal_split(data, valid_fraction=0.25, test_fraction=0.25)
    seqs = data.sequences()
    for cases in (split.valid, split.test):
        for r, u in enumerate(cases.users):
            row = seqs.items[seqs.offsets[u] : seqs.offsets[u + 1]]
            pos = int(seqs.offsets[u] + np.flatnonzero(row == cases.targets[r])[0])
            assert cases.target_columns["timestamp"][r] == seqs.columns["timestamp"][pos]
            assert cases.target_columns["event"][r] == seqs.columns["event"][pos]
        assert set(cases.histories.columns) == {"timestamp", "event", "rating"}


def test_filters_keep_events_and_rebuild_their_vocabulary() -> None:
    data = _log()
    kept = rebuild(data, data.event != "buy")
    assert kept.events is not None and kept.events.to_list() == ["cart", "view"]
    assert set(event_names(kept.events, kept.sequences().columns["event"])) == {"cart", "view"}
    assert min_count_filter(data, 3, 0).events is not None


def test_table_event_and_rating_columns_arrive_as_sequence_columns(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("user,item,ts,kind,stars\nu,x,20,buy,4.5\nu,y,10,view,1\nv,x,5,view,2\n")
    data = load_dataset(p, columns={"timestamp": "ts", "event": "kind", "rating": "stars"})
    seqs = data.sequences()
    assert data.items.to_external(seqs[0]) == ["y", "x"]
    assert event_names(data.events, seqs.columns["event"][:2]) == ["view", "buy"]  # type: ignore[arg-type]
    assert seqs.columns["rating"][:2].tolist() == [1.0, 4.5] and seqs.columns["timestamp"][:2].tolist() == [
        10,
        20,
    ]


def test_a_log_without_context_has_no_columns(tmp_path: Path) -> None:
    p = tmp_path / "pairs.txt"
    p.write_text("1 10\n1 11\n1 12\n")
    data = load_dataset(p)
    split = leave_one_out(data)
    assert data.events is None and data.sequences().columns == {}
    assert split.train.columns == {} and split.test.target_columns == {}


# Digest of leave_one_out(ml-1m.txt) (train, valid and test users, offsets, items and targets, and the
# train matrix padded to 200) computed before per-event columns existed: committed results repeat.
ML1M_SPLIT_DIGEST = "4977b82144b10501e9f1fa0db91e34085ca3d66bed6ee6ec30f666ac552dc255"


@needs("ml-1m/ml-1m.txt.gz")
def test_ml1m_sequences_and_split_are_byte_identical_to_before() -> None:
    data = load_dataset(SHARED / "ml-1m" / "ml-1m.txt.gz")
    assert data.source.sha256 == DATASETS["ml-1m"].paper_sha256
    s = leave_one_out(data)
    h = hashlib.sha256()
    for part in (
        s.train.offsets,
        s.train.items,
        s.valid.users,
        s.valid.histories.offsets,
        s.valid.histories.items,
        s.valid.targets,
        s.test.users,
        s.test.histories.offsets,
        s.test.histories.items,
        s.test.targets,
    ):
        h.update(np.ascontiguousarray(part).tobytes())
        h.update(str(part.dtype).encode())
    h.update(s.train.padded(200).tobytes())
    assert h.hexdigest() == ML1M_SPLIT_DIGEST
    assert s.train.columns == {} and data.sequences().columns == {}
