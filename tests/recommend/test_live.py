"""Live histories: a recommender with a store answers every user from its training history plus the
events stored since, in recommend, recommend_many, batch scoring and explanations; ``user`` + ``history``
appends; unknown items are skipped, unknown event types lose only their type, forgotten users lose their
training history; reads are bounded.

SASRec reads no user embedding, so a known user's live answer must equal the answer for the ad-hoc
history "training history + new events": the tests compare with exactly that.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from attnrec.data.schema import COLUMN_DTYPES, EVENT, RATING, TIMESTAMP, DataSource, IdMap, Interactions
from attnrec.recommend import Recommender
from attnrec.recommend.batch_scoring import score_to_parquet
from attnrec.recommend.explain_rec import explain_recommendation
from attnrec.recommend.live import merge, stored_part
from attnrec.store import Event, Recent, SqliteStore
from synthetic_logs import hourly_shop_log, ring_log

TRAIN = {"max_epochs": 1, "batch_size": 64, "seed": 0, "threads": 1}


@pytest.fixture(scope="module")
def log() -> Interactions:
    return ring_log(150, 40, 0, source=DataSource("ring", sha256="0" * 64))


@pytest.fixture(scope="module")
def sas(log: Interactions) -> Recommender:
    return Recommender("sasrec", {"hidden": 16, "n_layers": 1, "max_len": 20}, TRAIN).fit(log, progress=False)


@pytest.fixture
def store(tmp_path: Path, sas: Recommender) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "events.db")
    sas.use_store(s)
    yield s
    sas.use_store(None)
    s.close()


def trained(rec: Recommender, user: str) -> list[str]:
    assert rec.users_ is not None and rec.items_ is not None and rec.histories_ is not None
    return rec.items_.to_external(rec.histories_[rec.users_.get(user)])


def unseen(rec: Recommender, user: str, n: int) -> list[str]:
    """``n`` items ``user`` has not seen in training, in catalog order."""
    assert rec.items_ is not None
    seen = set(trained(rec, user))
    return [i for i in rec.items_.to_list() if i not in seen][:n]


def test_new_events_change_the_next_answer_and_are_excluded(sas: Recommender, store: SqliteStore) -> None:
    before = sas.recommend(user="u3", k=10)
    new = [i for i in before.items[:3]]  # the user just saw the top three
    store.append([Event("u3", item, 2_000_000_000 + t) for t, item in enumerate(new)])
    after = sas.recommend(user="u3", k=10)
    assert not set(new) & set(after.items)  # just-seen items are excluded
    want = Recommender.recommend(sas, history=trained(sas, "u3") + new, k=10)
    assert after.items == want.items
    np.testing.assert_allclose(after.scores, want.scores, rtol=1e-5, atol=1e-6)
    sas.use_store(None)  # the same model without its store: the answer as trained
    assert sas.recommend(user="u3", k=10).items == before.items


def test_a_history_sent_with_a_user_is_appended_not_replacing(sas: Recommender) -> None:
    sent = unseen(sas, "u5", 2)
    got = sas.recommend(user="u5", history=sent, k=8)
    want = sas.recommend(history=trained(sas, "u5") + sent, k=8)
    assert got.items == want.items and got.fallback is None
    assert not (set(trained(sas, "u5")) | set(sent)) & set(got.items)  # both are "seen"
    alone = sas.recommend(user="u5", history=sent, k=8, stored_history=False)
    assert alone.items == sas.recommend(history=sent, k=8).items  # the old meaning, asked for by name


def test_stored_events_and_a_sent_history_are_all_appended(sas: Recommender, store: SqliteStore) -> None:
    stored, sent = unseen(sas, "u7", 4)[:2], unseen(sas, "u7", 4)[2:]
    store.append([Event("u7", i, 2_000_000_000) for i in stored])
    got = sas.recommend(user="u7", history=sent, k=6)
    assert got.items == sas.recommend(history=trained(sas, "u7") + stored + sent, k=6).items


def test_unknown_items_are_kept_but_not_scored(sas: Recommender, store: SqliteStore) -> None:
    known = unseen(sas, "u8", 1)
    store.append([Event("u8", "brand-new-item", 1), Event("u8", known[0], 2)])
    row = sas.live_histories(["u8"])["u8"]
    assert row.stored == 1 and sas.items_ is not None
    assert sas.items_.to_external(row.items) == trained(sas, "u8") + known
    assert "brand-new-item" in set(store.export()["item"])  # kept for the next retrain


def test_an_unknown_user_is_scored_from_its_stored_events(sas: Recommender, store: SqliteStore) -> None:
    assert sas.recommend(user="newcomer", k=5).fallback == "unknown user 'newcomer': most popular items"
    store.append([Event("newcomer", "i3", 1), Event("newcomer", "i4", 2)])
    got = sas.recommend(user="newcomer", k=5)
    assert got.items == sas.recommend(history=["i3", "i4"], k=5).items
    assert got.fallback == "unknown user 'newcomer': scored from the events stored for it"


def test_a_forgotten_user_loses_its_training_history(sas: Recommender, store: SqliteStore) -> None:
    store.append([Event("u9", "i1", 1)])
    store.forget("u9")
    got = sas.recommend(user="u9", k=5)
    assert got.fallback == "forgotten user 'u9': most popular items" and got.method == "popularity"
    store.append([Event("u9", "i6", 5)])
    again = sas.recommend(user="u9", k=5)
    assert again.items == sas.recommend(history=["i6"], k=5).items


def test_recommend_many_and_batch_scoring_read_the_live_histories(
    sas: Recommender, store: SqliteStore, tmp_path: Path
) -> None:
    store.append([Event("u1", i, 2_000_000_000) for i in unseen(sas, "u1", 3)])
    one_by_one = [sas.recommend(user=u, k=5).items for u in ("u1", "u2")]
    assert [
        r.items for r in sas.recommend_many([{"user": "u1", "k": 5}, {"user": "u2", "k": 5}])
    ] == one_by_one
    users = tmp_path / "users.csv"
    users.write_text("user\nu1\nu2\n")
    score_to_parquet(sas, users, tmp_path / "out.parquet", k=5)
    assert [r["items"] for r in pq.read_table(tmp_path / "out.parquet").to_pylist()] == one_by_one


def test_batch_scoring_of_a_log_scores_each_logged_history_alone(
    sas: Recommender, store: SqliteStore, log: Interactions, tmp_path: Path
) -> None:
    store.append([Event("u0", i, 2_000_000_000) for i in unseen(sas, "u0", 3)])
    score_to_parquet(sas, log, tmp_path / "all.parquet", k=5)
    first = pq.read_table(tmp_path / "all.parquet").to_pylist()[0]
    assert first["user"] == "u0" and first["items"] == sas.recommend(history=trained(sas, "u0"), k=5).items


def test_explanations_explain_the_live_history(sas: Recommender, store: SqliteStore) -> None:
    new = unseen(sas, "u4", 2)
    store.append([Event("u4", i, 2_000_000_000) for i in new])
    ex = explain_recommendation(sas, user="u4", k=3, method="occlusion")
    assert ex.recommendation.items == sas.recommend(user="u4", k=3).items
    events = [(e.back, e.item) for x in ex.explanations if x is not None for e in x.events]
    assert events  # each back-position names the event of the live history, newest first (back 0)
    live = (trained(sas, "u4") + new)[::-1]
    assert all(live[back] == item for back, item in events)


def test_reads_are_bounded_by_what_the_model_reads_plus_a_margin(
    sas: Recommender, store: SqliteStore
) -> None:
    store.append([Event("u2", f"i{t % 40}", t) for t in range(200)])
    sas.use_store(store, margin=5)
    assert sas.live_histories(["u2"])["u2"].stored == 20 + 5  # max_len 20


@pytest.fixture(scope="module")
def shop() -> Recommender:
    cfg = {"hidden": 16, "max_len": 10, "n_layers": 1, "time_features": "periodic", "event_input": True}
    return Recommender("sasrec", cfg, TRAIN).fit(hourly_shop_log(), progress=False)


def test_stored_events_fill_the_models_columns_in_time_order(shop: Recommender, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "e.db")
    shop.use_store(store)
    assert shop.histories_ is not None and shop.users_ is not None and shop.events_ is not None
    last = int(shop.histories_.column(TIMESTAMP)[shop.histories_.offsets[1] - 1])  # u0's newest event
    store.append(
        [
            Event("u0", "i5", last + 100, "buy", 4.0),
            Event("u0", "i6", last - 1, "wishlist"),  # a type the model never saw, older than the newest
        ]
    )
    row = shop.live_histories(["u0"])["u0"]
    ts, codes = row.columns[TIMESTAMP], row.columns[EVENT]
    assert (np.diff(ts) >= 0).all() and ts[-1] == last + 100 and last - 1 in ts.tolist()
    assert codes[-1] == shop.events_.get("buy") and codes[ts.tolist().index(last - 1)] == 0
    assert RATING not in row.columns  # the log had no ratings: none are made up
    answer = shop.recommend(user="u0", k=5)
    assert not {"i5", "i6"} & set(answer.items) and answer.fallback is None
    shop.use_store(None)
    store.close()


def test_a_time_model_appends_a_sent_history_with_its_timestamps(shop: Recommender) -> None:
    assert shop.histories_ is not None
    last = int(shop.histories_.column(TIMESTAMP)[shop.histories_.offsets[1] - 1])
    got = shop.recommend(user="u0", history=["i2"], timestamps=[last + 60], events=["view"], k=5)
    assert "i2" not in got.items and got.ignored_inputs == []
    assert math.isfinite(got.scores[0])


def test_stored_events_fill_each_column_and_skip_unknown_items() -> None:
    items = IdMap.from_values(["a", "b"], offset=1)
    events = IdMap(np.array(["buy", "view"], dtype=object), offset=1)
    recent = Recent.of([Event("u", "a", 5, "buy", 4.0), Event("u", "b", 6), Event("u", "zz", 7, "view")])
    idx, cols = stored_part(recent, items, events, (TIMESTAMP, EVENT, RATING))
    assert idx.tolist() == [1, 2]  # "zz" is unknown: skipped with its columns
    assert cols[TIMESTAMP].tolist() == [5, 6] and cols[EVENT].tolist() == [1, 0]  # no type: code 0
    assert cols[RATING][0] == 4.0 and math.isnan(cols[RATING][1])  # no rating: NaN, read as "not known"
    assert {k: v.dtype for k, v in cols.items()} == {k: COLUMN_DTYPES[k] for k in cols}


def test_merge_keeps_time_order_and_the_columns_both_parts_have() -> None:
    base = (np.array([1, 2]), {TIMESTAMP: np.array([10, 20]), RATING: np.array([1.0, 2.0], np.float32)})
    new = (np.array([3, 4]), {TIMESTAMP: np.array([15, 20])})
    joined, cols = merge([base[0], new[0]], [base[1], new[1]])
    assert joined.tolist() == [1, 3, 2, 4] and cols[TIMESTAMP].tolist() == [
        10,
        15,
        20,
        20,
    ]  # ties: base first
    assert set(cols) == {TIMESTAMP}
    only_new, cols = merge([np.zeros(0, np.int64), new[0]], [base[1], new[1]])
    assert only_new.tolist() == [3, 4] and set(cols) == {TIMESTAMP}
