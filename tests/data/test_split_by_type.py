"""leave_last_qualifying_out: the targets are the last qualifying events ("next buy"), inputs see every
event."""

from __future__ import annotations

import numpy as np
import pytest

from attnrec.data.build import from_columns
from attnrec.data.schema import DataError
from attnrec.data.split import leave_last_qualifying_out


def shop_log():  # type: ignore[no-untyped-def]
    rows = [  # user, item, time, event, rating
        ("a", "i1", 1, "view", 5),
        ("a", "i2", 2, "buy", 5),
        ("a", "i3", 3, "view", 5),
        ("a", "i4", 4, "buy", 1),
        ("a", "i5", 5, "buy", 4),
        ("a", "i6", 6, "view", 5),
        ("a", "i7", 7, "view", 5),
        ("b", "i1", 1, "buy", 5),
        ("b", "i2", 2, "buy", 5),  # no event before b's validation target
        ("c", "i3", 1, "view", 5),
        ("c", "i4", 2, "buy", 5),  # one buy only
    ]
    u, i, t, e, r = zip(*rows, strict=True)
    return from_columns(u, i, timestamps=t, ratings=r, events=e)


def test_targets_are_the_last_qualifying_events_and_inputs_see_every_event() -> None:
    data = shop_log()
    split = leave_last_qualifying_out(data, "buy", min_rating=3.0)
    assert split.name == "last-qualifying" and split.params == {"target_events": "buy", "min_rating": 3.0}
    assert split.describe() == "last-qualifying (target_events=buy, min_rating=3.0)"
    a = data.users.get("a")
    assert list(split.test.users) == [a]
    ext = data.items.to_external
    # a: last buy rated >= 3 is i5 (i4 is a low-rated buy); the one before is i2
    assert ext(split.test.targets) == ["i5"] and ext(split.valid.targets) == ["i2"]
    assert ext(split.test.histories[0]) == [
        "i1",
        "i2",
        "i3",
        "i4",
    ]  # every event before i5, views and low buys too
    assert ext(split.valid.histories[0]) == ["i1"]
    assert ext(split.train[a]) == [
        "i1"
    ]  # training: before the validation target; i6, i7 (after the test) nowhere
    buy = data.events.get("buy")
    assert (split.test.target_columns["event"] == buy).all() and (
        split.test.target_columns["rating"] >= 3
    ).all()
    # b (no event before its validation target) and c (one buy) train on everything
    assert ext(split.train[data.users.get("b")]) == ["i1", "i2"] and ext(
        split.train[data.users.get("c")]
    ) == ["i3", "i4"]
    # without a rating threshold a's last buy is i5 and the one before is the low-rated i4
    loose = leave_last_qualifying_out(data, "buy")
    assert ext(loose.valid.targets[loose.valid.users == a]) == ["i4"]


def test_unknown_event_type_is_a_clear_error() -> None:
    with pytest.raises(DataError, match="unknown event 'order'.*buy"):
        leave_last_qualifying_out(shop_log(), "order")
    with pytest.raises(DataError, match="no event column"):
        leave_last_qualifying_out(from_columns(["a"] * 3, ["x", "y", "z"]), "buy")
    assert np.isfinite(leave_last_qualifying_out(shop_log(), min_rating=3.0).test.targets).all()
