"""The JSON-lines readers read every declared signal (:mod:`attnrec.data.signals`) as the table readers do:
from the key the caller maps or one of the signal's aliases, through the same boundary, into the log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from attnrec.data import load_dataset
from attnrec.data.readers.jsonlines import read_amazon_json, read_json_lines, read_otto_jsonl
from attnrec.data.readers.table import read_table
from attnrec.data.schema import DataError, Interactions
from attnrec.data.signals import Signal, register_signal, unregister_signal

KEYS = {"user": "uid", "item": "iid", "timestamp": "ts"}
LOG = (
    '{"uid": "u1", "iid": "a", "ts": 30, "Device_Type": "tv"}\n'
    '{"uid": "u1", "iid": "b", "ts": 10, "Device_Type": "phone", "price": "2.5"}\n'
    '{"uid": "u2", "iid": "a", "ts": 20, "Device_Type": "phone"}\n'
)


@pytest.fixture(autouse=True)
def device() -> Iterator[None]:
    register_signal(Signal("device", "categorical", aliases=("device_type",)))
    yield
    unregister_signal("device")


def _devices(data: Interactions) -> dict[str, list[str]]:
    frame = data.to_frame()
    return {u: frame[frame["user"] == u]["device"].tolist() for u in frame["user"].unique()}


def test_a_categorical_signal_from_json_lines_reaches_the_log(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(LOG)
    data = read_json_lines(path, KEYS)
    assert list(data.signals) == ["device"]  # by its alias, case-insensitive; "price" is not declared
    assert _devices(data) == {"u1": ["phone", "tv"], "u2": ["phone"]}  # in each user's time order
    assert data.vocabularies["device"].to_list() == ["phone", "tv"]
    table = tmp_path / "log.csv"
    data.to_frame().rename(columns={"user": "uid", "item": "iid", "timestamp": "ts"}).to_csv(
        table, index=False
    )
    codes = read_table(table).sequences().column("device")
    assert (data.sequences().column("device") == codes).all()  # the same values as the table reader's


def test_a_mapped_key_and_a_numeric_signal(tmp_path: Path) -> None:
    register_signal(Signal("price", "numeric", minimum=0.0))
    try:
        path = tmp_path / "log.jsonl"
        path.write_text(
            '{"uid": "u1", "iid": "a", "ts": 30, "dev": "tv", "Price": 1}\n'
            '{"uid": "u1", "iid": "b", "ts": 10, "dev": "phone", "Price": "2.5"}\n'
        )
        data = read_json_lines(path, KEYS | {"device": "dev"})
        assert sorted(data.signals) == ["device", "price"]
        assert data.signals["price"].dtype == np.float64 and data.signals["price"].tolist() == [2.5, 1.0]
        path.write_text('{"uid": "u1", "iid": "a", "ts": 30, "dev": "tv", "Price": "cheap"}\n')
        with pytest.raises(DataError, match=r"log\.jsonl: line 1: price 'cheap' is not a number"):
            read_json_lines(path, KEYS | {"device": "dev"})
    finally:
        unregister_signal("price")


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ('{"uid": "u1", "iid": "b", "ts": 10}', r"log\.jsonl:2: missing 'Device_Type' \(device\)"),
        ('{"uid": "u1", "iid": "b", "ts": 10, "Device_Type": ""}', r"log\.jsonl:2: missing 'Device_Type'"),
        (
            '{"uid": "u1", "iid": "b", "ts": 10, "Device_Type": [1]}',
            r"log\.jsonl:2: device \[1\] is not a value",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_line(tmp_path: Path, second: str, message: str) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(LOG.splitlines()[0] + "\n" + second + "\n")
    with pytest.raises(DataError, match=message) as caught:
        read_json_lines(path, KEYS)
    assert "\n" not in str(caught.value)


def test_an_unknown_role_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(LOG)
    with pytest.raises(DataError, match="'colour' is neither user, item nor a declared signal"):
        read_json_lines(path, KEYS | {"colour": "c"})


def test_the_amazon_and_otto_readers_read_it_too(tmp_path: Path) -> None:
    amazon = tmp_path / "reviews.json"
    amazon.write_text(
        '{"reviewerID": "A1", "asin": "B1", "overall": 5.0, "unixReviewTime": 200, "device": "tv"}\n'
        "{'reviewerID': 'A1', 'asin': 'B2', 'overall': 2.0, 'unixReviewTime': 100, 'device': 'phone'}\n"
    )
    assert _devices(read_amazon_json(amazon)) == {"A1": ["phone", "tv"]}
    otto = tmp_path / "train.jsonl"
    otto.write_text(
        '{"session": 0, "events": [{"aid": 5, "ts": 1000, "type": "clicks", "device": "tv"}, '
        '{"aid": 6, "ts": 2000, "type": "carts", "device": "phone"}]}\n'
    )
    assert _devices(read_otto_jsonl(otto)) == {"0": ["tv", "phone"]}
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"session": 0, "events": [{"aid": 5, "ts": 1000, "type": "clicks"}]}\n')
    assert read_otto_jsonl(plain).signals == {}  # a file without the field: the log has no such column


def test_json_lines_of_any_layout_are_read_like_a_table(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(LOG.replace('"uid"', '"user_id"').replace('"iid"', '"item_id"').replace('"ts"', '"time"'))
    data = load_dataset(path)  # the keys found by the table readers' names, the signal by its alias
    assert data.source.format == "json-lines" and _devices(data) == {"u1": ["phone", "tv"], "u2": ["phone"]}
    assert data.timestamp is not None and data.timestamp.tolist() == [10.0, 30.0, 20.0]
    other = tmp_path / "other.jsonl"
    other.write_text(LOG.replace('"uid"', '"who"').replace('"iid"', '"what"'))  # names no reader guesses
    with pytest.raises(DataError, match=r"unknown JSON layout .*other names: format json-lines with columns"):
        load_dataset(other)
    mapped = load_dataset(
        other, format="json-lines", columns={"user": "who", "item": "what", "timestamp": "ts"}
    )
    assert _devices(mapped) == _devices(data)
    with pytest.raises(
        DataError, match=r"missing column 'whom' \(mapped as user\); available columns: 'who'"
    ):
        load_dataset(other, format="json-lines", columns={"user": "whom", "item": "what"})
