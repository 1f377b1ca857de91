"""Streaming Parquet reader: the same log as read_table, built batch by batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnrec.data.readers.table import read_table
from attnrec.data.schema import DataError, Interactions
from attnrec.data.stream import IdEncoder, parquet_rows, read_parquet_stream


def _same(a: Interactions, b: Interactions) -> None:
    assert a.users.to_list() == b.users.to_list()
    assert a.items.to_list() == b.items.to_list()
    assert np.array_equal(a.user, b.user) and np.array_equal(a.item, b.item)
    assert a.user.dtype == b.user.dtype == np.int64 and a.item.dtype == np.int64
    for x, y in ((a.timestamp, b.timestamp), (a.rating, b.rating), (a.event, b.event)):
        assert (x is None and y is None) or np.array_equal(x, y)  # type: ignore[arg-type]
    assert a.source.sha256 == b.source.sha256 and a.source.format == "parquet"


def _log(n: int = 500, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "user_id": rng.integers(0, 40, n) * 7 + 1000,
            "item_id": rng.zipf(1.5, n) % 90,
            "rating": rng.integers(1, 6, n).astype(np.float64),
            "timestamp": rng.integers(0, 50, n),  # many ties: file order must break them
            "event": rng.choice(["view", "cart", "buy"], n),
        }
    )


@pytest.mark.parametrize("batch_rows", [7, 64, 10_000])
def test_integer_ids_match_read_table(tmp_path: Path, batch_rows: int) -> None:
    f = tmp_path / "log.parquet"
    _log().to_parquet(f, row_group_size=50)
    _same(read_parquet_stream(f, batch_rows=batch_rows), read_table(f))
    assert parquet_rows(f) == 500


def test_text_and_float_ids_datetimes_filters(tmp_path: Path) -> None:
    df = _log(800, 1)
    df["user_id"] = [f" u{u} " for u in df["user_id"]]  # padded text IDs are stripped
    df["item_id"] = df["item_id"].astype(np.float64)  # integral floats: "42", not "42.0"
    df["timestamp"] = pd.to_datetime(df["timestamp"], unit="D", utc=True)
    f = tmp_path / "log.parquet"
    df.to_parquet(f, row_group_size=100)
    _same(read_parquet_stream(f, batch_rows=33), read_table(f))
    for kw in ({"min_rating": 3.0}, {"k_core": 5}, {"min_rating": 2.0, "k_core": 4}):
        _same(read_parquet_stream(f, batch_rows=33, **kw), read_table(f, **kw))  # type: ignore[arg-type]
    swapped = {"user": "item_id", "item": 0}  # explicit mapping, by name and by position
    _same(read_parquet_stream(f, swapped, batch_rows=100), read_table(f, swapped))


def test_directory_of_files_reads_in_name_order(tmp_path: Path) -> None:
    df = _log(300, 2)
    d = tmp_path / "parts"
    d.mkdir()
    for i, part in enumerate(np.array_split(np.arange(300), 3)):
        df.iloc[part].to_parquet(d / f"part-{i}.parquet")
    one = tmp_path / "all.parquet"
    df.to_parquet(one)
    a, b = read_parquet_stream(d, batch_rows=40), read_parquet_stream(one)
    assert a.users.to_list() == b.users.to_list() and np.array_equal(a.item, b.item)
    assert a.source.sha256 != b.source.sha256


def test_errors_name_the_row(tmp_path: Path) -> None:
    f = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"user": ["a", "b", None, "d"], "item": ["x", "y", "z", "w"]}), f)
    with pytest.raises(DataError, match=r"row 3: missing user \(column 'user'\)"):
        read_parquet_stream(f, batch_rows=2)
    g = tmp_path / "blank.parquet"
    pq.write_table(pa.table({"user": ["a", "b", "c", "d"], "item": ["x", "y", " ", "w"]}), g)
    with pytest.raises(DataError, match="row 3: missing item"):
        read_parquet_stream(g, batch_rows=3)
    h = tmp_path / "cols.parquet"
    pq.write_table(pa.table({"who": ["a"], "what": ["x"]}), h)
    with pytest.raises(DataError, match="missing column for user"):
        read_parquet_stream(h)
    with pytest.raises(DataError, match="no rating column"):
        read_parquet_stream(f, min_rating=3)
    with pytest.raises(DataError, match="not found"):
        read_parquet_stream(tmp_path / "none.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match="cannot be read as Parquet"):
        read_parquet_stream(bad)


def test_id_encoder_keeps_first_appearance_order_across_batches() -> None:
    enc = IdEncoder()
    a = enc.encode(pa.array([30, 10, 30, 20]))
    b = enc.encode(pa.array([5, 20, 40, 10]))
    assert a.tolist() == [0, 1, 0, 2] and b.tolist() == [3, 2, 4, 1]
    assert enc.external().tolist() == ["30", "10", "20", "5", "40"]
    assert a.dtype == np.int32
    text = IdEncoder()
    assert text.encode(pa.array(["b", "a", "b"])).tolist() == [0, 1, 0]
    assert text.encode(pa.array(["c", "a"])).tolist() == [2, 1]
    with pytest.raises(DataError, match="mixes"):
        text.encode(pa.array([1, 2]))
