"""load_dataset: demo, files with detected formats, named datasets (local, zip, download, offline)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import urllib.error
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from shared_data import SHARED

from attnrec.data import describe, load_dataset, make_demo
from attnrec.data import download as download_mod
from attnrec.data.catalog import DATASETS, list_datasets
from attnrec.data.formats import FORMATS, READERS
from attnrec.data.named_features import FEATURE_LOADERS
from attnrec.data.schema import DataError
from attnrec.data.sniff import detect_format
from attnrec.data.titles import read_titles


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test may touch the network, the user's cache or $ATTNREC_DATA."""
    monkeypatch.delenv("ATTNREC_DATA", raising=False)
    monkeypatch.delenv("ATTNREC_OFFLINE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))

    def no_network(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(download_mod.urllib.request, "urlopen", no_network)


def write(path: Path, text: str, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("latin-1")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_demo_spec() -> None:
    a = load_dataset("demo", min_rating=4)
    b = make_demo(min_rating=4)
    assert a.source == b.source and np.array_equal(a.item, b.item)
    assert a.rating is not None and a.rating.min() >= 4
    assert "demo" in list_datasets() and set(DATASETS) <= set(list_datasets())


# ---------------------------------------------------------------------------------------------
# Files and formats
# ---------------------------------------------------------------------------------------------

# name: (content, detected format, first user, that user's items in time order, interactions)
FILES = {
    "pairs.txt": ("1 10\n1 11\n2 10\n", "pairs", "1", ["10", "11"], 3),
    "users.txt": ("u1 a b c\nu2 d e\n", "user-lines", "u1", ["a", "b", "c"], 5),
    "ratings.dat": ("1::10::5::3\n1::11::3::1\n", "movielens-dat", "1", ["11", "10"], 2),
    "u.data": ("1\t10\t5\t3\n1\t11\t3\t1\n", "ml100k", "1", ["11", "10"], 2),
    "other.tsv.txt": ("1\t10\t5\t3\n1\t11\t3\t1\n", "ml100k", "1", ["11", "10"], 2),
    "ratings.csv": ("userId,movieId,rating,timestamp\n1,10,5,3\n1,11,3,1\n", "ml20m", "1", ["11", "10"], 2),
    "log.csv": ("user_id,item_id,timestamp\n1,10,3\n1,11,1\n", "csv", "1", ["11", "10"], 2),
    "ratings_Beauty.csv": (
        "1,10,5.0,1365811200\n1,11,3.0,1365811100\n",
        "amazon-ratings-csv",
        "1",
        ["11", "10"],
        2,
    ),
    "log.tsv": ("user_id\titem_id\n1\t10\n1\t11\n", "tsv", "1", ["10", "11"], 2),
    "log.txt": ("user;item\n1;10\n1;11\n", "csv", "1", ["10", "11"], 2),
    "reviews.json": (
        '{"reviewerID": "1", "asin": "10", "overall": 5, "unixReviewTime": 3}\n',
        "amazon-json",
        "1",
        ["10"],
        1,
    ),
    "reviews_old.txt": (
        "{'reviewerID': '1', 'asin': '10', 'overall': 5, 'unixReviewTime': 3}\n",
        "amazon-json",
        "1",
        ["10"],
        1,
    ),
    "steam.json": (
        "{'username': 'u', 'product_id': '10', 'date': '2017-01-02'}\n",
        "steam-json",
        "u",
        ["10"],
        1,
    ),
    "otto.jsonl": (
        '{"session": 1, "events": [{"aid": 10, "ts": 3000, "type": "clicks"}]}\n',
        "otto-jsonl",
        "1",
        ["10"],
        1,
    ),
}


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("gz", [False, True])
def test_detect_and_load_every_format(tmp_path: Path, name: str, gz: bool) -> None:
    text, fmt, first_user, first_items, n = FILES[name]
    p = write(tmp_path / (name + (".gz" if gz else "")), text, gz)
    assert detect_format(p) == fmt
    data = load_dataset(str(p))
    assert len(data) == n and data.source.format == fmt
    assert data.users.to_list()[0] == first_user
    assert data.items.to_external(data.sequences()[0]) == first_items
    assert load_dataset(p, format=fmt).source.sha256 == data.source.sha256


def test_parquet_with_mapped_columns(tmp_path: Path) -> None:
    p = tmp_path / "log.parquet"
    pd.DataFrame({"who": ["a", "a", "b"], "what": ["x", "y", "x"], "when": [2, 1, 3]}).to_parquet(p)
    assert detect_format(p) == "parquet"
    data = load_dataset(p, columns={"user": "who", "item": "what", "timestamp": "when"})
    assert data.items.to_external(data.sequences()[0]) == ["y", "x"]
    with pytest.raises(
        DataError, match=r"missing column for user .*available columns: 'who', 'what', 'when'"
    ):
        load_dataset(p)


def test_explicit_format_overrides_detection(tmp_path: Path) -> None:
    p = write(tmp_path / "data.txt", "1 10\n1 11\n")  # detected as pairs ...
    data = load_dataset(p, format="user-lines")  # ... but read as one line per user
    assert data.source.format == "user-lines" and len(data) == 2


def test_unknown_format_and_spec(tmp_path: Path) -> None:
    p = write(tmp_path / "data.txt", "1 10\n")
    with pytest.raises(DataError, match="unknown format 'xml'; use one of: auto, pairs"):
        load_dataset(p, format="xml")
    with pytest.raises(DataError, match="applies to csv, tsv, parquet, json-lines files"):
        load_dataset(p, columns={"user": "a"})
    with pytest.raises(DataError, match="min_rating needs ratings"):
        load_dataset(p, min_rating=3)
    with pytest.raises(
        DataError, match=r"'ml-2m' is neither an existing file nor a named dataset \(demo, ml-1m"
    ):
        load_dataset("ml-2m")
    with pytest.raises(DataError, match="unknown JSON layout"):
        load_dataset(write(tmp_path / "x.json", '{"a": 1}\n'))
    with pytest.raises(DataError, match="empty"):
        load_dataset(write(tmp_path / "empty.csv", ""))
    assert set(FORMATS) >= {
        "pairs",
        "user-lines",
        "csv",
        "tsv",
        "parquet",
        "movielens-dat",
        "ml100k",
        "ml20m",
        "amazon-json",
    }


def test_user_with_one_interaction_is_clear(tmp_path: Path) -> None:
    from attnrec.data import leave_one_out

    data = load_dataset(write(tmp_path / "p.txt", "1 10\n2 11\n2 12\n"))
    with pytest.raises(DataError, match="no user has 3 or more interactions"):
        leave_one_out(data)
    assert describe(data)["users_below_3"] == 2


def test_titles_for_a_file(tmp_path: Path) -> None:
    p = write(tmp_path / "p.txt", "1 1\n1 2\n")
    movies = write(tmp_path / "movies.dat", "10::Ten (1990)::Drama\n20::Twenty (2000)::Drama\n")
    mapping = write(tmp_path / "map.txt", "1 20\n2 10\n")
    data = load_dataset(p, titles=movies, title_mapping=mapping)
    assert data.item_titles == {"1": "Twenty (2000)", "2": "Ten (1990)"}
    assert load_dataset(p, titles={"1": "One"}).item_titles == {"1": "One"}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "t.txt",
            "a\tFirst\nb\tSecond\na\tThird\n",
            r"t\.txt:3: item 'a' already has the title 'First' \(line 1\)",
        ),
        (
            "m.dat",
            "1::One::x\n2::Two::x\n1::Uno::x\n",
            r"m\.dat:3: item '1' already has the title 'One' \(line 1\)",
        ),
        (
            "movies.csv",
            "movieId,title\n1,One\n1,Uno\n",
            r"movies\.csv:3: item '1' already has the title 'One' \(line 2\)",
        ),
    ],
)
def test_a_title_file_giving_an_item_two_titles_is_refused(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    """A repeated ID with another title was taken and the last title silently won."""
    with pytest.raises(DataError, match=message + ", not '(Third|Uno)'; a title file has one title per item"):
        read_titles(write(tmp_path / name, text))
    assert read_titles(write(tmp_path / "same.txt", "a\tFirst\na\tFirst\n")) == {"a": "First"}


def test_titles_that_name_no_item_of_the_data_are_refused(tmp_path: Path) -> None:
    """A title file of another dataset, or an empty one, was taken as no titles without a word."""
    p = write(tmp_path / "p.txt", "1 1\n1 2\n")
    other = write(tmp_path / "other.tsv", "900\tX\n901\tY\n")
    with pytest.raises(
        DataError, match=r"other\.tsv: no title names an item of the data \(title IDs: '900', '901'"
    ):
        load_dataset(p, titles=other)
    with pytest.raises(DataError, match=r"empty\.tsv: no title names an item of the data \(title IDs: none"):
        load_dataset(p, titles=write(tmp_path / "empty.tsv", ""))
    with pytest.raises(DataError, match=r"titles: no title names an item.*; check title_mapping"):
        load_dataset(p, titles={"10": "Ten"}, title_mapping={"1": "11"})
    assert load_dataset(p, titles=write(tmp_path / "some.tsv", "2\tTwo\n9\tNine\n")).item_titles == {
        "2": "Two"
    }


# ---------------------------------------------------------------------------------------------
# Named datasets
# ---------------------------------------------------------------------------------------------


def test_registry_is_honest() -> None:
    assert set(DATASETS) == {
        "ml-1m",
        "ml-20m",
        "ml-100k",
        "ml-latest-small",
        "beauty",
        "steam",
        "amazon-toys",
        "amazon-sports",
        "taobao-sample",
        "otto-sample",
    }
    for d in DATASETS.values():
        assert d.url.startswith(("https://", "http://")) and d.filename and d.preprocessing
        assert d.sha256 is None or len(d.sha256) == 64
        assert d.reader in READERS
        for spec in (d.item_features, d.user_features):
            assert not spec or (spec[0] in FEATURE_LOADERS and len(spec) >= 2)


def test_offline_message_says_what_and_where(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with pytest.raises(DataError, match=r"dataset 'ml-1m' is not available locally") as err:
        load_dataset("ml-1m", data_dir=root, download=False)
    msg = str(err.value)
    assert "https://files.grouplens.org/datasets/movielens/ml-1m.zip" in msg
    assert str(root / "ml-1m" / "ml-1m.zip") in msg
    assert "ml-1m.txt" in msg and "ATTNREC_DATA" in msg


def test_no_network_message(tmp_path: Path) -> None:
    with pytest.raises(
        DataError, match=r"(?s)could not be downloaded \(URLError.*network disabled.*Download http"
    ):
        load_dataset("steam", data_dir=tmp_path)


def test_offline_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNREC_OFFLINE", "1")
    monkeypatch.setenv("ATTNREC_DATA", str(tmp_path / "env"))
    with pytest.raises(DataError, match=r"(?s)downloads are disabled.*" + str(tmp_path / "env" / "ml-100k")):
        load_dataset("ml-100k")


ML1M_RATINGS = "".join(
    f"{u}::{i}::{1 + (u + i) % 5}::{1000 + 10 * k}\n"
    for u in range(1, 6)
    for k, i in enumerate((5, 6, 7, 8, 9, 10))
)
ML1M_RATINGS += "1::99::5::5000\n"  # item 99 has a single rating: removed by the min-count filter


def _ml1m_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("ml-1m/ratings.dat", ML1M_RATINGS)
        zf.writestr("ml-1m/movies.dat", "5::Five (1995)::Drama\n6::Six (1996)::Comedy\n".encode("latin-1"))
        zf.writestr("ml-1m/README", "readme")
    return buf.getvalue()


def test_named_from_papers_file_with_titles(tmp_path: Path) -> None:
    root = tmp_path / "data"
    write(root / "ml-1m" / "ml-1m.txt", "1 1\n1 2\n2 2\n")
    write(root / "ml-1m" / "sas_to_original_items.txt", "1 6\n2 5\n")
    write(root / "ml-1m" / "movies.dat", "5::Five (1995)::Drama\n6::Six (1996)::Comedy\n")
    with pytest.warns(UserWarning, match="differs from the papers' ml-1m file"):
        data = load_dataset("ml-1m", data_dir=root)
    assert data.source.name == "ml-1m" and data.source.format == "pairs"
    assert data.item_titles == {"1": "Six (1996)", "2": "Five (1995)"}


def test_named_from_zip_in_data_dir(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "ml-1m").mkdir(parents=True)
    (root / "ml-1m" / "ml-1m.zip").write_bytes(_ml1m_zip())
    data = load_dataset("ML-1M", data_dir=root)  # names are case-insensitive
    assert (root / "ml-1m" / "ratings.dat").is_file()  # extracted next to the archive
    assert data.n_users == 5 and "99" not in data.items  # items with < 5 ratings removed
    assert data.items.to_list() == ["5", "6", "7", "8", "9", "10"]
    assert data.item_titles == {"5": "Five (1995)", "6": "Six (1996)"}
    assert data.source.format == "movielens-dat" and data.source.name == "ml-1m"
    again = load_dataset("ml-1m", data_dir=root, k_core=5)  # the extracted file is reused
    assert np.array_equal(again.item, data.item) and again.item_titles == data.item_titles
    with pytest.raises(DataError, match="6-core filtering removed every interaction"):
        load_dataset("ml-1m", data_dir=root, k_core=6)  # every item has exactly 5 ratings


def test_named_from_env_dir_root_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNREC_DATA", str(tmp_path))
    write(tmp_path / "u.data", "1\t10\t5\t3\n1\t11\t3\t1\n")  # directly in the root is fine too
    data = load_dataset("ml100k")
    assert data.source.name == "ml-100k" and len(data) == 2


def test_download_verifies_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = _ml1m_zip()

    def fake_urlopen(url: str, timeout: float = 0) -> io.BytesIO:
        assert url == DATASETS["ml-1m"].url
        return io.BytesIO(payload)

    monkeypatch.setattr(download_mod.urllib.request, "urlopen", fake_urlopen)
    wrong = dataclasses.replace(DATASETS["ml-1m"], sha256="0" * 64)
    monkeypatch.setitem(DATASETS, "ml-1m", wrong)
    with pytest.raises(DataError, match="does not match the expected"):
        load_dataset("ml-1m", data_dir=tmp_path / "a")
    assert not (tmp_path / "a" / "ml-1m" / "ml-1m.zip").exists()  # a bad download is not kept
    right = dataclasses.replace(wrong, sha256=hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(DATASETS, "ml-1m", right)
    data = load_dataset("ml-1m", data_dir=tmp_path / "b")
    assert (tmp_path / "b" / "ml-1m" / "ml-1m.zip").read_bytes() == payload
    assert data.n_items == 6


@pytest.mark.skipif(not (SHARED / "ml-1m" / "ml-1m.txt.gz").exists(), reason="shared ml-1m data not present")
def test_real_named_ml1m() -> None:
    data = load_dataset("ml-1m", data_dir=SHARED)
    assert (data.n_users, data.n_items, len(data)) == (6040, 3416, 999_611)
    assert data.source.sha256 == DATASETS["ml-1m"].paper_sha256
    assert data.item_titles is not None and len(data.item_titles) == 3416
    assert data.item_titles["1"] == "Raiders of the Lost Ark (1981)"  # sas item 1 = MovieLens 1198


def test_read_options_check_themselves_wherever_they_are_built(tmp_path: Path) -> None:
    """read_file's options refuse an unknown missing-features policy or date format as load_dataset does."""
    from attnrec.data.datasets import ReadOptions

    with pytest.raises(DataError, match="missing_features='skip'"):
        ReadOptions(missing_features="skip")
    with pytest.raises(DataError, match="time format 'yearfirst'"):
        ReadOptions(time_format="yearfirst")
    with pytest.raises(DataError, match="time format 'yearfirst'"):
        load_dataset("demo", time_format="yearfirst")
    assert ReadOptions(time_format="dayfirst").time_format == "dayfirst"
