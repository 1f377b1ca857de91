"""DataFrames in and out: Interactions.from_frame, Recommender.fit(frame), Recommender.recommend_frame."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from attnrec.checkpoint import CheckpointError
from attnrec.config import ConfigError
from attnrec.data import load_dataset
from attnrec.data.schema import DataError, Interactions
from attnrec.recommend import Recommender

TINY_MODEL = {"hidden": 8, "max_len": 12, "n_layers": 1}
TINY_TRAIN = {"max_epochs": 1, "batch_size": 64, "threads": 1}


def _ratings(n_users: int = 40, n_items: int = 30, seed: int = 0) -> pd.DataFrame:
    """A MovieLens-like ratings frame: users walk a cycle of items, one event a day."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(1, n_users + 1):
        start = int(rng.integers(0, n_items))
        for t in range(int(rng.integers(4, 12))):
            rows.append((u, (start + t) % n_items + 1, float(rng.integers(1, 6)), 1_600_000_000 + 86_400 * t))
    df = pd.DataFrame(rows, columns=["userId", "movieId", "rating", "timestamp"])
    return df.sample(frac=1.0, random_state=0).reset_index(drop=True)  # shuffled: time orders it


@pytest.fixture(scope="module")
def ratings() -> pd.DataFrame:
    return _ratings()


@pytest.fixture(scope="module")
def fitted(ratings: pd.DataFrame) -> Recommender:
    titles = {i: f"Movie {i}" for i in ratings["movieId"].unique()}
    data = Interactions.from_frame(ratings, titles=titles)
    return Recommender("sasrec", TINY_MODEL, TINY_TRAIN).fit(data, progress=False)


# -- in ----------------------------------------------------------------------------------------------
def test_from_frame_guesses_the_columns_like_the_file_readers(ratings: pd.DataFrame) -> None:
    data = Interactions.from_frame(ratings)
    assert data.n_users == ratings["userId"].nunique() and data.n_items == ratings["movieId"].nunique()
    assert data.timestamp is not None and data.rating is not None and data.event is None
    first = ratings[ratings["userId"] == 1].sort_values("timestamp", kind="stable")
    j = data.users.get(1)
    assert data.items.to_external(data.item[data.user == j]) == first["movieId"].astype(str).tolist()
    assert data.source.name == "DataFrame" and data.source.format == "dataframe"


def test_a_pyarrow_table_reads_like_the_pandas_frame(ratings: pd.DataFrame) -> None:
    a = Interactions.from_frame(ratings)
    b = Interactions.from_frame(pa.Table.from_pandas(ratings))
    assert a.users.to_list() == b.users.to_list() and a.items.to_list() == b.items.to_list()
    assert np.array_equal(a.item, b.item) and np.array_equal(a.timestamp, b.timestamp)  # type: ignore[arg-type]


def test_a_polars_frame_reads_like_the_pandas_frame(ratings: pd.DataFrame) -> None:
    pl = pytest.importorskip("polars")
    a = Interactions.from_frame(ratings)
    b = Interactions.from_frame(pl.from_pandas(ratings))
    assert a.items.to_list() == b.items.to_list() and np.array_equal(a.item, b.item)


def test_named_columns_events_and_filters() -> None:
    df = pd.DataFrame(
        {
            "who": ["a", "a", "b", "b", "b"],
            "what": ["x", "y", "x", "z", "y"],
            "when": [3, 1, 1, 2, 3],
            "kind": ["view", "buy", "view", "view", "cart"],
            "stars": [5, 2, 4, 1, 5],
        }
    )
    data = Interactions.from_frame(df, "who", "what", "when", "kind", "stars", min_rating=3)
    assert data.to_frame().to_dict("list") == {
        "user": ["a", "b", "b"],
        "item": ["x", "x", "y"],
        "timestamp": [3.0, 1.0, 3.0],
        "rating": [5.0, 4.0, 5.0],
        "event": ["view", "view", "cart"],
    }


def test_a_missing_column_says_how_to_name_it() -> None:
    df = pd.DataFrame({"customer": [1], "sku": [2]})
    with pytest.raises(DataError, match=r"missing column for user .*map it with user='<column name>'"):
        Interactions.from_frame(df)
    with pytest.raises(DataError, match="missing column 'nope' \\(mapped as item\\)"):
        Interactions.from_frame(df, user="customer", item="nope")
    with pytest.raises(DataError, match="from_frame reads a pandas DataFrame"):
        Interactions.from_frame([[1, 2]])  # type: ignore[arg-type]


def test_titles_and_features_come_from_frames(ratings: pd.DataFrame) -> None:
    movies = pd.DataFrame({"movieId": [1.0, 2.0], "title": ["One", "Two"], "genres": ["A|B", "B"]})
    data = Interactions.from_frame(
        ratings,
        titles=movies,
        item_features=movies[["movieId", "genres"]].astype({"movieId": int}),
        missing_features="empty",
    )
    assert data.item_titles == {"1": "One", "2": "Two"}
    assert data.item_features is not None and "genres" in data.item_features.fields


def test_a_title_frame_is_checked_as_a_title_file_is(ratings: pd.DataFrame) -> None:
    # a missing title was the title "nan"; an item given two titles kept the last; titles of another
    # catalog were no titles, without a word
    gaps = pd.DataFrame({"movieId": [1, 2], "title": ["One", None]})
    assert Interactions.from_frame(ratings, titles=gaps).item_titles == {"1": "One"}
    twice = pd.DataFrame({"movieId": [1, 2, 1], "title": ["One", "Two", "Uno"]})
    with pytest.raises(DataError, match="row 3: item '1' already has the title 'One', not 'Uno'"):
        Interactions.from_frame(ratings, titles=twice)
    other = pd.DataFrame({"movieId": [901, 902], "title": ["A", "B"]})
    with pytest.raises(DataError, match="DataFrame titles: no title names an item of the data"):
        Interactions.from_frame(ratings, titles=other)
    with pytest.raises(DataError, match="no title names an item of the data"):
        Interactions.from_frame(ratings, titles={901: "A"})


def test_load_dataset_reads_a_frame_with_its_options(ratings: pd.DataFrame) -> None:
    data = load_dataset(ratings, columns={"user": "userId", "item": "movieId"}, min_rating=4)
    assert data.rating is not None and data.rating.min() >= 4 and (ratings["rating"] >= 4).sum() == len(data)
    assert load_dataset(ratings, titles={1: "One"}).item_titles == {"1": "One"}
    with pytest.raises(DataError, match="mapped by name, not by position"):
        load_dataset(ratings, columns={"user": 0})


def test_fit_takes_a_frame_and_equals_fitting_its_log(ratings: pd.DataFrame) -> None:
    a = Recommender("sasrec", TINY_MODEL, TINY_TRAIN).fit(ratings, progress=False)
    b = Recommender("sasrec", TINY_MODEL, TINY_TRAIN).fit(Interactions.from_frame(ratings), progress=False)
    users = [1, 2, 3]
    assert a.recommend_frame(users, k=5).equals(b.recommend_frame(users, k=5))


def test_fit_refuses_what_is_not_a_log_or_a_frame() -> None:
    with pytest.raises(DataError, match="expected an Interactions log or a DataFrame"):
        Recommender("sasrec", TINY_MODEL, TINY_TRAIN).fit("ratings.csv", progress=False)  # type: ignore[arg-type]


# -- out ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"split": 5}, ConfigError, "split is a Split or a split's name, not int 5"),
        ({"valid_protocol": "full"}, TypeError, "valid_protocol is a Protocol .*, not str 'full'"),
        ({"valid_protocol": None}, TypeError, "valid_protocol is a Protocol"),
    ],
)
def test_fit_refuses_a_split_or_protocol_of_the_wrong_kind(
    ratings: pd.DataFrame, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    """``split=5`` and ``valid_protocol="full"`` ended in ``AttributeError`` (the protocol's after the first
    epoch)."""
    with pytest.raises(error, match=message):
        Recommender("sasrec", TINY_MODEL, TINY_TRAIN).fit(ratings, progress=False, **options)


def test_saving_to_a_file_is_refused_and_keeps_the_file(fitted: Recommender, tmp_path: Path) -> None:
    """``save`` to a file's path ended in ``FileExistsError``."""
    taken = tmp_path / "model"
    taken.write_text("mine")
    with pytest.raises(CheckpointError, match="model: a model is a directory, and a file is there"):
        fitted.save(taken)
    assert taken.read_text() == "mine"


def test_recommend_frame_has_one_row_per_item_in_rank_order(fitted: Recommender) -> None:
    users = [3, "1", 2.0]  # as a frame's column might hold them
    frame = fitted.recommend_frame(users, k=4)
    assert list(frame.columns) == ["user", "rank", "item", "score", "title"]
    assert frame["user"].tolist() == [3] * 4 + ["1"] * 4 + [2.0] * 4
    assert frame["rank"].tolist() == [1, 2, 3, 4] * 3
    many = fitted.recommend_many([{"user": u, "k": 4} for u in ("3", "1", "2")])
    assert frame["item"].tolist() == [i for r in many for i in r.items]
    assert np.allclose(frame["score"].to_numpy(), [s for r in many for s in r.scores])
    assert frame["title"].tolist() == [f"Movie {i}" for i in frame["item"]]
    for u, group in frame.groupby("rank"):
        assert len(group) == 3, u


def test_filter_viewed_is_exclude_seen(fitted: Recommender) -> None:
    assert fitted.histories_ is not None and fitted.items_ is not None
    seen = set(fitted.items_.to_external(fitted.histories_[int(fitted.users_.get(1))]))  # type: ignore[union-attr,arg-type]
    k = fitted.items_.__len__()
    kept = fitted.recommend_frame([1], k=k, filter_viewed=False)
    dropped = fitted.recommend_frame([1], k=k, filter_viewed=True)
    assert seen <= set(kept["item"]) and not seen & set(dropped["item"])
    assert fitted.recommend_frame([1], k=k, exclude_seen=False).equals(kept)
    assert fitted.recommend(user=1, k=k, filter_viewed=False).items == kept["item"].tolist()
    with pytest.raises(ConfigError, match="contradict"):
        fitted.recommend_frame([1], k=3, filter_viewed=True, exclude_seen=False)


def test_a_model_without_titles_has_no_title_column(ratings: pd.DataFrame) -> None:
    rec = Recommender("sasrec", TINY_MODEL, TINY_TRAIN).fit(ratings, progress=False)
    frame = rec.recommend_frame([1, "unknown user"], k=3)
    assert list(frame.columns) == ["user", "rank", "item", "score"]
    assert frame["user"].tolist() == [1] * 3 + ["unknown user"] * 3  # unknown users get popular items
    with pytest.raises(DataError, match="missing user"):
        rec.recommend_frame([1, None], k=3)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"user": 1, "k": 2.5}, "k must be a whole number of items, at least 1, not 2.5"),
        ({"user": 1, "k": "3"}, "k must be a whole number of items, at least 1, not '3'"),
        ({"user": 1, "k": True}, "k must be a whole number"),
        ({"user": 1, "k": 0}, "at least 1, not 0"),
        ({"history": "1,2"}, "history is a list of item IDs, not str '1,2'"),
        ({"user": 1, "include": "12"}, "include is a list of item IDs, not str '12'"),
        ({"user": 1, "exclude": 5}, "exclude is a list of item IDs, not int 5"),
    ],
)
def test_a_request_value_of_the_wrong_kind_is_refused_not_bent(
    fitted: Recommender, request_: dict[str, object], message: str
) -> None:
    """``k=2.5`` once answered 2 items and ``history="1,2"`` the items "1", "," and "2", without a word."""
    with pytest.raises(ValueError, match=message):
        fitted.recommend(**request_)  # type: ignore[arg-type]
    assert len(fitted.recommend(user=1, k=np.int64(3)).items) == 3  # a numpy integer is a whole number
    assert len(fitted.recommend(history=np.array([1, 2]), k=2).items) == 2  # an array of IDs is a list


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"user": [1]}, "user must be an ID \\(text or a number\\), not list \\[1\\]"),
        ({"user": True}, "user must be an ID .*, not bool True"),
        ({"user": float("nan")}, "user must be an ID .*, not float nan"),
        ({"history": [1, None]}, "each of history must be an ID .*, not NoneType None"),
        ({"history": [[1, 2]]}, "each of history must be an ID .*, not list"),
        ({"history": {1, 2}}, "history is a list of item IDs, not set"),
        ({"history": {1: 2}}, "history is a list of item IDs, not dict"),
        ({"user": 1, "exclude": [" "]}, "each of exclude must be an ID"),
        ({"user": 1, "exclude_seen": "no"}, "exclude_seen must be true or false, not 'no'"),
        ({"user": 1, "filter_viewed": "false"}, "filter_viewed must be true or false, not 'false'"),
    ],
)
def test_an_id_that_is_no_id_is_refused_not_answered(
    fitted: Recommender, request_: dict[str, object], message: str
) -> None:
    """``user=[1]`` was the unknown user "[1]" and got the most popular items; ``history=[1, None]`` scored
    [1] and a set scored its own order; ``exclude_seen="no"`` was true; all without a word."""
    with pytest.raises(ValueError, match=message):
        fitted.recommend(**request_)  # type: ignore[arg-type]
    assert fitted.recommend(user=1.0, k=3).items == fitted.recommend(user="1", k=3).items  # one user
    include = fitted.recommend(user=np.int64(1), include={2, 3, 4}, exclude_seen=False, k=5).items
    assert sorted(include) == ["2", "3", "4"]  # an include set is a set


@pytest.mark.parametrize("item", [["1", "2"], None, True, float("nan")])
def test_an_item_that_is_no_id_is_refused_by_similar_items_and_explain_rec(
    fitted: Recommender, item: object
) -> None:
    """``similar_items(["1", "2"])`` or ``similar_items(None)`` said "unknown item '['1', '2']'" (a
    KeyError, a 404 of its own kind), as did ``explain_recommendation(item=[...])``: what is not an ID is
    refused as recommend refuses it."""
    from attnrec.recommend.explain_rec import explain_recommendation

    with pytest.raises(
        ValueError, match=f"item must be an ID \\(text or a number\\), not {type(item).__name__}"
    ):
        fitted.similar_items(item)
    if item is not None:  # None: no item, explain the top-k
        with pytest.raises(ValueError, match="item must be an ID"):
            explain_recommendation(fitted, user=1, item=item)
    with pytest.raises(KeyError, match="unknown item 'nope'"):
        fitted.similar_items("nope")
    assert fitted.similar_items(1.0, k=3).items == fitted.similar_items("1", k=3).items


def test_a_batch_that_is_not_a_list_of_requests_is_refused(fitted: Recommender) -> None:
    """``recommend_many([1, 2])`` ended in an ``AttributeError``; ``recommend_frame("12")`` answered the
    users "1" and "2"."""
    with pytest.raises(ValueError, match="requests\\[0\\] is a dict of recommend's arguments, not int 1"):
        fitted.recommend_many([1, 2])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="requests is a list of dicts of recommend's arguments, not str"):
        fitted.recommend_many("12")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="users is a list of user IDs, not str '12'"):
        fitted.recommend_frame("12")


def test_the_recommender_refuses_options_of_the_wrong_kind(fitted: Recommender, tmp_path: Any) -> None:
    """``train=[1]`` ended in Python's dict error, ``auto="yes"`` and ``progress="no"`` counted as true,
    and ``use_store("redis://x")`` was kept as a store that failed at the first request."""
    with pytest.raises(ConfigError, match="train must be a dict or a TrainConfig, not list"):
        Recommender("sasrec", train=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="auto must be true or false, not 'yes'"):
        Recommender("sasrec", auto="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="progress must be true or false, not 'no'"):
        Recommender("pop").fit(_ratings(), progress="no")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="store is a HistoryStore .*open_store"):
        fitted.use_store("redis://x")  # type: ignore[arg-type]


def test_a_save_never_writes_over_a_config_json_that_is_not_a_model(
    fitted: Recommender, tmp_path: Any
) -> None:
    """``rec.save(".")`` in a project once replaced the project's own config.json."""
    own = tmp_path / "config.json"
    own.write_text('{"my": "settings"}')
    with pytest.raises(CheckpointError, match="holds a config.json that is not a saved model's"):
        fitted.save(tmp_path)
    assert own.read_text() == '{"my": "settings"}'
    fitted.save(tmp_path / "m")
    fitted.save(tmp_path / "m")  # a model directory is replaced
    assert Recommender.load(tmp_path / "m").items_ is not None
