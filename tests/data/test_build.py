"""from_columns (ordering, filtering, ID maps) and the Sequences / IdMap containers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from attnrec.data import DataSource, IdMap, Sequences, from_columns
from attnrec.data.schema import DataError


def _seqs(data) -> list[list[str]]:  # type: ignore[no-untyped-def]
    s = data.sequences()
    return [data.items.to_external(s[u]) for u in range(s.n_users)]


def test_chronological_with_stable_ties() -> None:
    users = ["a", "b", "a", "a", "b", "a"]
    items = ["x1", "y1", "x2", "x3", "y2", "x4"]
    times = [5, 1, 3, 3, 0, 3]  # a: x2, x3, x4 tie at t=3 and keep file order
    data = from_columns(users, items, times)
    assert data.users.to_list() == ["a", "b"]  # first appearance order
    assert _seqs(data) == [["x2", "x3", "x4", "x1"], ["y2", "y1"]]
    assert data.timestamp is not None and list(data.timestamp) == [3, 3, 3, 5, 0, 1]


def test_without_timestamps_file_order_is_chronology() -> None:
    data = from_columns(["u2", "u1", "u2", "u1"], ["c", "a", "d", "b"])
    assert _seqs(data) == [["c", "d"], ["a", "b"]]
    assert data.timestamp is None


def test_ids_are_strings_and_items_start_at_one() -> None:
    data = from_columns([42, "42", 7], [1, "1", 2])
    assert data.n_users == 2 and data.n_items == 2
    assert data.users.get("42") == 0 and data.users.get(42) == 0
    assert data.items.get("1") == 1 and data.items.get(2) == 2
    assert data.item.min() == 1  # 0 is padding
    pop = data.item_popularity()
    assert list(pop) == [0, 2, 1]


def test_min_rating() -> None:
    data = from_columns(["a", "a", "b", "b"], ["x", "y", "x", "z"], ratings=[5, 2, 4, 3.5], min_rating=4)
    assert _seqs(data) == [["x"], ["x"]]
    assert data.rating is not None and list(data.rating) == [5, 4]
    with pytest.raises(DataError, match="no rating column"):
        from_columns(["a"], ["x"], min_rating=3)
    with pytest.raises(DataError, match="no interactions"):
        from_columns(["a"], ["x"], ratings=[1], min_rating=3)


def test_k_core_is_iterative() -> None:
    # Users u1..u3 each rate i1, i2; u4 rates i1 and i3 (i3 has one rating). 2-core drops i3,
    # then u4 has one interaction left and is dropped, then i1 has 3 >= 2 and stays.
    users = ["u1", "u1", "u2", "u2", "u3", "u3", "u4", "u4"]
    items = ["i1", "i2", "i1", "i2", "i1", "i2", "i1", "i3"]
    data = from_columns(users, items, k_core=2)
    assert data.users.to_list() == ["u1", "u2", "u3"]
    assert data.items.to_list() == ["i1", "i2"]
    assert len(data) == 6
    # A 3-core of the same log removes i3, then u4; every remaining user has only 2 items.
    with pytest.raises(DataError, match="3-core"):
        from_columns(users, items, k_core=3)


def test_bad_columns() -> None:
    with pytest.raises(DataError, match="different lengths"):
        from_columns(["a", "b"], ["x"])
    with pytest.raises(DataError, match="empty"):
        from_columns([], [], source=DataSource("empty", "/tmp/empty.csv"))


def test_source_is_kept() -> None:
    src = DataSource("n", "/p", "pairs", "abc")
    assert from_columns(["a"], ["x"], source=src).source == src


# ---------------------------------------------------------------------------------------------
# IdMap
# ---------------------------------------------------------------------------------------------


def test_idmap_round_trip() -> None:
    m = IdMap.from_values(["b", "a", "b", 3, "c"], offset=1)
    assert m.to_list() == ["b", "a", "3", "c"]
    idx = m.to_internal(["c", 3, "b"])
    assert list(idx) == [4, 3, 1]
    assert m.to_external(idx) == ["c", "3", "b"]
    assert m.to_external(m.to_internal(m.to_list())) == m.to_list()
    assert "3" in m and 3 in m and "zz" not in m
    assert m.get("zz") is None and len(m) == 4


def test_idmap_unknown_and_duplicates() -> None:
    m = IdMap(np.array(["x", "y"], dtype=object), 0)
    with pytest.raises(DataError, match="unknown IDs: \\['q'\\]"):
        m.to_internal(["x", "q"])
    known, unknown = m.split_known(["y", "q", "x", "r"])
    assert list(known) == [1, 0] and unknown == ["q", "r"]
    with pytest.raises(DataError, match="not unique"):
        IdMap(np.array(["x", "x"], dtype=object))


# ---------------------------------------------------------------------------------------------
# Sequences
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def seqs() -> Sequences:
    return Sequences.from_lists([[1, 2, 3], [], [4], [5, 6, 7, 8, 9]], n_items=9)


def test_sequences_basics(seqs: Sequences) -> None:
    assert seqs.n_users == 4
    assert list(seqs.lengths()) == [3, 0, 1, 5]
    assert list(seqs[3]) == [5, 6, 7, 8, 9] and len(seqs[1]) == 0


def test_padded_left_pads_and_keeps_the_last_items(seqs: Sequences) -> None:
    m = seqs.padded(3)
    assert m.tolist() == [[1, 2, 3], [0, 0, 0], [0, 0, 4], [7, 8, 9]]
    assert seqs.padded(2, rows=np.array([3, 0])).tolist() == [[8, 9], [2, 3]]
    assert seqs.padded(0).shape == (4, 0)
    assert seqs.padded(4, rows=np.array([], dtype=np.int64)).shape == (0, 4)


def test_take_and_truncate_end(seqs: Sequences) -> None:
    t = seqs.take(np.array([3, 1, 0, 3]))
    assert [list(t[i]) for i in range(4)] == [[5, 6, 7, 8, 9], [], [1, 2, 3], [5, 6, 7, 8, 9]]
    assert t.n_items == 9
    cut = seqs.truncate_end(2)
    assert [list(cut[i]) for i in range(4)] == [[1], [], [], [5, 6, 7]]
    assert [list(x) for x in (seqs.truncate_end(0)[u] for u in range(4))] == [
        [1, 2, 3],
        [],
        [4],
        [5, 6, 7, 8, 9],
    ]


def test_user_item_keys(seqs: Sequences) -> None:
    keys = seqs.user_item_keys()
    assert list(keys) == sorted(keys)
    assert 0 * 10 + 2 in keys and 3 * 10 + 9 in keys and 1 * 10 + 4 not in keys


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min_rating": float("nan")}, "min_rating must be a number, not float nan"),
        ({"min_rating": "4"}, "min_rating must be a number, not str '4'"),
        ({"min_rating": True}, "min_rating must be a number, not bool True"),
        ({"k_core": -3}, "k_core must be a whole number at least 0, not int -3"),
        ({"k_core": 2.5}, "k_core must be a whole number at least 0, not float 2.5"),
        ({"k_core": "5"}, "k_core must be a whole number at least 0, not str '5'"),
    ],
)
def test_filters_of_the_wrong_kind_are_refused(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    """``min_rating=nan`` filtered out every event ("no interactions"), ``min_rating="4"`` and
    ``k_core="5"`` were tracebacks, and ``k_core=-3`` or ``2.5`` were taken without a word."""
    from attnrec.data import load_dataset
    from attnrec.data.stream import read_parquet_stream

    log = tmp_path / "log.csv"
    log.write_text("user,item,rating\n1,10,5\n1,11,4\n2,10,3\n")
    with pytest.raises(DataError, match=message):
        load_dataset(log, **options)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=message):
        from_columns([1, 1], [10, 11], ratings=[5.0, 4.0], **options)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=message):
        read_parquet_stream(tmp_path / "nowhere", **options)  # type: ignore[arg-type]
    assert len(load_dataset(log, min_rating=np.float32(4), k_core=np.int64(0))) == 2
