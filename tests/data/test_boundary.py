"""The one boundary for IDs and times (attnrec.data.boundary): every silent case that once passed.

Each case is checked where users meet it: the Python entry points (from_columns, from_frame),
the CLI's table reader (load_dataset of a file, the ``attnrec`` command) and the streaming
Parquet reader. Every failure is a DataError of one line naming the row and the column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data import from_columns, load_dataset
from attnrec.data.boundary import Origin, datetime_seconds, id_column, time_column
from attnrec.data.schema import DataError, IdMap, Interactions
from attnrec.data.stream import read_parquet_stream

JAN_1_2020 = 1_577_836_800.0
DAY = 86_400.0


def _one_line(e: pytest.ExceptionInfo[DataError]) -> str:
    message = str(e.value)
    assert "\n" not in message
    return message


# -- integral float IDs ----------------------------------------------------------------------------
def test_integral_float_ids_become_integer_text_in_python() -> None:
    data = from_columns(
        [1.0, 1.0, 2.0], np.array([10.0, 11.0, 10.0]), item_titles={"10": "Ten", 11: "Eleven"}
    )
    assert data.users.to_list() == ["1", "2"]
    assert data.items.to_list() == ["10", "11"]
    assert data.item_titles == {"10": "Ten", "11": "Eleven"}


def test_non_integral_float_ids_keep_their_decimals() -> None:
    data = from_columns([1, 2], [1.5, 2.0])
    assert data.items.to_list() == ["1.5", "2"]


def test_float_written_ids_in_a_csv_match_a_title_file(tmp_path: Path) -> None:
    """A table written from a float column ("1.0") and a title file keyed "1": --titles must match."""
    log = tmp_path / "log.csv"
    log.write_text("user,item,timestamp\n1.0,10.0,1\n1.0,11.0,2\n2.0,10.0,3\n")
    titles = tmp_path / "titles.tsv"
    titles.write_text("10\tTen\n11\tEleven\n")
    data = load_dataset(log, titles=titles)
    assert data.users.to_list() == ["1", "2"] and data.items.to_list() == ["10", "11"]
    assert data.item_titles == {"10": "Ten", "11": "Eleven"}


def test_id_maps_find_an_id_written_as_a_float() -> None:
    items = IdMap(np.array(["1", "2"], dtype=object), offset=1)
    assert items.get(2.0) == 2 and 1.0 in items and items.get("2.0") == 2
    assert items.to_internal([np.float64(1.0)]).tolist() == [1]
    old = IdMap(np.array(["1.0"], dtype=object))  # a log read before the boundary: found as written
    assert old.get("1.0") == 0 and old.get(1.0) == 0


# -- missing IDs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, None, "", "  "])
def test_a_missing_item_is_an_error_naming_row_and_column_in_python(bad: object) -> None:
    with pytest.raises(DataError) as e:
        from_columns(["a", "b", "c"], ["x", bad, "y"])
    assert "row 2" in _one_line(e) and "missing item" in str(e.value) and "'items'" in str(e.value)


@pytest.mark.parametrize(
    ("bad", "kind"), [([1], "list"), (True, "bool"), (b"x", "bytes"), ({"a": 1}, "dict"), ((1, 2), "tuple")]
)
def test_a_container_boolean_or_bytes_is_not_an_id_in_a_frame(bad: object, kind: str) -> None:
    """A list-valued user column was read as the users "[1]", "[2]": the same rule as a request's
    ``user=[1]`` now refuses it, naming the row."""
    df = pd.DataFrame({"user": ["u1", bad, "u2"], "item": [1, 2, 3]})
    with pytest.raises(DataError) as e:
        Interactions.from_frame(df)
    assert _one_line(e).startswith(
        f"DataFrame: row 2: user {kind} "
    ) and "is not an ID (column 'user')" in str(e.value)


def test_a_list_column_in_parquet_is_not_read_as_ids(tmp_path: Path) -> None:
    path = tmp_path / "lists.parquet"
    pq.write_table(pa.table({"user_id": [[1], [2]], "item_id": [1, 2]}), path)
    with pytest.raises(DataError, match="row 1: user ndarray .* is not an ID"):
        load_dataset(str(path))


def test_requests_and_columns_share_one_rule_for_an_id() -> None:
    from attnrec.data.boundary import is_id
    from attnrec.recommend.requests import check_id

    for value in ("a", 7, np.int64(7), 1.5, 2.0):
        assert is_id(value) and check_id("user", value) == value
    for value in (None, np.nan, "", " ", True, np.bool_(False), b"x", [1], {1}, {"a": 1}, np.array([1])):
        assert not is_id(value)
        with pytest.raises(ValueError, match="user must be an ID"):
            check_id("user", value)


def test_a_nan_item_in_a_frame_names_the_frame_column() -> None:
    df = pd.DataFrame({"user_id": [1, 1, 2], "movieId": [10.0, np.nan, 12.0]})
    with pytest.raises(DataError, match=r"DataFrame: row 2: missing item \(column 'movieId'\)"):
        Interactions.from_frame(df)


def test_a_nan_float_id_in_parquet_is_an_error_in_the_stream_reader(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    items = pa.array([10.0, float("nan"), 12.0], from_pandas=False)  # a real NaN, not a null
    pq.write_table(pa.table({"user": ["a", "a", "b"], "item": items}), path)
    with pytest.raises(DataError, match=r"row 2: missing item"):
        read_parquet_stream(path)


def test_float_text_ids_in_parquet_become_integer_text_in_the_stream_reader(tmp_path: Path) -> None:
    path = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user": ["1.0", "1.0", "2.0"], "item": ["10.0", "11", "10"]}), path)
    data = read_parquet_stream(path)
    assert data.users.to_list() == ["1", "2"] and data.items.to_list() == ["10", "11"]


# -- datetime64 of any unit ------------------------------------------------------------------------
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_datetime64_of_any_unit_becomes_seconds_in_python(unit: str) -> None:
    stamps = np.array(["2020-01-02", "2020-01-01"], dtype=f"datetime64[{unit}]")
    data = from_columns(["u", "u"], ["a", "b"], stamps)
    assert data.timestamp is not None
    assert data.timestamp.tolist() == [JAN_1_2020, JAN_1_2020 + DAY]
    assert data.items.to_external(data.item) == ["b", "a"]  # ordered by the real times


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_datetime64_of_any_unit_becomes_seconds_in_a_frame(unit: str) -> None:
    df = pd.DataFrame(
        {
            "user": ["u", "u"],
            "item": ["a", "b"],
            "ts": pd.Series(["2020-01-01", "2020-01-02"]).astype(f"datetime64[{unit}]"),
        }
    )
    data = Interactions.from_frame(df, timestamp="ts")
    assert data.timestamp is not None and data.timestamp.tolist() == [JAN_1_2020, JAN_1_2020 + DAY]


def test_time_zone_aware_datetimes_become_utc_seconds() -> None:
    stamps = pd.Series(pd.to_datetime(["2020-01-01 02:00"]).tz_localize("Europe/Berlin"))  # 01:00 UTC
    assert datetime_seconds(stamps).tolist() == [JAN_1_2020 + 3600]
    data = from_columns(["u"], ["a"], stamps)
    assert data.timestamp is not None and data.timestamp.tolist() == [JAN_1_2020 + 3600]


@pytest.mark.parametrize("unit", ["ms", "us"])
def test_datetime64_in_parquet_becomes_seconds_in_both_readers(tmp_path: Path, unit: str) -> None:
    path = tmp_path / "log.parquet"
    ts = pa.array([0, 86_400 * 10 ** (3 if unit == "ms" else 6)], pa.timestamp(unit))
    pq.write_table(pa.table({"user": ["u", "u"], "item": ["a", "b"], "timestamp": ts}), path)
    for data in (load_dataset(path), read_parquet_stream(path)):
        assert data.timestamp is not None and data.timestamp.tolist() == [0.0, DAY]


# -- text dates ------------------------------------------------------------------------------------
def test_iso_strings_are_parsed_in_python() -> None:
    data = from_columns(["u", "u"], ["a", "b"], ["2020-01-02T00:00:00Z", "2020-01-01 00:00:00+00:00"])
    assert data.timestamp is not None and data.timestamp.tolist() == [JAN_1_2020, JAN_1_2020 + DAY]


def test_an_unparseable_time_is_a_data_error_in_python() -> None:
    with pytest.raises(DataError, match=r"row 2: timestamp 'soon' is neither a number nor a date"):
        from_columns(["u", "u"], ["a", "b"], ["2020-01-02", "soon"])


def test_day_month_dates_are_refused_without_a_time_format(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    path.write_text("user,item,date\nu,a,02/01/2020\nu,b,13/01/2020\n")
    with pytest.raises(DataError) as e:
        load_dataset(path)
    assert "line 2" in _one_line(e) and "'02/01/2020'" in str(e.value) and "--time-format" in str(e.value)
    with pytest.raises(DataError, match="could be day/month/year or month/day/year"):
        from_columns(["u"], ["a"], ["02/01/2020"])


@pytest.mark.parametrize(
    ("time_format", "order"),
    [("dayfirst", ["a", "b"]), ("%d/%m/%Y", ["a", "b"]), ("monthfirst", None)],
)
def test_a_time_format_says_which_order(tmp_path: Path, time_format: str, order: list[str] | None) -> None:
    path = tmp_path / "log.csv"
    path.write_text("user,item,date\nu,b,13/01/2020\nu,a,02/01/2020\n")  # a: 2 January, b: 13 January
    if order is None:  # month-first: 13 is no month
        with pytest.raises(DataError, match=r"line 2: timestamp '13/01/2020' is not month/day/year"):
            load_dataset(path, time_format=time_format)
        return
    data = load_dataset(path, time_format=time_format)
    assert data.items.to_external(data.item) == order
    assert data.timestamp is not None and data.timestamp.tolist() == [JAN_1_2020 + DAY, JAN_1_2020 + 12 * DAY]


def test_month_first_and_two_digit_years() -> None:
    data = from_columns(["u", "u"], ["a", "b"], ["01/02/20 10:30", "12/31/99"], time_format="monthfirst")
    assert data.timestamp is not None
    expected = [
        pd.Timestamp("1999-12-31", tz="UTC").timestamp(),
        pd.Timestamp("2020-01-02 10:30", tz="UTC").timestamp(),
    ]
    assert data.timestamp.tolist() == expected


def test_a_time_format_is_checked() -> None:
    with pytest.raises(DataError, match="time format 'european'"):
        from_columns(["u"], ["a"], ["02/01/2020"], time_format="european")
    with pytest.raises(DataError, match="holds numbers, not text dates"):
        from_columns(["u"], ["a"], [1.0], time_format="dayfirst")
    with pytest.raises(DataError, match="time_format applies to"):
        load_dataset("demo", time_format="dayfirst")


def test_a_stray_non_finite_time_is_an_error() -> None:
    with pytest.raises(DataError, match=r"row 2: timestamp inf is not a time"):
        from_columns(["u", "u"], ["a", "b"], [1.0, np.inf])


def test_an_infinite_rating_is_an_error(tmp_path: Path) -> None:
    """A rating ``inf`` (a float, or "inf" in a file) was read as a number and made NaN losses."""
    frame = pd.DataFrame({"user": [1, 1], "item": [1, 2], "rating": [4.0, np.inf]})
    with pytest.raises(DataError, match="DataFrame: row 2: rating inf is not a finite number"):
        Interactions.from_frame(frame)
    (tmp_path / "r.csv").write_text("user,item,rating\n1,1,4\n1,2,-inf\n")
    with pytest.raises(DataError, match="r.csv: line 3: rating -inf is not a finite number"):
        load_dataset(str(tmp_path / "r.csv"))


def test_two_columns_of_one_name_are_refused_not_one_picked() -> None:
    """A frame with two ``item`` columns ended in pandas' "Length mismatch"; with ``Item`` and ``item`` the
    last one was read without a word."""
    for labels in (["user", "item", "item"], ["user", "Item", "item"]):
        frame = pd.DataFrame([[1, 2, 3]], columns=labels)
        with pytest.raises(DataError, match="DataFrame: 2 columns are named '(I|i)tem'; which is the item?"):
            Interactions.from_frame(frame)
    with pytest.raises(DataError, match="2 columns are named 'item'"):
        Interactions.from_frame(pd.DataFrame([[1, 2, 3]], columns=["user", "item", "item"]), item=1)


def test_the_cli_refuses_day_month_dates_with_exit_2_and_reads_them_with_time_format(tmp_path: Path) -> None:
    path = tmp_path / "log.csv"
    rows = "".join(f"u{u},i{i},{1 + i:02d}/0{1 + u}/2020\n" for u in range(3) for i in range(6))
    path.write_text("user,item,date\n" + rows)
    refused = CliRunner().invoke(app, ["data", "--data", str(path)])
    assert refused.exit_code == 2
    assert "could be day/month/year" in refused.output and "Traceback" not in refused.output
    read = CliRunner().invoke(app, ["data", "--data", str(path), "--time-format", "dayfirst"])
    assert read.exit_code == 0, read.output


def test_the_boundary_functions_name_the_origin() -> None:
    origin = Origin("log.tsv", lambda row: f"line {row + 7}")
    with pytest.raises(DataError, match=r"^log\.tsv: line 8: missing user \(column 'uid'\)$"):
        id_column(["a", None], "user", "uid", origin)
    with pytest.raises(DataError, match=r"^log\.tsv: line 7: timestamp 'x' is neither"):
        time_column(["x"], "ts", origin)


@pytest.mark.parametrize(
    "column",
    [
        pd.Series([1, 2, 1], dtype="Int64"),
        pd.Series(["1", "2", "1"], dtype="category"),
        pd.Series(["1", "2", "1"], dtype="string[pyarrow]"),
        pd.Series([1.0, 2.0, 1.0], dtype="Float64"),
        pa.chunked_array([["1", "2"], ["1"]]),
    ],
    ids=["Int64", "category", "string[pyarrow]", "Float64", "pyarrow"],
)
def test_id_columns_of_every_pandas_and_arrow_kind(column: object) -> None:
    assert id_column(column, "user", "u", Origin("x")).tolist() == ["1", "2", "1"]  # type: ignore[arg-type]


def test_a_missing_value_in_a_nullable_column_is_named() -> None:
    with pytest.raises(DataError, match=r"row 3: missing user"):
        id_column(pd.Series([1, 2, None], dtype="Int64"), "user", "u", Origin("x"))
