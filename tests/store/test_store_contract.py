"""The history-store contract, run against both backends: SQLite (a file) and Redis (a private server).

Each test opens stores through ``make``: a new store object over the same data (the same file, the
same Redis namespace), so reopening shows what persisted.
"""

from __future__ import annotations

import copy
import math
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from attnrec.data.signals import Signal, register_signal, unregister_signal
from attnrec.store import Event, HistoryStore, RedisStore, SqliteStore

Make = Callable[..., HistoryStore]


@pytest.fixture(params=["sqlite", "redis"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    opened: list[HistoryStore] = []
    namespace = f"t{uuid.uuid4().hex[:12]}"

    def open_one(retention: int = 100) -> HistoryStore:
        if request.param == "sqlite":
            store: HistoryStore = SqliteStore(tmp_path / "events.db", retention=retention)
        else:
            store = RedisStore(request.getfixturevalue("redis_url"), retention=retention, namespace=namespace)
        opened.append(store)
        return store

    yield open_one
    for s in opened:
        s.close()


def test_a_store_implements_the_contract_and_is_shared_by_copies(make: Make) -> None:
    store = make()
    assert isinstance(store, HistoryStore)
    assert copy.deepcopy({"store": store})["store"] is store  # a copied recommender keeps its store


def test_recent_events_come_back_oldest_first_with_their_fields(make: Make) -> None:
    store = make()
    assert (
        store.append([Event("u1", "a", 100, "view"), Event("u1", "b", 200, "buy", 4.5), Event("u2", "c", 50)])
        == 3
    )
    got = store.recent(["u1", "u2", "nobody"], limit=10)
    assert got["u1"].items == ["a", "b"]
    assert got["u1"].timestamps.tolist() == [100, 200] and got["u1"].timestamps.dtype == np.int64
    assert got["u1"].events == ["view", "buy"]
    assert math.isnan(got["u1"].ratings[0]) and got["u1"].ratings[1] == 4.5
    assert got["u2"].items == ["c"] and got["u2"].events == [None]
    assert len(got["nobody"]) == 0 and not got["nobody"].forgotten


def test_events_are_ordered_by_time_then_arrival_whatever_order_they_arrive_in(make: Make) -> None:
    store = make()
    store.append([Event("u", "late", 300), Event("u", "first", 100)])
    store.append([Event("u", "tie-1", 200), Event("u", "tie-2", 200), Event("u", "early", 50)])
    assert store.recent(["u"], 10)["u"].items == ["early", "first", "tie-1", "tie-2", "late"]


def test_recent_returns_only_the_newest_limit_events(make: Make) -> None:
    store = make()
    store.append([Event("u", f"i{t}", t) for t in range(10)])
    assert store.recent(["u"], 3)["u"].items == ["i7", "i8", "i9"]
    assert store.recent(["u"], 0)["u"].items == []


def test_retention_keeps_the_newest_events_of_each_user(make: Make) -> None:
    store = make(retention=4)
    store.append([Event("u", f"i{t}", t) for t in range(6)] + [Event("v", "x", 1)])
    store.append([Event("u", "old", -5)])  # older than everything kept: dropped at once
    assert store.recent(["u"], 100)["u"].items == ["i2", "i3", "i4", "i5"]
    assert store.recent(["v"], 100)["v"].items == ["x"]
    assert store.count() == 5


def test_forget_deletes_a_users_events_and_remembers_it(make: Make) -> None:
    store = make()
    store.append([Event("u", "a", 1), Event("u", "b", 2), Event("w", "c", 3)])
    assert store.forget("u") == 2
    got = store.recent(["u", "w"], 10)
    assert len(got["u"]) == 0 and got["u"].forgotten
    assert got["w"].items == ["c"] and not got["w"].forgotten
    store.append([Event("u", "later", 9)])  # events after the request are kept again
    again = store.recent(["u"], 10)["u"]
    assert again.items == ["later"] and again.forgotten
    assert store.forgotten() == ["u"]
    assert set(store.export()["user"]) == {"u", "w"}


def test_export_has_every_event_with_nulls_where_a_field_is_absent(make: Make) -> None:
    store = make()
    store.append([Event("u2", "b", 5, "buy", 3.0), Event("u1", "a", 7), Event("u2", "a", 1)])
    frame = store.export()
    assert list(frame.columns) == ["user", "item", "timestamp", "event", "rating"]
    assert frame[["user", "item", "timestamp"]].values.tolist() == [
        ["u1", "a", 7],
        ["u2", "a", 1],
        ["u2", "b", 5],
    ]
    assert frame["event"].isna().tolist() == [True, True, False] and frame["event"].iloc[2] == "buy"
    assert frame["rating"].isna().tolist() == [True, True, False]
    assert make().export().empty is False


@pytest.fixture
def device_and_price() -> Iterator[None]:
    register_signal(Signal("device", "categorical"))
    register_signal(Signal("price", "numeric", minimum=0.0))
    yield
    unregister_signal("device")
    unregister_signal("price")


def test_declared_signal_values_are_stored_read_back_and_exported(make: Make, device_and_price: None) -> None:
    store = make()
    store.append(
        [
            Event("u1", "a", 1, "view", signals={"device": "phone", "price": 2}),
            Event("u1", "b", 2),  # none: stored as absent
            Event("u1", "c", 3, signals={"device": "tv"}),
            Event("u2", "d", 4),
        ]
    )
    got = make().recent(["u1", "u2"], limit=10)  # a store opened again
    assert got["u1"].signals == {"device": ["phone", None, "tv"], "price": [2.0, None, None]}
    assert got["u2"].signals == {}
    frame = store.export()
    assert list(frame.columns) == ["user", "item", "timestamp", "event", "rating", "device", "price"]
    assert frame["device"].tolist() == ["phone", None, "tv", None]
    assert frame["price"].dtype == np.float64 and frame["price"].isna().tolist() == [False, True, True, True]
    assert list(make().export(until=0).columns) == ["user", "item", "timestamp", "event", "rating"]


def test_a_retrain_exports_up_to_a_watermark_and_trims_only_those_events(make: Make) -> None:
    store = make()
    assert store.watermark() == 0
    store.append([Event("u1", "a", 10), Event("u2", "b", 20)])
    mark = store.watermark()
    store.append([Event("u1", "late", 5), Event("u3", "c", 30)])  # arrive while the retrain runs
    assert store.export(until=mark)[["user", "item"]].values.tolist() == [["u1", "a"], ["u2", "b"]]
    assert len(store.export()) == 4
    assert store.trim(mark) == 2
    assert store.export()[["user", "item"]].values.tolist() == [["u1", "late"], ["u3", "c"]]
    assert store.watermark() > mark  # numbers are never reused, even after the trim
    store.append([Event("u2", "d", 40)])
    assert store.watermark() == mark + 3 and make().watermark() == mark + 3


def test_marks_of_users_forgotten_before_a_retrain_are_cleared_after_it(make: Make) -> None:
    store = make()
    store.forget("old")
    store.forget("again")
    assert store.clear_forgotten(["old", "never"], before=int(time.time()) + 1) == 1
    assert store.forgotten() == ["again"]
    assert store.clear_forgotten(["again"], before=0) == 0  # forgotten after the retrain's snapshot: kept
    assert store.forgotten() == ["again"] and store.clear_forgotten([], before=0) == 0


def test_events_persist_when_the_store_is_opened_again(make: Make) -> None:
    first = make()
    first.append([Event("u", "a", 1, "view", 1.0)])
    first.forget("gone")
    first.close()
    second = make()
    got = second.recent(["u", "gone"], 5)
    assert got["u"].items == ["a"] and got["u"].events == ["view"] and got["u"].ratings.tolist() == [1.0]
    assert got["gone"].forgotten


def test_ids_are_text_and_users_do_not_see_each_others_events(make: Make) -> None:
    store = make()
    store.append([Event("a", "x", 1), Event("a:b", "y", 2), Event("é 日本", 'z,"[]\\', 3, "a b,c", 0.1)])
    got = store.recent(["a", "a:b", "é 日本"], 10)
    assert (got["a"].items, got["a:b"].items, got["é 日本"].items) == (["x"], ["y"], ['z,"[]\\'])
    assert got["é 日本"].events == ["a b,c"] and got["é 日本"].ratings.tolist() == [0.1]


def test_an_empty_append_and_an_empty_read_do_nothing(make: Make) -> None:
    store = make()
    assert store.append([]) == 0
    assert store.recent([], 10) == {}
    assert store.count() == 0 and store.export().empty
