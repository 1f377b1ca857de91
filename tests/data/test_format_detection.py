"""Format detection on whole files: a line that breaks the detected format is named with its line
number, an explicit format reads every ID as text, and text or mixed ID columns still read."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnrec.data import load_dataset
from attnrec.data.schema import DataError


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="latin-1")
    return path


def _int_pairs(n: int) -> list[str]:
    return [f"{u % 7} {10 + u % 13}" for u in range(n)]


@pytest.mark.parametrize(
    ("odd", "at", "message"),
    [
        ("hello world", 51, r"ints\.txt:51: 'hello' is not an integer ID like the other user IDs"),
        ("12 abc", 51, r"ints\.txt:51: 'abc' is not an integer ID like the other item IDs"),
        ("hello world", 500, r"ints\.txt:500: 'hello' is not an integer ID"),  # beyond the detection's head
        ("3 11 12 13 14 15 16 17", 51, r"ints\.txt:51: 8 fields where the other lines are 'user item' pairs"),
    ],
)
def test_a_line_that_breaks_the_detected_format_is_named(
    tmp_path: Path, odd: str, at: int, message: str
) -> None:
    lines = _int_pairs(600)
    lines[at - 1] = odd
    p = write(tmp_path / "ints.txt", "\n".join(lines) + "\n")
    with pytest.raises(DataError, match=message):
        load_dataset(p)


def test_an_explicit_format_reads_every_id_as_text(tmp_path: Path) -> None:
    lines = _int_pairs(100)
    lines[50] = "hello world"
    p = write(tmp_path / "ints.txt", "\n".join(lines) + "\n")
    data = load_dataset(p, format="pairs")
    assert "hello" in data.users.to_list() and "world" in data.items.to_list() and len(data) == 100


def test_a_lone_long_first_line_does_not_switch_pairs_to_user_lines(tmp_path: Path) -> None:
    p = write(tmp_path / "ints.txt", "\n".join(["1 10 11 12 13"] + _int_pairs(60)) + "\n")
    with pytest.raises(DataError, match=r"ints\.txt:1: 5 fields where the other lines are 'user item' pairs"):
        load_dataset(p)
    assert load_dataset(p, format="user-lines").source.format == "user-lines"


def test_text_and_mixed_id_columns_still_read(tmp_path: Path) -> None:
    text = write(tmp_path / "text.txt", "".join(f"u{i % 5} i{i}\n" for i in range(40)))
    assert load_dataset(text).source.format == "pairs"
    # Amazon-style item IDs: all-digit ISBNs beside B0... ASINs, about half each: a text column
    mixed = write(
        tmp_path / "mixed.txt",
        "".join(f"{i % 5} {'0' * 9 + str(i % 10) if i % 2 else f'B00X{i}'}\n" for i in range(40)),
    )
    assert len(load_dataset(mixed)) == 40
    users = write(tmp_path / "users.txt", "".join(f"{i} {i + 1} {i + 2} {i + 3}\n" for i in range(30)))
    assert load_dataset(users).source.format == "user-lines"
