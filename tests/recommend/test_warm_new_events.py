"""Fine-tuning a warm start on the new events only (fit(..., new_since=T)), for a fixed number of epochs
(split "none") or a validated one (split "leave-one-out": the new users' last events validate)."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
import torch

from attnrec import Recommender
from attnrec.config import ConfigError
from attnrec.data.schema import TIMESTAMP, DataError, Interactions, Sequences
from attnrec.data.split import DEFAULT_SPLIT, leave_last_new_out, leave_one_out
from attnrec.recommend import warm

TINY = {"hidden": 16, "n_layers": 1, "n_heads": 1, "max_len": 4}
FAST = {"max_epochs": 1, "batch_size": 8, "seed": 3}
T = 1_000  # the time the new events start at


def log_frame() -> pd.DataFrame:
    """Users ``a`` and ``b`` have events before and after ``T``, ``c`` only before, ``d`` is new after it;
    item ``fresh`` is new after ``T``."""
    rows = [("a", f"i{k}", 100 + 10 * k) for k in range(8)] + [("a", "i1", T), ("a", "fresh", T + 5)]
    rows += [("b", f"i{k}", 200 + k) for k in range(3)] + [("b", "i7", T + 1)]
    rows += [("c", f"i{k}", 300 + k) for k in range(6)]
    rows += [("d", "i2", T + 2), ("d", "fresh", T + 3)]
    return pd.DataFrame(rows, columns=["user", "item", "timestamp"])


@pytest.fixture(scope="module")
def old() -> Recommender:
    frame = log_frame()
    return Recommender("sasrec", TINY, FAST).fit(frame[frame["timestamp"] < T], "none", progress=False)


def sequences(times: list[list[int]]) -> Sequences:
    """One user per list, items numbered 1, 2, ... across all, with those timestamps."""
    lengths = [len(t) for t in times]
    offsets = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    items = np.arange(1, offsets[-1] + 1, dtype=np.int64)
    return Sequences(offsets, items, int(offsets[-1]), {TIMESTAMP: np.concatenate(times).astype(np.int64)})


def test_new_events_keep_the_context_before_them_and_empty_the_users_without_any() -> None:
    seqs = sequences([[1, 2, 3, 4, 10, 11], [1, 2], [5, 12]])
    trimmed = warm.new_events(seqs, since=10, context=2)
    assert [trimmed[u].tolist() for u in range(3)] == [[3, 4, 5, 6], [], [9, 10]]
    assert trimmed.n_users == 3  # every user keeps its row and index
    whole = warm.new_events(seqs, since=10, context=None)
    assert [whole[u].tolist() for u in range(3)] == [[1, 2, 3, 4, 5, 6], [], [9, 10]]


def test_targets_before_since_are_no_loss_terms(old: Recommender) -> None:
    frame = log_frame()
    data = warm.extend_log(Interactions.from_frame(frame), Recommender("sasrec").warm_source(old))
    seqs = warm.new_events(data.sequences(), T, context=4)
    core = Recommender("sasrec", TINY, FAST).fit(frame, "none", progress=False).core
    with warm.only_new_targets(core, T):
        batches = list(core.train_batches(seqs, 8, np.random.default_rng(0)))  # type: ignore[attr-defined]
    assert len(batches) == 1
    target = batches[0]["target"]  # (B, T): the next item at each position, 0 where no loss term
    n_new = int((frame["timestamp"] >= T).sum())
    # users a, b, d: every new event with an event before it is a target (d's first event has none)
    assert int((target > 0).sum()) == n_new - 1
    fresh = data.items.to_internal(["fresh"])[0]
    assert int((target == fresh).sum()) == 2  # a's and d's
    old_items = data.items.to_internal([f"i{k}" for k in range(3, 7)])  # a's events before T, in its context
    assert not torch.isin(target, torch.as_tensor(old_items)).any()
    assert core.builder.rule is None  # type: ignore[attr-defined]  # restored after the block


def test_a_fine_tune_trains_only_the_users_with_new_events(
    old: Recommender, monkeypatch: pytest.MonkeyPatch
) -> None:
    trained: list[Sequences] = []
    real = warm.new_events

    def recording(train: Sequences, since: int, context: int | None) -> Sequences:
        trained.append(real(train, since, context))
        return trained[-1]

    monkeypatch.setattr(warm, "new_events", recording)
    new = Recommender("sasrec", train=FAST).fit(
        log_frame(), "none", init_from=old, new_since=T, progress=False
    )
    assert new.users_ is not None and new.items_ is not None and old.items_ is not None
    users = new.users_.to_list()
    assert sorted(users[u] for u in np.flatnonzero(trained[0].lengths())) == ["a", "b", "d"]  # not c
    assert trained[0][users.index("a")].size == 4 + 2  # its 4-event context (max_len) and 2 new events
    assert new.items_.to_list()[: len(old.items_)] == old.items_.to_list()  # old indices kept
    assert new.items_.to_list()[len(old.items_) :] == ["fresh"]
    answer = new.recommend("d", k=3)  # the new user is served from their history
    assert len(answer.items) == 3 and answer.fallback is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"new_since": "yesterday"}, "new_since must be a time in Unix seconds, not str"),
        ({"new_since": float("nan")}, "new_since must be a finite time"),
        ({"new_since": True}, "new_since must be a time in Unix seconds, not bool"),
        ({"new_since": T + 10}, "no event at or after it"),
        ({"new_since": T, "split": "temporal"}, "use split 'none' or 'leave-one-out', not 'temporal'"),
        ({"new_since": T, "init_from": None}, "give init_from too"),
    ],
)
def test_bad_new_since_is_refused_in_one_line(
    old: Recommender, kwargs: dict[str, object], message: str
) -> None:
    call: dict[str, object] = {"split": "none", "init_from": old, "progress": False} | kwargs
    with pytest.raises(ConfigError, match=message) as err:
        Recommender("sasrec", TINY, FAST).fit(log_frame(), **call)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("model", ["bert4rec", "gsasrec", "esasrec", "hstu", "gru4rec"])
def test_every_next_item_model_fine_tunes_on_new_events(model: str) -> None:
    frame = log_frame()
    small = {"hidden": 16, "max_len": 4} | ({"n_layers": 1} if model != "gru4rec" else {})
    old = Recommender(model, small, FAST).fit(frame[frame["timestamp"] < T], "none", progress=False)
    new = Recommender(model, train=FAST).fit(frame, "none", init_from=old, new_since=T, progress=False)
    assert new.train_result_ is not None and new.train_result_.epochs == 1
    assert new.recommend("d", k=2).fallback is None


def test_a_model_without_next_item_targets_is_refused() -> None:
    frame = log_frame()
    old = Recommender("bprmf", {"dim": 8}, FAST).fit(frame[frame["timestamp"] < T], "none", progress=False)
    with pytest.raises(ConfigError, match="does not train on next-item targets"):
        Recommender("bprmf", train=FAST).fit(frame, "none", init_from=old, new_since=T, progress=False)


# -- a validated number of epochs -----------------------------------------------------------------
def named(data: Interactions, users: np.ndarray) -> list[str]:
    return data.users.to_external(list(users))


def test_validation_cases_are_only_the_new_users_last_events() -> None:
    data = Interactions.from_frame(log_frame())
    split = leave_last_new_out(data, T)
    assert split.name == DEFAULT_SPLIT and split.params == {"new_since": T}
    # a, b and d have events at or after T; c has none and is not validated
    assert sorted(named(data, split.valid.users)) == ["a", "b", "d"]
    targets = data.items.to_external(list(split.valid.targets))
    assert dict(zip(named(data, split.valid.users), targets, strict=True)) == {
        "a": "fresh",
        "b": "i7",
        "d": "fresh",
    }
    d = data.users.to_internal(["d"])[0]
    row = list(split.valid.users).index(d)
    assert data.items.to_external(list(split.valid.histories[row])) == ["i2"]  # all before it
    # the held-out events do not train; every other event does; nothing is tested
    assert len(split.train.items) == len(data) - 3
    assert "fresh" not in data.items.to_external(list(split.train.items))
    assert len(split.test) == 0


def test_a_log_whose_new_users_have_no_earlier_event_is_refused() -> None:
    frame = log_frame()
    only_d = frame[(frame["user"] != "d") | (frame["item"] == "fresh")]  # d's one event, nothing before it
    data = Interactions.from_frame(only_d[(only_d["timestamp"] < T) | (only_d["user"] == "d")])
    with pytest.raises(DataError, match="nothing to validate on") as err:
        leave_last_new_out(data, T)
    assert "\n" not in str(err.value)


def test_the_chosen_epoch_is_the_best_validated_and_its_weights_are_kept(old: Recommender) -> None:
    seen: list[float] = []

    class Record:
        def on_epoch(self, record: dict[str, object]) -> None:
            seen.append(float(record["valid"]["NDCG@10"]))  # type: ignore[index]

    train = FAST | {"max_epochs": 8, "patience": 3, "lr": 0.05}
    new = Recommender("sasrec", train=train)
    new.fit(log_frame(), "leave-one-out", init_from=old, new_since=T, progress=False, callbacks=[Record()])
    tr = new.train_result_
    assert tr is not None and tr.epochs == len(seen) >= 1
    assert tr.best_epoch == 1 + int(np.argmax(seen))  # the first best, as the loop keeps it
    assert tr.best_value == pytest.approx(max(seen))
    # the weights are the best epoch's: scoring the validation cases again gives its value
    data = warm.extend_log(Interactions.from_frame(log_frame()), new.warm_source(old))
    again = new.evaluate(leave_last_new_out(data, T).valid)
    assert again.metrics["NDCG@10"] == pytest.approx(max(seen))


def test_targets_before_since_still_give_no_loss(old: Recommender, monkeypatch: pytest.MonkeyPatch) -> None:
    trained: list[tuple[Sequences, list[np.ndarray]]] = []
    real = warm.only_new_targets

    def recording(core: object, since: int | None):  # type: ignore[no-untyped-def]
        assert since == T
        with real(core, since):  # type: ignore[arg-type]
            builder = core.train_batches  # type: ignore[attr-defined]

            def batches(seqs: Sequences, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
                out = list(builder(seqs, *args, **kwargs))
                trained.append((seqs, [b["target"].numpy() for b in out]))
                return iter(out)

            core.train_batches = batches  # type: ignore[attr-defined]
            try:
                yield
            finally:
                del core.train_batches  # type: ignore[attr-defined]

    monkeypatch.setattr(warm, "only_new_targets", contextmanager(recording))
    new = Recommender("sasrec", train=FAST).fit(
        log_frame(), "leave-one-out", init_from=old, new_since=T, progress=False
    )
    assert new.items_ is not None and trained
    targets = np.concatenate([t[t > 0] for t in trained[0][1]])
    # a's event i1 at T is the only trained new event with one before it (a's and b's last events are
    # held out; d's one trained event opens its history): a single loss term, none on the older events
    assert new.items_.to_external(list(targets)) == ["i1"]


def test_a_split_made_without_new_since_is_refused(old: Recommender) -> None:
    data = warm.extend_log(Interactions.from_frame(log_frame()), Recommender("sasrec").warm_source(old))
    with pytest.raises(ConfigError, match="validates users without new events") as err:
        Recommender("sasrec", train=FAST).fit(
            data, leave_one_out(data), init_from=old, new_since=T, progress=False
        )
    assert "\n" not in str(err.value)
