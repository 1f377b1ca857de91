"""The --data options of every data-reading command reach load_dataset: each by its own name, the format,
the column roles and the feature columns parsed."""

from __future__ import annotations

from typing import Any

import pytest

from attnrec.cli import _common
from attnrec.cli._common import DataOptions, load_data


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def fake_load_dataset(spec: str, **kwargs: Any) -> str:
        seen.append({"spec": spec, **kwargs})
        return "log"

    monkeypatch.setattr(_common, "load_dataset", fake_load_dataset)
    return seen


def test_every_option_reaches_load_dataset(calls: list[dict[str, Any]]) -> None:
    options = DataOptions(
        fmt="csv",
        min_rating=4.0,
        k_core=2,
        data_dir="cache",
        columns="user=uid,item=2",
        titles="movies.dat",
        item_features="items.csv",
        user_features="users.csv",
        feature_columns="id=movieId,item.genres=multi",
        missing_features="empty",
        time_format="dayfirst",
    )
    assert options.load("log.csv", spinner=False) == "log"
    assert calls == [
        {
            "spec": "log.csv",
            "format": "csv",
            "columns": {"user": "uid", "item": 2},
            "item_feature_columns": {"id": "movieId", "genres": "multi"},
            "user_feature_columns": {"id": "movieId"},
            "min_rating": 4.0,
            "k_core": 2,
            "data_dir": "cache",
            "titles": "movies.dat",
            "item_features": "items.csv",
            "user_features": "users.csv",
            "missing_features": "empty",
            "time_format": "dayfirst",
        }
    ]


def test_load_data_reads_with_the_defaults(calls: list[dict[str, Any]]) -> None:
    load_data("demo")
    assert calls[0]["format"] == "auto" and calls[0]["columns"] is None and calls[0]["k_core"] == 0
    assert calls[0]["missing_features"] == "error" and calls[0]["item_feature_columns"] is None
