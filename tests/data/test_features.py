"""Item/user feature tables: kinds, alignment to a log's IDs (missing and cold IDs), readers of every
format, and errors that name the file and the line (issue #19, data)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data import from_columns, load_dataset
from attnrec.data.describe import describe, format_description
from attnrec.data.feature_files import parse_feature_columns, read_features
from attnrec.data.features import FeatureTable, tokens
from attnrec.data.filters import rebuild
from attnrec.data.schema import DataError, IdMap


def items(*ids: str) -> IdMap:
    return IdMap(np.array(ids, dtype=object), offset=1)


def hand_table() -> FeatureTable:
    df = pd.DataFrame(
        {
            "item": ["a", "b", "c", "z"],  # z is not in the log below: a cold-start candidate
            "genre": ["Drama|Comedy", "Comedy", "", "Horror|Drama|Comedy"],
            "brand": ["acme", "zeta", None, "acme"],
            "price": [10.0, np.nan, 30.0, 20.0],
            "blurb": ["A big Dog, a big day", "small cat", None, "Dog days"],
        }
    )
    return FeatureTable.from_frame(
        df, "item", {"genre": "multi", "brand": "categorical", "price": "numeric", "blurb": "text"}
    )


def test_align_by_hand_with_missing_and_extra_ids() -> None:
    table = hand_table()
    log = items("c", "a", "q", "b")  # internal 1..4; q has no row
    with pytest.raises(DataError, match=r"DataFrame: no feature row for 1 of the log's 4 IDs \(e\.g\. q\)"):
        table.align(log)
    al = table.align(log, missing="empty")
    assert al.n_rows == 5 and al.missing_ids == ("q",) and al.extra_ids == ("z",)
    # vocabularies are sorted; code 0 is padding / missing
    assert al.vocab_sizes == {"genre": 3, "brand": 2, "blurb": 7}
    comedy, drama = 1, 2  # Comedy, Drama, Horror
    assert al.multi["genre"].tolist() == [[0, 0], [0, 0], [drama, comedy], [0, 0], [comedy, 0]]
    assert al.categorical["brand"].tolist() == [0, 0, 1, 0, 2]
    assert al.numeric["price"].tolist() == [0.0, 30.0, 10.0, 0.0, 0.0]
    assert al.present["price"].tolist() == [False, True, True, False, False]
    assert al.numeric["price"].dtype == np.float32 and al.multi["genre"].dtype == np.int64
    vocab = table.fields["blurb"].vocab  # type: ignore[union-attr]
    assert vocab.to_list() == ["a", "big", "cat", "day", "days", "dog", "small"]  # lower-cased words
    assert [vocab.to_external(r[r > 0]) for r in al.multi["blurb"][2:3]] == [["a", "big", "dog", "day"]]


def test_align_extra_rows_truncation_standardising_and_users() -> None:
    table = hand_table()
    al = table.align(items("a", "b", "c"), include_extra=True, max_values=2, standardise=True)
    assert al.n_rows == 5 and al.extra_ids == ("z",)
    assert al.multi["genre"][4].tolist() == [3, 2]  # z: Horror, Drama (Comedy cut at max_values=2)
    assert al.truncated["genre"] == 1 and al.truncated["blurb"] == 1
    mean, std = 20.0, float(np.std([10.0, 30.0, 20.0]))
    assert al.numeric["price"][[1, 3, 4]] == pytest.approx([(10 - mean) / std, (30 - mean) / std, 0.0])
    assert al.present["price"].tolist() == [False, True, False, True, True]
    users = IdMap(np.array(["b", "a"], dtype=object), offset=0)  # users: row u is user u, no padding row
    assert table.align(users).categorical["brand"].tolist() == [2, 1]


def test_kinds_are_inferred_by_the_documented_rules() -> None:
    df = pd.DataFrame(
        {
            "movieId": [1, 2, 3, 4],
            "year": [1990, 1995, None, 2001],
            "score": ["1.5", "2", "", "3"],
            "genres": ["A|B", "B", "C", None],
            "tags": [["x", "y"], [], ["y"], None],
            "title": ["The big one", "A small thing", "Another big one", "Yet more"],
            "brand": ["acme", "zeta", "acme", "zeta"],
            "flag": [True, False, True, True],
        }
    )
    table = FeatureTable.from_frame(df, "movieId")
    assert table.kinds() == {
        "year": "numeric",
        "score": "numeric",
        "genres": "multi",
        "tags": "multi",
        "title": "text",
        "brand": "categorical",
        "flag": "categorical",
    }
    assert table.ids.to_list() == ["1", "2", "3", "4"]
    assert tokens("Star Wars: Episode IV (1977)") == ["star", "wars", "episode", "iv", "1977"]


def test_text_fields_keep_frequent_words() -> None:
    df = pd.DataFrame({"id": ["a", "b", "c"], "t": ["red fox", "red dog", "red fox jumps"]})
    table = FeatureTable.from_frame(df, "id", {"t": "text"}, text_min_count=2)
    assert table.fields["t"].vocab.to_list() == ["fox", "red"]  # type: ignore[union-attr]
    capped = FeatureTable.from_frame(df, "id", {"t": "text"}, text_max_vocab=1)
    assert capped.fields["t"].vocab.to_list() == ["red"]  # type: ignore[union-attr]


def test_rekey_maps_new_ids_to_original_rows() -> None:
    table = hand_table().rekey({"1": "c", "2": "a", "3": "nowhere"})
    assert table.ids.to_list() == ["1", "2"]
    assert table.align(items("1", "2")).categorical["brand"].tolist() == [0, 0, 1]


def write(path: Path, text: str, gz: bool = False) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_readers_of_every_format(tmp_path: Path, gz: bool) -> None:
    suffix = ".gz" if gz else ""
    csv = read_features(write(tmp_path / f"i.csv{suffix}", "movieId,genres,year\n1,A|B,1990\n2,B,\n", gz))
    tsv = read_features(
        write(tmp_path / f"i.tsv{suffix}", "movieId\tgenres\tyear\n1\tA|B\t1990\n2\tB\t\n", gz)
    )
    txt = read_features(write(tmp_path / f"i.txt{suffix}", "movieId;genres;year\n1;A|B;1990\n2;B;\n", gz))
    js = read_features(
        write(tmp_path / f"a.json{suffix}", '{"1": ["A", "B"], "2": ["B"]}', gz), value_field="genres"
    )
    recs = json.dumps({"1": {"genres": "A|B", "year": 1990}, "2": {"genres": "B", "year": None}})
    nested = read_features(write(tmp_path / f"n.json{suffix}", recs, gz))
    lines = '{"movieId": 1, "genres": ["A", "B"], "year": 1990}\n{"movieId": 2, "genres": ["B"]}\n'
    jsonl = read_features(write(tmp_path / f"r.jsonl{suffix}", lines, gz))
    pq = tmp_path / "i.parquet"
    pd.DataFrame({"movieId": [1, 2], "genres": [["A", "B"], ["B"]], "year": [1990.0, None]}).to_parquet(pq)
    for table in (csv, tsv, txt, js, nested, jsonl, read_features(pq)):
        al = table.align(items("2", "1"))
        assert table.ids.to_list() == ["1", "2"] and table.kinds()["genres"] == "multi"
        assert al.multi["genres"].tolist() == [[0, 0], [2, 0], [1, 2]]
        if "year" in table.fields:
            assert table.kinds()["year"] == "numeric" and al.present["year"].tolist() == [False, False, True]


@pytest.mark.parametrize(
    ("name", "text", "fields", "message"),
    [
        (
            "dup.csv",
            "item,c\na,x\nb,y\n\na,z\n",
            None,
            r"dup\.csv: line 5: ID 'a' already has a row \(line 2\)",
        ),
        (
            "num.csv",
            "item,price\na,1\nb,cheap\n",
            {"price": "numeric"},
            r"num\.csv: line 3: numeric field 'price': 'cheap' is not a finite number",
        ),
        (  # inf was taken, and standardising made every price NaN: "loss became nan" at fit
            "inf.csv",
            "item,price\na,1\nb,2\nc,inf\n",
            None,
            r"inf\.csv: line 4: numeric field 'price': 'inf' is not a finite number",
        ),
        (
            "neginf.csv",
            "item,price\na,1\nb,-inf\n",
            {"price": "numeric"},
            r"neginf\.csv: line 3: numeric field 'price': '-inf' is not a finite number",
        ),
        (
            "typo.csv",
            "item,year\n" + "".join(f"i{k},{1990 + k}\n" for k in range(12)) + "x,19x0\n",
            None,
            r"typo\.csv: line 14: field 'year' looks numeric but has '19x0'.*year=categorical",
        ),
        (
            "cols.csv",
            "item,genre\na,x\n",
            {"genres": "multi"},
            r"cols\.csv: no column 'genres' for a feature field; available columns: 'item', 'genre'",
        ),
        (
            "kind.csv",
            "item,genre\na,x\n",
            {"genre": "tags"},
            r"kind\.csv: field 'genre' has unknown kind 'tags'",
        ),
        (
            "noid.csv",
            "thing,genre\na,x\n",
            None,
            r"noid\.csv: no item ID column .*available columns: 'thing', 'genre'",
        ),
        ("noval.csv", "item,genre\n,x\n", None, r"noval\.csv: line 2: missing ID \(column 'item'\)"),
        ("bad.json", '{"1": [1, 2],\n "2": [3,, 4]}', None, r"bad\.json:2: not valid JSON"),
        ("ragged.csv", "item,genre\na,x\nb,y,z\n", None, r"ragged\.csv:3: expected 2 fields, saw 3"),
        ("short.csv", "item,genre,year\na,x,1990\n\nb,y\n", None, r"short\.csv:4: expected 3 fields, saw 2"),
        ("empty.csv", "", None, r"empty\.csv: the file is empty"),
    ],
)
def test_bad_feature_files_name_file_and_line(
    tmp_path: Path, name: str, text: str, fields: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(DataError, match=message):
        read_features(write(tmp_path / name, text), fields=fields)


def _log_file(tmp_path: Path) -> Path:
    return write(tmp_path / "log.csv", "userId,movieId,timestamp\nu1,1,3\nu1,2,4\nu2,2,1\nu2,3,2\n")


def test_load_dataset_with_feature_files_and_frames(tmp_path: Path) -> None:
    log = _log_file(tmp_path)
    feats = write(tmp_path / "movies.csv", "movieId,genres,year\n1,A|B,1990\n2,B,1995\n3,C,2001\n9,A,1980\n")
    users = pd.DataFrame({"userId": ["u1", "u2"], "age": [30, 40]})
    data = load_dataset(
        log,
        item_features=feats,
        user_features=users,
        item_feature_columns={"id": "movieId", "genres": "multi"},
    )
    assert data.item_features is not None and data.item_features.kinds() == {
        "genres": "multi"
    }  # declared only
    assert data.user_features is not None and data.user_features.kinds() == {"age": "numeric"}
    assert data.item_features.extra_ids(data.items) == ["9"]
    # keyed by external IDs: a k-core that drops items and re-indexes keeps the same table, still aligned
    smaller = rebuild(data, data.item != data.items.get("1"))
    assert smaller.item_features is data.item_features
    aligned = smaller.item_features.align(smaller.items)
    assert (
        [
            smaller.item_features.fields["genres"].vocab.to_external(r[r > 0])  # type: ignore[union-attr]
            for r in aligned.multi["genres"][1:]
        ]
        == [["B"], ["C"]]
    )
    assert load_dataset(log, item_features=feats, features=True).item_features is not None
    with pytest.raises(DataError, match="features=False contradicts"):
        load_dataset(log, item_features=feats, features=False)


def test_log_items_without_rows_are_an_error_unless_empty(tmp_path: Path) -> None:
    log = _log_file(tmp_path)
    feats = write(tmp_path / "movies.csv", "movieId,genres\n1,A\n")
    with pytest.raises(
        DataError, match=r"movies\.csv: no feature row for 2 of the log's 3 items \(e\.g\. 2, 3\)"
    ):
        load_dataset(log, item_features=feats)
    data = load_dataset(log, item_features=feats, missing_features="empty")
    assert data.item_features is not None and data.item_features.align(data.items).missing_ids == ("2", "3")
    with pytest.raises(DataError, match="missing_features='maybe'"):
        load_dataset(log, item_features=feats, missing_features="maybe")


def test_describe_summarises_features() -> None:
    df = pd.DataFrame({"id": ["x", "y", "w"], "genres": ["A|B", "", "C"], "year": [1990, None, 2000]})
    data = from_columns(["u", "u", "v"], ["x", "y", "x"], item_features=FeatureTable.from_frame(df, "id"))
    d = describe(data)["features"]
    assert d["user"] is None
    assert d["item"]["covered"] == 2 and d["item"]["extra_ids"] == 1
    assert d["item"]["fields"]["genres"] == {"kind": "multi", "values": 3, "coverage": 0.5, "per_row": 2.0}
    assert d["item"]["fields"]["year"] == {"kind": "numeric", "values": None, "coverage": 0.5}
    text = format_description(describe(data))
    assert "item features  2 of 2 items have a row (1 rows for items not in the log)" in text
    assert "genres       multi, 3 values, 50.0% of items, 2 per item" in text


def test_feature_columns_option_syntax() -> None:
    assert parse_feature_columns("id=movieId,genres=multi", True, False) == (
        {"id": "movieId", "genres": "multi"},
        None,
    )
    assert parse_feature_columns("item.id=movieId,user.age=numeric,x=auto") == (
        {"id": "movieId", "x": "auto"},
        {"age": "numeric", "x": "auto"},
    )
    with pytest.raises(DataError, match="'genres' is not of the form id=<column> or <column>=<kind>"):
        parse_feature_columns("genres")


def test_cli_reads_feature_files(tmp_path: Path) -> None:
    log = _log_file(tmp_path)
    feats = write(tmp_path / "movies.csv", "movieId,genres,year\n1,A|B,1990\n2,B,1995\n3,C,2001\n")
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "data",
            "--data",
            str(log),
            "--item-features",
            str(feats),
            "--feature-columns",
            "id=movieId,genres=multi,year=numeric",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (
        "item features  3 of 3 items have a row" in result.output
        and "genres       multi, 3 values" in result.output
    )
    bad = write(tmp_path / "bad.csv", "movieId,year\n1,1990\n1,1991\n")
    result = runner.invoke(app, ["data", "--data", str(log), "--item-features", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "bad.csv: line 3: ID '1' already has a row (line 2)" in result.output
    result = runner.invoke(app, ["data", "--data", str(log), "--feature-columns", "id=movieId"])
    assert (
        result.exit_code == 2
        and "--feature-columns needs --item-features or --user-features" in result.output
    )
