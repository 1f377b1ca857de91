"""Readers: every format on small files written here (plain and gzip), each bad input's message."""

from __future__ import annotations

import gzip
from pathlib import Path

import pandas as pd
import pytest
from shared_data import SHARED

from attnrec.data.files import content_sha256
from attnrec.data.readers.jsonlines import read_amazon_json, read_otto_jsonl, read_steam_json
from attnrec.data.readers.lines import read_pairs, read_user_lines
from attnrec.data.readers.movielens import read_ml20m, read_ml100k, read_movielens_dat
from attnrec.data.readers.table import read_table
from attnrec.data.schema import DataError, Interactions
from attnrec.data.titles import read_id_mapping, read_titles, with_titles


def write(path: Path, text: str, *, gz: bool = False, encoding: str = "utf-8") -> Path:
    data = text.encode(encoding)
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def seqs(data: Interactions) -> dict[str, list[str]]:
    s = data.sequences()
    return {data.users.to_external([u])[0]: data.items.to_external(s[u]) for u in range(s.n_users)}


# ---------------------------------------------------------------------------------------------
# pairs / user lines
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_pairs(tmp_path: Path, gz: bool) -> None:
    p = write(tmp_path / ("p.txt.gz" if gz else "p.txt"), "1 10\n2 20\n1 11\n\n1 10\n")
    data = read_pairs(p)
    assert seqs(data) == {"1": ["10", "11", "10"], "2": ["20"]}
    assert data.source.format == "pairs" and data.source.path == str(p)
    plain = write(tmp_path / "plain.txt", "1 10\n2 20\n1 11\n\n1 10\n")
    assert data.source.sha256 == content_sha256(plain)  # gzip is transparent to the hash


def test_pairs_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    p = write(tmp_path / "bad.txt", "1 10\n1 11\n\n1 12 99\n")
    with pytest.raises(DataError, match=r"bad\.txt:4: expected 'user item'"):
        read_pairs(p)
    gzp = write(tmp_path / "bad.txt.gz", "1 10\noops\n", gz=True)
    with pytest.raises(DataError, match=r"bad\.txt\.gz:2: expected 'user item'"):
        read_pairs(gzp)


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.txt", "\n\n")
    for reader in (
        read_pairs,
        read_user_lines,
        read_movielens_dat,
        read_ml100k,
        read_amazon_json,
        read_table,
    ):
        with pytest.raises(DataError, match="empty"):
            reader(empty)
    with pytest.raises(DataError, match="not found"):
        read_pairs(tmp_path / "nope.txt")
    with pytest.raises(DataError, match="directory"):
        read_pairs(tmp_path)


def test_not_utf8_names_line(tmp_path: Path) -> None:
    p = tmp_path / "latin.txt"
    p.write_bytes(b"1 10\n1 caf\xe9\n")
    with pytest.raises(DataError, match=r"latin\.txt:2: not valid utf-8"):
        read_user_lines(p)


@pytest.mark.parametrize("gz", [False, True])
def test_user_lines(tmp_path: Path, gz: bool) -> None:
    p = write(tmp_path / "u.txt", "u1 a b c\nu2 d\nu1 e\n", gz=gz)
    data = read_user_lines(p)
    assert seqs(data) == {"u1": ["a", "b", "c", "e"], "u2": ["d"]}
    assert data.timestamp is None and data.source.format == "user-lines"


def test_user_lines_user_without_items(tmp_path: Path) -> None:
    p = write(tmp_path / "u.txt", "u1 a b\nu2\n")
    with pytest.raises(DataError, match=r"u\.txt:2: expected 'user item item \.\.\.'"):
        read_user_lines(p)


# ---------------------------------------------------------------------------------------------
# MovieLens
# ---------------------------------------------------------------------------------------------

RATINGS_DAT = "1::10::5::300\n1::11::3::100\n2::10::4::50\n1::12::4::100\n"


@pytest.mark.parametrize("gz", [False, True])
def test_movielens_dat(tmp_path: Path, gz: bool) -> None:
    data = read_movielens_dat(write(tmp_path / "ratings.dat", RATINGS_DAT, gz=gz))
    assert seqs(data) == {"1": ["11", "12", "10"], "2": ["10"]}  # by time, the tie at 100 in file order
    assert data.rating is not None and list(data.rating) == [3, 4, 5, 4]
    assert data.timestamp is not None and list(data.timestamp) == [100, 100, 300, 50]
    assert data.source.format == "movielens-dat"


def test_movielens_dat_min_rating_and_k_core(tmp_path: Path) -> None:
    p = write(tmp_path / "ratings.dat", RATINGS_DAT)
    assert seqs(read_movielens_dat(p, min_rating=4)) == {"1": ["12", "10"], "2": ["10"]}
    with pytest.raises(DataError, match="2-core filtering removed every interaction"):
        read_movielens_dat(p, k_core=2)
    p2 = write(tmp_path / "r2.dat", RATINGS_DAT + "2::11::1::60\n3::12::1::1\n")
    assert seqs(read_movielens_dat(p2, k_core=2)) == {"1": ["11", "10"], "2": ["10", "11"]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1::10::5::300\n1::11::5\n", r"ratings\.dat:2: expected 'user::item::rating::timestamp'"),
        ("1::10::5::300\n\n1::11::five::3\n", r"ratings\.dat:3: rating 'five' is not a number"),
        ("1::10::5::300\n1::11::5::noon\n", r"ratings\.dat:2: timestamp 'noon' is not a number"),
        ("1::10::5::300\n::11::5::3\n", r"ratings\.dat:2: expected"),
    ],
)
def test_movielens_dat_bad_lines(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_movielens_dat(write(tmp_path / "ratings.dat", text))


def test_ml100k(tmp_path: Path) -> None:
    p = write(tmp_path / "u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t377\t1\t878887116\n")
    data = read_ml100k(p)
    assert seqs(data) == {"196": ["377", "242"], "186": ["302"]}
    assert data.source.format == "ml100k"
    bad = write(tmp_path / "bad.data", "196\t242\t3\t881250949\n196 377 1 878887116\n")
    with pytest.raises(DataError, match=r"bad\.data:2: expected 'user<TAB>item<TAB>rating<TAB>timestamp'"):
        read_ml100k(bad)


@pytest.mark.parametrize("gz", [False, True])
def test_ml20m(tmp_path: Path, gz: bool) -> None:
    text = "userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n1,29,3.5,1112484676\n2,3,4.0,974820889\n"
    data = read_ml20m(write(tmp_path / "ratings.csv", text, gz=gz), min_rating=3.5)
    assert seqs(data) == {"1": ["29", "2"], "2": ["3"]}
    assert data.source.format == "ml20m"


def test_ml20m_missing_column(tmp_path: Path) -> None:
    p = write(tmp_path / "ratings.csv", "userId,itemId,rating,timestamp\n1,2,3.5,1\n")
    with pytest.raises(DataError, match=r"missing column 'movieId'.*available columns: 'userId', 'itemId'"):
        read_ml20m(p)


# ---------------------------------------------------------------------------------------------
# JSON lines
# ---------------------------------------------------------------------------------------------

AMAZON = (
    '{"reviewerID": "A1", "asin": "B2", "overall": 5.0, "unixReviewTime": 200, "reviewText": "ok"}\n'
    "{'reviewerID': 'A1', 'asin': 'B1', 'overall': 2.0, 'unixReviewTime': 100, 'helpful': [0, 1]}\n"
    '{"reviewerID": "A2", "asin": "B1", "overall": 4.0, "unixReviewTime": 150}\n'
)


@pytest.mark.parametrize("gz", [False, True])
def test_amazon_json_and_python_literals(tmp_path: Path, gz: bool) -> None:
    data = read_amazon_json(write(tmp_path / "reviews.json", AMAZON, gz=gz))
    assert seqs(data) == {"A1": ["B1", "B2"], "A2": ["B1"]}
    assert data.rating is not None and list(data.rating) == [2.0, 5.0, 4.0]
    assert data.source.format == "amazon-json"
    assert seqs(read_amazon_json(write(tmp_path / "r2.json", AMAZON), min_rating=4)) == {
        "A1": ["B2"],
        "A2": ["B1"],
    }


def test_amazon_json_never_evaluates_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    line = "{'reviewerID': __import__('pathlib').Path(" + repr(str(marker)) + ").touch(), 'asin': 'B'}\n"
    with pytest.raises(DataError, match=r"evil\.json:2: neither JSON nor a Python dict literal"):
        read_amazon_json(write(tmp_path / "evil.json", AMAZON.splitlines()[0] + "\n" + line))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"asin": "B3", "overall": 1, "unixReviewTime": 5}', r"j\.json:2: missing 'reviewerID'"),
        ('{"reviewerID": "A3", "asin": "B3", "overall": 1}', r"j\.json:2: missing 'unixReviewTime'"),
        ("[1, 2]", r"j\.json:2: expected an object \(\{\.\.\.\}\), got list"),
        ('{"reviewerID": "A3", "asin": "B3", "overall": "x", "unixReviewTime": 5}', r"j\.json:2: rating 'x'"),
        ("not json", r"j\.json:2: not a JSON object"),
    ],
)
def test_amazon_json_bad_lines(tmp_path: Path, line: str, message: str) -> None:
    first = AMAZON.splitlines()[0]
    with pytest.raises(DataError, match=message):
        read_amazon_json(write(tmp_path / "j.json", first + "\n" + line + "\n"))


def test_steam_json(tmp_path: Path) -> None:
    text = (
        "{'username': 'Chaos', 'hours': 0.1, 'product_id': '725280', 'date': '2017-12-17', 'text': 'hi'}\n"
        "{'username': 'Chaos', 'product_id': '328100', 'date': '2017-10-10', 'early_access': False}\n"
    )
    data = read_steam_json(write(tmp_path / "steam.json", text, gz=True))
    assert seqs(data) == {"Chaos": ["328100", "725280"]}
    assert (
        data.timestamp is not None and data.timestamp[0] == pd.Timestamp("2017-10-10", tz="UTC").timestamp()
    )
    assert data.rating is None


def test_otto_jsonl_events(tmp_path: Path) -> None:
    text = (
        '{"session": 0, "events": [{"aid": 5, "ts": 1659304800025, "type": "clicks"}, '
        '{"aid": 6, "ts": 1659304900000, "type": "carts"}]}\n'
        '{"session": 1, "events": [{"aid": 5, "ts": 1659304800000, "type": "orders"}]}\n'
    )
    data = read_otto_jsonl(write(tmp_path / "train.jsonl", text))
    assert seqs(data) == {"0": ["5", "6"], "1": ["5"]}
    assert data.event is not None and list(data.event) == ["clicks", "carts", "orders"]
    assert data.timestamp is not None and data.timestamp[0] == pytest.approx(1659304800.025)
    bad = write(tmp_path / "bad.jsonl", '{"session": 0, "events": [{"aid": 5}]}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:1: every event needs 'aid' and 'ts'"):
        read_otto_jsonl(bad)


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------

CSV = (
    "visitor,product,when,stars,kind\n"
    "v1,p1,2021-01-02,4,view\nv1,p2,2021-01-01,5,buy\nv2,p1,2021-01-03,3,view\n"
)
MAPPING = {"user": "visitor", "item": "product", "timestamp": "when", "rating": "stars", "event": "kind"}


@pytest.mark.parametrize("gz", [False, True])
def test_csv_with_mapped_columns_and_dates(tmp_path: Path, gz: bool) -> None:
    data = read_table(write(tmp_path / ("t.csv.gz" if gz else "t.csv"), CSV, gz=gz), MAPPING)
    assert seqs(data) == {"v1": ["p2", "p1"], "v2": ["p1"]}
    assert (
        data.timestamp is not None and data.timestamp[0] == pd.Timestamp("2021-01-01", tz="UTC").timestamp()
    )
    assert data.event is not None and list(data.event) == ["buy", "view", "view"]
    assert data.rating is not None and list(data.rating) == [5, 4, 3]
    assert data.source.format == "csv"


def test_tsv_with_default_column_names(tmp_path: Path) -> None:
    text = "user_id\titem_id\ttimestamp\n007\t0042\t2\n007\t0041\t1\n"
    data = read_table(write(tmp_path / "t.tsv", text))
    assert seqs(data) == {"007": ["0041", "0042"]}  # IDs are kept as text, leading zeros included
    assert data.rating is None and data.event is None


def test_parquet(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {"user": [1, 1, 2], "item": [10.0, 11.0, 10.0], "timestamp": [3, 1, 2], "rating": [1, 2, 3]}
    )
    p = tmp_path / "t.parquet"
    df.to_parquet(p)
    data = read_table(p, min_rating=2)
    assert seqs(data) == {"1": ["11"], "2": ["10"]}  # integral float IDs lose their ".0"
    assert data.source.format == "parquet"
    with pytest.raises(DataError, match=r"missing column 'who'.*available columns: 'user', 'item'"):
        read_table(p, {"user": "who"})


def test_headerless_table_by_position(tmp_path: Path) -> None:
    p = write(tmp_path / "ratings_X.csv", "A1,B1,5.0,200\nA1,B2,3.0,100\n")
    data = read_table(p, {"user": 0, "item": 1, "rating": 2, "timestamp": 3}, header=False)
    assert seqs(data) == {"A1": ["B2", "B1"]}
    with pytest.raises(DataError, match="by position"):
        read_table(p, {"user": "a"}, header=False)


def test_table_missing_columns(tmp_path: Path) -> None:
    p = write(tmp_path / "t.csv", "customer,thing\n1,2\n")
    with pytest.raises(
        DataError, match=r"t\.csv: missing column for user .*available columns: 'customer', 'thing'"
    ):
        read_table(p)
    with pytest.raises(DataError, match=r"missing column 'when' \(mapped as timestamp\)"):
        read_table(p, {"user": "customer", "item": "thing", "timestamp": "when"})
    assert len(read_table(p, {"user": "customer", "item": "thing"})) == 1
    with pytest.raises(DataError, match="unknown column roles"):
        read_table(p, {"item": "thing", "colour": "x"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("user,item,rating\n1,2,3\n1,3,4,5\n", r"t\.csv:3: expected 3 fields, saw 4"),
        ("user,item,rating\n1,2,3\n\n1,,4\n", r"t\.csv: line 4: missing item"),
        ("user,item,rating\n1,2,3\n1,3,good\n", r"t\.csv: line 3: rating 'good' is not a number"),
        (
            "user,item,timestamp\n1,2,3\n1,3,yesterday\n",
            r"t\.csv: line 3: timestamp 'yesterday' is not a number",
        ),
        ("user,item,rating\n", r"t\.csv: the file has a header but no rows"),
    ],
)
def test_table_bad_rows(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_table(write(tmp_path / "t.csv", text))


# ---------------------------------------------------------------------------------------------
# Titles
# ---------------------------------------------------------------------------------------------


def test_titles_movies_dat_latin1_and_mapping(tmp_path: Path) -> None:
    movies = write(
        tmp_path / "movies.dat", "1::Toy Story (1995)::Animation\n2::Café (1999)::Drama\n", encoding="latin-1"
    )
    assert read_titles(movies) == {"1": "Toy Story (1995)", "2": "Café (1999)"}
    mapping = write(tmp_path / "sas_to_original_items.txt", "1 2\n2 1\n3 99\n")
    assert read_id_mapping(mapping) == {"1": "2", "2": "1", "3": "99"}
    assert read_titles(movies, mapping) == {"1": "Café (1999)", "2": "Toy Story (1995)"}


def test_titles_other_formats(tmp_path: Path) -> None:
    uitem = write(tmp_path / "u.item", "1|Toy Story (1995)|01-Jan-1995||http://x|0|1\n", encoding="latin-1")
    assert read_titles(uitem) == {"1": "Toy Story (1995)"}
    csv = write(tmp_path / "movies.csv", 'movieId,title,genres\n1,"American President, The (1995)",Comedy\n')
    assert read_titles(csv) == {"1": "American President, The (1995)"}
    tsv = write(tmp_path / "titles.txt", "a\tFirst thing\nb\tSecond\n")
    assert read_titles(tsv) == {"a": "First thing", "b": "Second"}
    games = write(
        tmp_path / "steam_games.json", "{'id': '620', 'app_name': 'Portal 2'}\n{'title': 'no id'}\n", gz=True
    )
    assert read_titles(games) == {"620": "Portal 2"}
    with pytest.raises(DataError, match=r"movies2\.dat:1: expected 'id::title::genres'"):
        read_titles(write(tmp_path / "movies2.dat", "just a line\n"))


def test_with_titles_keeps_known_items(tmp_path: Path) -> None:
    data = read_pairs(write(tmp_path / "p.txt", "1 10\n1 11\n"))
    titled = with_titles(data, {"10": "Ten", "99": "Unknown"})
    assert titled.item_titles == {"10": "Ten"}
    assert with_titles(data, None) is data


# ---------------------------------------------------------------------------------------------
# Real files (skipped when the shared data folder is absent)
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(not (SHARED / "ml-1m" / "ml-1m.txt.gz").exists(), reason="shared ml-1m data not present")
def test_real_ml1m_pairs_file() -> None:
    data = read_pairs(SHARED / "ml-1m" / "ml-1m.txt.gz", name="ml-1m")
    assert data.source.sha256 == "b725f3acb3986fe3130bffd1e77a74d182a1f51799567a236dbd60270f95b0a2"
    assert (data.n_users, data.n_items, len(data)) == (6040, 3416, 999_611)
    assert data.users.to_list()[:3] == ["1", "2", "3"]
    titles = read_titles(SHARED / "ml-1m" / "movies.dat", SHARED / "ml-1m" / "sas_to_original_items.txt")
    assert len(titles) == 3416 and set(titles) == set(data.items.to_list())


@pytest.mark.skipif(not (SHARED / "ml-100k" / "u.data").exists(), reason="shared ml-100k data not present")
def test_real_ml100k() -> None:
    data = read_ml100k(SHARED / "ml-100k" / "u.data")
    assert (data.n_users, data.n_items, len(data)) == (943, 1682, 100_000)
    assert len(read_titles(SHARED / "ml-100k" / "u.item")) == 1682


@pytest.mark.skipif(
    not (SHARED / "amazon-musical-instruments").exists(), reason="shared Amazon data not present"
)
def test_real_amazon_reviews() -> None:
    data = read_amazon_json(SHARED / "amazon-musical-instruments" / "reviews_Musical_Instruments_5.json.gz")
    assert (data.n_users, data.n_items, len(data)) == (1429, 900, 10_261)
    assert data.rating is not None and set(data.rating) <= {1.0, 2.0, 3.0, 4.0, 5.0}


def test_a_csv_header_that_names_a_role_twice_is_refused(tmp_path: Path) -> None:
    """pandas renames a second ``item`` to ``item.1``: the first was read as the item without a word.
    Repeats among columns no role reads are left alone."""
    twice = tmp_path / "twice.csv"
    twice.write_text("user,item,item,timestamp\nu1,a,b,1\nu1,c,d,2\n")
    with pytest.raises(DataError, match="the header names 'item' twice; which is the item"):
        read_table(twice)
    notes = tmp_path / "notes.csv"
    notes.write_text("user,item,note,note,timestamp\nu1,a,b,x,1\nu1,c,d,y,2\n")
    assert read_table(notes).n_items == 2
