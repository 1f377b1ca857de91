"""The named datasets of issue #19 with their context columns and feature tables: from tiny files the
tests write in each format (always), and from the real files when ../shared/data is there."""

from __future__ import annotations

import gzip
import hashlib
import json
import urllib.error
from pathlib import Path

import numpy as np
import pytest
from shared_data import SHARED, needs

from attnrec.data import download as download_mod
from attnrec.data import load_dataset
from attnrec.data.catalog import DATASETS
from attnrec.data.describe import describe, describe_features
from attnrec.data.schema import DataError, Interactions, event_names


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test may touch the network, the user's cache or $ATTNREC_DATA."""
    monkeypatch.delenv("ATTNREC_DATA", raising=False)
    monkeypatch.delenv("ATTNREC_OFFLINE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    def no_network(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(download_mod.urllib.request, "urlopen", no_network)


def write(path: Path, text: str, gz: bool = False, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode(encoding)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def field_values(data: Interactions, role: str, field: str, ext: str) -> list[str]:
    """The values of a multi/categorical field for one external ID, through align()."""
    table = data.item_features if role == "item" else data.user_features
    ids = data.items if role == "item" else data.users
    assert table is not None
    aligned = table.align(ids, missing="empty")
    index = ids.get(ext)
    assert index is not None
    vocab = table.fields[field].vocab  # type: ignore[union-attr]
    row = (
        aligned.multi[field][index]
        if field in aligned.multi
        else aligned.categorical[field][index : index + 1]
    )
    return vocab.to_external(row[row > 0])


# ---------------------------------------------------------------------------------------------
# Tiny files in each dataset's own format
# ---------------------------------------------------------------------------------------------


def test_amazon_toys_from_s3rec_files(tmp_path: Path) -> None:
    write(tmp_path / "amazon-toys" / "Toys_and_Games.txt.gz", "1 1 2 3\n2 2 3 4 5\n", gz=True)
    write(
        tmp_path / "amazon-toys" / "Toys_and_Games_item2attributes.json",
        json.dumps({"1": [7, 8], "2": [8], "3": [9, 7, 9], "4": [], "6": [1]}),
    )
    data = load_dataset("toys", data_dir=tmp_path)
    assert (data.n_users, data.n_items, len(data)) == (2, 5, 7)
    assert data.items.to_external(data.sequences()[1]) == ["2", "3", "4", "5"]
    assert field_values(data, "item", "attributes", "3") == ["9", "7"]  # a set: the repeated 9 once
    table = data.item_features
    assert table is not None and table.missing == "empty" and table.extra_ids(data.items) == ["6"]
    assert describe(data)["features"]["item"]["covered"] == 4  # item 5 has no row: empty features
    assert load_dataset("amazon-toys", data_dir=tmp_path, features=False).item_features is None


def test_amazon_sports_without_attributes_is_the_plain_log(tmp_path: Path) -> None:
    write(tmp_path / "Sports_and_Outdoors.txt", "1 1 2\n")  # at the root of the data dir
    data = load_dataset("amazon-sports", data_dir=tmp_path)
    assert len(data) == 2 and data.item_features is None and data.source.format == "user-lines"


ML100K_ITEM = (
    "1|Toy Story (1995)|01-Jan-1995||http://x|"
    + "|".join("0001110000000000000")
    + "\n"
    + "2|GoldenEye (1995)|01-Jan-1995||http://x|"
    + "|".join("0110000000000000100")
    + "\n"
    + "3|unknown||||"
    + "|".join("1000000000000000000")
    + "\n"
)


def test_ml100k_with_genres_users_ratings_and_timestamps(tmp_path: Path) -> None:
    root = tmp_path / "ml-100k"
    write(root / "u.data", "1\t1\t5\t30\n1\t2\t3\t10\n2\t3\t4\t20\n2\t1\t2\t25\n")
    write(root / "u.item", ML100K_ITEM, encoding="latin-1")
    write(root / "u.user", "1|24|M|technician|85711\n2|53|F|other|T8H1N\n")
    data = load_dataset("ml-100k", data_dir=tmp_path)
    seqs = data.sequences()
    assert data.items.to_external(seqs[0]) == ["2", "1"] and seqs.columns["rating"][:2].tolist() == [3.0, 5.0]
    assert seqs.columns["timestamp"][:2].tolist() == [10, 30]
    assert field_values(data, "item", "genres", "1") == ["Animation", "Children's", "Comedy"]
    assert field_values(data, "item", "genres", "2") == ["Action", "Adventure", "Thriller"]
    items = data.item_features.align(data.items)  # type: ignore[union-attr]
    assert items.numeric["year"].tolist() == [0.0, 1995.0, 1995.0, 0.0] and not items.present["year"][3]
    users = data.user_features.align(data.users)  # type: ignore[union-attr]
    assert users.numeric["age"].tolist() == [24.0, 53.0]
    assert field_values(data, "user", "zip_prefix", "2") == ["T"] and field_values(
        data, "user", "gender", "1"
    ) == ["M"]


def test_ml1m_features_follow_the_papers_id_mapping(tmp_path: Path) -> None:
    root = tmp_path / "ml-1m"
    write(root / "ml-1m.txt", "1 1\n1 2\n2 2\n")
    write(root / "sas_to_original_items.txt", "1 6\n2 5\n")
    write(root / "sas_to_original_users.txt", "1 3\n2 1\n")
    write(
        root / "movies.dat",
        "5::Five (1995)::Drama\n6::Six (1996)::Comedy|War\n7::Seven (1997)::Horror\n",
        encoding="latin-1",
    )
    write(root / "users.dat", "1::F::1::10::48067\n3::M::25::15::55117\n")
    with pytest.warns(UserWarning, match="differs from the papers' ml-1m file"):
        data = load_dataset("ml-1m", data_dir=tmp_path)
    assert field_values(data, "item", "genres", "1") == ["Comedy", "War"]  # sas 1 = MovieLens 6
    assert field_values(data, "user", "gender", "1") == ["M"] and field_values(data, "user", "age", "2") == [
        "1"
    ]
    assert data.item_features.ids.to_list() == ["1", "2"]  # type: ignore[union-attr]  # movie 7: no new ID


def test_ml_latest_small_with_genres_tags_and_half_stars(tmp_path: Path) -> None:
    root = tmp_path / "ml-latest-small"
    write(
        root / "ratings.csv.gz",
        "userId,movieId,rating,timestamp\n1,1,4.5,20\n1,2,0.5,10\n2,1,3.0,5\n",
        gz=True,
    )
    write(
        root / "movies.csv.gz",
        'movieId,title,genres\n1,"Heat, The (1995)",Action|Crime\n'
        "2,Untitled,(no genres listed)\n3,Cold One (2001),Drama\n",
        gz=True,
    )
    write(
        root / "tags.csv.gz",
        "userId,movieId,tag,timestamp\n1,1,Dark hero,1\n2,1,dark,2\n1,2,slow,3\n2,2,Dark comedy,4\n",
        gz=True,
    )
    data = load_dataset("ml-latest-small", data_dir=tmp_path)
    assert data.sequences().columns["rating"][:2].tolist() == [0.5, 4.5]
    assert data.item_titles == {"1": "Heat, The (1995)", "2": "Untitled"}
    assert (
        field_values(data, "item", "genres", "1") == ["Action", "Crime"]
        and field_values(data, "item", "genres", "2") == []
    )
    # tag words of at least 2 movies (TEXT_MIN_COUNT): "dark" is kept, "hero", "slow", "comedy" are not
    assert field_values(data, "item", "tags", "1") == ["dark"] and field_values(
        data, "item", "tags", "2"
    ) == ["dark"]
    aligned = data.item_features.align(data.items)  # type: ignore[union-attr]
    assert aligned.numeric["year"].tolist() == [0.0, 1995.0, 0.0] and aligned.extra_ids == ("3",)


TAOBAO = (
    "\n".join(
        [
            "1,100,7,pv,1511544070",
            "1,101,8,cart,1511500000",  # earlier than the row above: the file is not time-sorted per user
            "1,102,7,buy,1511500000",  # same second as the row above: ties keep file order
            "2,100,7,fav,1511600000",
            "2,103,9,pv,1511400000",
        ]
    )
    + "\n"
)


def test_taobao_sorts_stably_by_time_and_keeps_events_and_categories(tmp_path: Path) -> None:
    write(tmp_path / "taobao-sample" / "UserBehavior_head_814users.csv.gz", TAOBAO, gz=True)
    data = load_dataset("taobao-sample", data_dir=tmp_path)
    seqs = data.sequences()
    assert data.items.to_external(seqs[0]) == ["101", "102", "100"]
    assert data.items.to_external(seqs[1]) == ["103", "100"]
    assert event_names(data.events, seqs.columns["event"]) == ["cart", "buy", "pv", "pv", "fav"]  # type: ignore[arg-type]
    assert data.events is not None and data.events.to_list() == ["buy", "cart", "fav", "pv"]
    assert field_values(data, "item", "category", "100") == ["7"] and field_values(
        data, "item", "category", "103"
    ) == ["9"]
    with pytest.raises(
        DataError, match=r"(?s)cannot fetch it.*Download https://tianchi\.aliyun\.com/dataset/649"
    ):
        load_dataset("taobao", data_dir=tmp_path / "empty")


def test_taobao_bad_lines_are_named(tmp_path: Path) -> None:
    p = write(tmp_path / "tb.csv", TAOBAO + "3,104,7,refund,1511400000\n")
    with pytest.raises(DataError, match=r"tb\.csv:6: behavior 'refund' is not one of buy, cart, fav, pv"):
        load_dataset(p, format="taobao-csv")
    assert load_dataset(write(tmp_path / "ok.csv", TAOBAO)).source.format == "taobao-csv"  # detected


def test_otto_sample(tmp_path: Path) -> None:
    line = {
        "session": 7,
        "events": [
            {"aid": 5, "ts": 1659304800025, "type": "clicks"},
            {"aid": 6, "ts": 1659304904511, "type": "orders"},
        ],
    }
    write(tmp_path / "otto-sample" / "train.jsonl", json.dumps(line) + "\n")
    data = load_dataset("otto", data_dir=tmp_path)
    seqs = data.sequences()
    assert seqs.columns["timestamp"].tolist() == [1659304800, 1659304904]  # ms -> whole seconds
    assert event_names(data.events, seqs.columns["event"]) == ["clicks", "orders"]  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# The real files
# ---------------------------------------------------------------------------------------------


def _counts(data: Interactions) -> tuple[int, int, int]:
    return data.n_users, data.n_items, len(data)


def _digest(*arrays: np.ndarray | None) -> str:
    h = hashlib.sha256()
    for a in arrays:
        assert a is not None
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


@needs("amazon-toys/Toys_and_Games.txt.gz", "amazon-toys/Toys_and_Games_item2attributes.json.gz")
def test_real_amazon_toys() -> None:
    data = load_dataset("amazon-toys", data_dir=SHARED)
    assert _counts(data) == (19_412, 11_924, 167_597)
    assert data.source.sha256 == "176c680c688d497598c4a89a03b402c0fe78d795e5db335c2e78dd5f2d778a3f"
    f = describe(data)["features"]["item"]
    assert f["covered"] == 11_924 and f["fields"]["attributes"]["values"] == 1_027
    assert f["fields"]["attributes"]["per_row"] == pytest.approx(4.27, abs=0.01)


@needs(
    "amazon-sports/Sports_and_Outdoors.txt.gz", "amazon-sports/Sports_and_Outdoors_item2attributes.json.gz"
)
def test_real_amazon_sports() -> None:
    data = load_dataset("amazon-sports", data_dir=SHARED)
    assert _counts(data) == (35_598, 18_357, 296_337)
    f = describe(data)["features"]["item"]
    assert f["covered"] == 18_357 and f["fields"]["attributes"]["values"] == 2_277
    # 6.0 per item counting the file's repeated ids; 5.8 distinct ones
    assert f["fields"]["attributes"]["per_row"] == pytest.approx(5.80, abs=0.01)


@needs("ml-100k/u.data", "ml-100k/u.item", "ml-100k/u.user")
def test_real_ml100k() -> None:
    data = load_dataset("ml-100k", data_dir=SHARED)
    assert _counts(data) == (943, 1_682, 100_000)
    # the log itself is what it was before (user, item, timestamp and rating columns)
    assert _digest(data.user, data.item, data.timestamp, data.rating) == (
        "37b703b55fb2c6527e3902dd63cd6229a30b900215e44d1748cd03cff1c58995"
    )
    d = describe(data)
    assert d["ratings"]["min"] == 1.0 and d["ratings"]["max"] == 5.0 and d["time"]["span_days"] == 214.84
    items, users = d["features"]["item"], d["features"]["user"]
    assert items["covered"] == 1_682 and items["fields"]["genres"]["values"] == 19
    assert users["covered"] == 943 and users["fields"]["occupation"]["values"] == 21
    assert field_values(data, "item", "genres", "1") == ["Animation", "Children's", "Comedy"]  # Toy Story


@needs("ml-latest-small/ratings.csv.gz", "ml-latest-small/movies.csv.gz", "ml-latest-small/tags.csv.gz")
def test_real_ml_latest_small() -> None:
    data = load_dataset("ml-latest-small", data_dir=SHARED)
    assert _counts(data) == (610, 9_724, 100_836)
    assert data.source.sha256 == "aa289ca83157595d0df6aea1be6a4ded676ddc4385472e8313a8ed9805352646"
    assert data.rating is not None and set(np.unique(data.rating)) == {0.5 * k for k in range(1, 11)}
    f = describe(data)["features"]["item"]
    assert f["rows"] == 9_742 and f["extra_ids"] == 18 and f["fields"]["genres"]["values"] == 19
    assert 0.14 < f["fields"]["tags"]["coverage"] < 0.15


@needs("ml-1m/ml-1m.txt.gz", "ml-1m/movies.dat", "ml-1m/users.dat", "ml-1m/sas_to_original_users.txt")
def test_real_ml1m_gains_features_without_changing_its_log() -> None:
    data = load_dataset("ml-1m", data_dir=SHARED)
    assert _counts(data) == (6_040, 3_416, 999_611) and data.source.sha256 == DATASETS["ml-1m"].paper_sha256
    # the user and item columns hash as they did before feature tables existed
    assert _digest(data.user, data.item) == "7537e2d2d18392581579f16e5f6ddf2b435df7e876aa4555fb43a2390f3d478d"
    items, users = (
        describe_features(data.item_features, data.items),
        describe_features(data.user_features, data.users),
    )
    assert items is not None and items["covered"] == 3_416 and items["fields"]["genres"]["values"] == 18
    assert users is not None and users["covered"] == 6_040 and users["fields"]["age"]["values"] == 7
    # sas item 1 = MovieLens 1198, Raiders of the Lost Ark: Action|Adventure
    assert field_values(data, "item", "genres", "1") == ["Action", "Adventure"]


@needs("taobao-sample/UserBehavior_head_814users.csv.gz")
def test_real_taobao_sample() -> None:
    data = load_dataset("taobao-sample", data_dir=SHARED)
    assert _counts(data) == (814, 55_233, 84_287)
    d = describe(data)
    assert d["events"] == {"buy": 1_749, "cart": 4_494, "fav": 2_351, "pv": 75_693}
    assert d["features"]["item"]["fields"]["category"]["values"] == 2_911
    seqs = data.sequences()
    ts = seqs.columns["timestamp"]
    starts = seqs.offsets[1:-1]
    assert np.all((np.diff(ts) >= 0) | np.isin(np.arange(1, len(ts)), starts))  # sorted within each user


@needs("otto-sample/train.jsonl")
def test_real_otto_sample() -> None:
    data = load_dataset("otto-sample", data_dir=SHARED)
    assert _counts(data) == (20, 510, 862)
    assert describe(data)["events"] == {"carts": 52, "clicks": 800, "orders": 10}


def test_named_beauty_raw_uses_one_pass_min_counts(tmp_path: Path) -> None:
    rows = [f"u{u},i{i},5.0,{100 * u + i}" for u in range(1, 6) for i in range(1, 6)]
    rows += [f"u6,i{i},4.0,{1000 + i}" for i in (1, 2, 3, 4, 9)]  # i9 is rated once
    write(tmp_path / "beauty" / "ratings_Beauty.csv", "\n".join(rows) + "\n")
    data = load_dataset("beauty", data_dir=tmp_path)
    assert data.source.format == "amazon-ratings-csv" and "i9" not in data.items
    # Counted once over the whole file (the SASRec script), not a k-core: u6 keeps 4 < 5 items.
    u6 = data.users.get("u6")
    assert u6 is not None and len(data.sequences()[u6]) == 4
    assert data.n_users == 6 and len(data) == 29


def test_named_steam_raw_with_titles(tmp_path: Path) -> None:
    lines = [
        f"{{'username': 'p{u}', 'product_id': '{g}', 'date': '2017-01-{g:02d}'}}"
        for u in range(5)
        for g in range(1, 6)
    ]
    write(tmp_path / "steam" / "steam_reviews.json.gz", "\n".join(lines) + "\n", gz=True)
    write(tmp_path / "steam" / "steam_games.json.gz", "{'id': '1', 'app_name': 'Portal 2'}\n", gz=True)
    data = load_dataset("steam", data_dir=tmp_path)
    assert (data.n_users, data.n_items, len(data)) == (5, 5, 25)
    assert data.item_titles == {"1": "Portal 2"}
    assert data.items.to_external(data.sequences()[0]) == ["1", "2", "3", "4", "5"]
