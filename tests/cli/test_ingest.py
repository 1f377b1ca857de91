"""``attnrec ingest``: a file or a Parquet directory of events into a history store, checked first."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data.schema import DataSource
from attnrec.recommend import Recommender
from attnrec.store import SqliteStore
from synthetic_logs import ring_log

runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["ingest", *args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = ring_log(60, 20, 0, source=DataSource("ring", sha256="0" * 64))
    rec = Recommender("pop").fit(log, progress=False)
    return rec.save(tmp_path_factory.mktemp("ingest") / "pop")


def test_a_csv_of_events_is_stored_with_its_fields(tmp_path: Path, model_dir: Path) -> None:
    csv = tmp_path / "events.csv"
    csv.write_text(
        "user,item,timestamp,event,rating\n"
        "u1,i3,1700000000,view,4\n"
        "u1,i4,1700000100,buy,5\n"
        "u2,brand-new,1700000050,view,3\n"
    )
    code, out = run(str(csv), "--store", str(tmp_path / "e.db"), "--model", str(model_dir))
    assert code == 0, out
    assert "stored 3 events of 2 users" in out and "1 events are for items the model does not know" in out
    frame = SqliteStore(tmp_path / "e.db").export()
    assert frame.values.tolist() == [
        ["u1", "i3", 1700000000, "view", 4.0],
        ["u1", "i4", 1700000100, "buy", 5.0],
        ["u2", "brand-new", 1700000050, "view", 3.0],
    ]


def test_a_parquet_directory_is_read_like_train_data(tmp_path: Path) -> None:
    d = tmp_path / "parts"
    d.mkdir()
    pd.DataFrame({"user_id": ["a", "a"], "item_id": [1, 2], "ts": [10, 20]}).to_parquet(d / "part-0.parquet")
    pd.DataFrame({"user_id": ["b"], "item_id": [3], "ts": [5]}).to_parquet(d / "part-1.parquet")
    code, out = run(str(d), "--store", str(tmp_path / "e.db"), "--columns", "timestamp=ts")
    assert code == 0, out
    frame = SqliteStore(tmp_path / "e.db").export()
    assert frame[["user", "item", "timestamp"]].values.tolist() == [
        ["a", "1", 10],
        ["a", "2", 20],
        ["b", "3", 5],
    ]


def test_a_parquet_directory_reads_text_dates_with_the_time_format(tmp_path: Path) -> None:
    d = tmp_path / "parts"
    d.mkdir()
    pd.DataFrame({"user_id": ["a", "a"], "item_id": [1, 2], "ts": ["03/04/2020", "05/04/2020"]}).to_parquet(
        d / "part-0.parquet"
    )
    code, out = run(str(d), "--store", str(tmp_path / "e.db"), "--columns", "timestamp=ts")
    assert code == 2 and "--time-format" in out  # dd/mm or mm/dd: ambiguous without it
    code, out = run(
        str(d), "--store", str(tmp_path / "e.db"), "--columns", "timestamp=ts", "--time-format", "dayfirst"
    )
    assert code == 0, out
    assert SqliteStore(tmp_path / "e.db").export()["timestamp"].tolist() == [1585872000, 1586044800]


@pytest.mark.parametrize(
    "flag",
    [["--format", "csv"], ["--titles", "t.txt"], ["--item-features", "f.csv"], ["--feature-columns", "id=x"]],
)
def test_options_a_parquet_directory_does_not_read_are_refused(tmp_path: Path, flag: list[str]) -> None:
    d = tmp_path / "parts"
    d.mkdir()
    pd.DataFrame({"user_id": ["a"], "item_id": [1]}).to_parquet(d / "part-0.parquet")
    code, out = run(str(d), "--store", str(tmp_path / "e.db"), *flag)
    assert code == 2 and "a directory is read as Parquet files of events" in out and f"{flag[0]}" in out
    assert not (tmp_path / "e.db").exists() or SqliteStore(tmp_path / "e.db").count() == 0


def test_a_bad_row_stops_the_ingest_before_anything_is_stored(tmp_path: Path) -> None:
    csv = tmp_path / "bad.csv"
    csv.write_text("user,item,timestamp\nu1,i1,10\nu1,,20\n")
    code, out = run(str(csv), "--store", str(tmp_path / "e.db"))
    assert code != 0 and "line 3" in out and "missing item" in out
    assert "Traceback" not in out
    assert SqliteStore(tmp_path / "e.db").count() == 0


def test_a_file_without_timestamps_is_stamped_with_the_ingest_time(tmp_path: Path) -> None:
    csv = tmp_path / "pairs.csv"
    csv.write_text("user,item\nu1,i1\nu1,i2\n")
    code, out = run(str(csv), "--store", str(tmp_path / "e.db"))
    assert code == 0 and "no timestamp column" in out
    assert SqliteStore(tmp_path / "e.db").recent(["u1"], 5)["u1"].items == ["i1", "i2"]  # the log's order


def test_a_store_that_cannot_be_reached_is_one_line(tmp_path: Path) -> None:
    """A Redis server that is not there once ended the command in a traceback."""
    from redis_server import free_port

    csv = tmp_path / "events.csv"
    csv.write_text("user,item,timestamp\nu1,i1,10\n")
    result = runner.invoke(app, ["ingest", str(csv), "--store", f"redis://127.0.0.1:{free_port()}"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.startswith("error: Redis at redis://127.0.0.1") and result.output.count("\n") == 1
