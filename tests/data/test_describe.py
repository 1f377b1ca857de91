"""describe and format_description: what a log holds, by hand and without timestamps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnrec.data import describe, format_description, from_columns, load_dataset
from attnrec.data.schema import DataSource


def test_describe_by_hand() -> None:
    data = from_columns(
        ["a", "a", "a", "b", "b", "c"],
        ["x", "y", "x", "y", "z", "x"],
        [0, 86_400, 2 * 86_400, 0, 10, 5],
        ratings=[1, 2, 3, 4, 5, 5],
        events=["view", "buy", "view", "view", "view", "buy"],
        source=DataSource("tiny", "/tmp/tiny.csv", "csv", "ab" * 32),
        item_titles={"x": "X"},
    )
    d = describe(data)
    assert (d["users"], d["items"], d["interactions"]) == (3, 3, 6)
    assert d["density"] == pytest.approx(6 / 9)
    assert d["sequence_length"] == {"min": 1, "median": 2.0, "mean": 2.0, "p90": 2.8, "max": 3}
    assert d["users_below_3"] == 2
    assert d["repeat_share"] == pytest.approx(1 / 6)
    assert d["time"] == {"start": "1970-01-01 00:00:00", "end": "1970-01-03 00:00:00", "span_days": 2.0}
    assert d["ratings"] == {"min": 1.0, "max": 5.0, "mean": pytest.approx(20 / 6, abs=1e-4)}
    assert d["events"] == {"buy": 2, "view": 4}
    assert d["item_popularity"]["max"] == 3 and d["titles"] == 1
    assert d["source"]["sha256"] == "ab" * 32
    json.dumps(d)  # serialisable
    text = format_description(d)
    for needle in (
        "users          3",
        "interactions   6",
        "median 2",
        "p90 2.8",
        "2 days",
        "buy 2",
        "ab" * 32,
    ):
        assert needle in text


def test_describe_without_timestamps(tmp_path: Path) -> None:
    (tmp_path / "p.txt").write_text("1 10\n1 11\n")
    data = load_dataset(tmp_path / "p.txt")
    d = describe(data)
    assert d["time"] is None and d["ratings"] is None and d["events"] is None
    assert "no timestamps" in format_description(d)
