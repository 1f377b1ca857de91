"""Batch scoring to Parquet: answers equal ``recommend``, filters, input files, resume after a crash.

A tiny SASRec on the ring log (a few seconds to train) is scored in small chunks, so every run has
several parts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attnrec.data.schema import DataError, DataSource, Interactions
from attnrec.recommend import Recommender
from attnrec.recommend.batch_input import USER, Request
from attnrec.recommend.batch_scoring import BatchError, read_batch_metadata, score_to_parquet
from synthetic_logs import ring_log

CHUNK = 32  # 150 users: 5 chunks, the last one short


def _fit(log: Interactions, seed: int = 0) -> Recommender:
    rec = Recommender(
        "sasrec",
        {"hidden": 16, "n_layers": 1, "max_len": 20, "dropout": 0.1},
        {"max_epochs": 2, "batch_size": 64, "lr": 5e-3, "device": "cpu", "seed": seed},
    )
    return rec.fit(log, progress=False)


@pytest.fixture(scope="module")
def log() -> Interactions:
    titles = {f"i{i}": f"Item {i}" for i in range(0, 40, 2)}
    return ring_log(150, 40, 0, source=DataSource("ring", sha256="0" * 64), item_titles=titles)


@pytest.fixture(scope="module")
def rec(log: Interactions) -> Recommender:
    return _fit(log)


def _rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()  # type: ignore[no-any-return]


def _same_answer(row: dict[str, Any], rec: Recommender, **request: Any) -> None:
    """The row of a wide output equals ``rec.recommend(**request)``: items, titles, fallback, scores."""
    want = rec.recommend(**request)
    assert row["items"] == want.items
    assert row.get("titles", [None] * len(want.items)) == want.titles  # no titles column without titles
    assert row["fallback"] == want.fallback
    # recommend scores one row alone: the batched matrix product may round the last bit differently
    np.testing.assert_allclose(row["scores"], want.scores, rtol=1e-5, atol=1e-6)


# -- answers -----------------------------------------------------------------------------------------
def test_every_user_of_a_log_gets_what_recommend_gives(
    rec: Recommender, log: Interactions, tmp_path: Path
) -> None:
    out = tmp_path / "recs.parquet"
    res = score_to_parquet(rec, log, out, k=10, chunk_users=CHUNK)
    assert (res.users, res.chunks, res.resumed_chunks, res.fallbacks) == (150, 5, 0, 0)
    rows = _rows(out)
    assert [r["user"] for r in rows] == log.users.to_list()
    for u in np.random.default_rng(0).choice(150, 12, replace=False):
        _same_answer(rows[u], rec, user=log.users.to_list()[u], k=10)
    # each chunk is exactly recommend_many's answer to that chunk, scores bit for bit (float32)
    first = rec.recommend_many([{"user": u, "k": 10} for u in log.users.to_list()[:CHUNK]])
    assert [r["scores"] for r in rows[:CHUNK]] == [np.float32(a.scores).tolist() for a in first]
    assert not (out.parent / "recs.parquet.parts").exists()


def test_the_output_records_the_run(rec: Recommender, log: Interactions, tmp_path: Path) -> None:
    out = tmp_path / "recs.parquet"
    score_to_parquet(rec, log, out, k=7, chunk_users=CHUNK, exclude=["i3", "i1"], model_label="runs/x")
    meta = read_batch_metadata(out)
    assert meta["k"] == 7 and meta["exclude"] == ["i1", "i3"] and meta["include"] is None
    assert meta["exclude_seen"] is True and meta["users"] == 150 and meta["model_label"] == "runs/x"
    assert meta["data"]["sha256"] == "0" * 64 and len(meta["model_sha256"]) == 64 and meta["created"]
    schema = pq.read_schema(out)
    assert schema.field("scores").type == pa.list_(pa.float32())
    assert schema.names == ["user", "items", "scores", "titles", "fallback"]


def test_long_layout_holds_the_same_answers(rec: Recommender, log: Interactions, tmp_path: Path) -> None:
    wide = _rows(score_to_parquet(rec, log, tmp_path / "w.parquet", k=5, chunk_users=CHUNK).path)
    long = _rows(
        score_to_parquet(rec, log, tmp_path / "l.parquet", k=5, chunk_users=CHUNK, layout="long").path
    )
    assert len(long) == 5 * 150
    assert [r["rank"] for r in long[:6]] == [1, 2, 3, 4, 5, 1]
    regrouped: dict[str, list[str]] = {}
    for r in long:
        regrouped.setdefault(r["user"], []).append(r["item"])
    assert regrouped == {r["user"]: r["items"] for r in wide}
    assert [r["score"] for r in long[:5]] == wide[0]["scores"]


# -- filters -----------------------------------------------------------------------------------------
def test_filters_are_those_of_recommend(rec: Recommender, log: Interactions, tmp_path: Path) -> None:
    users = log.users.to_list()
    seqs = log.sequences()
    seen = score_to_parquet(rec, log, tmp_path / "seen.parquet", k=10, chunk_users=CHUNK, exclude_seen=False)
    excluded = _rows(score_to_parquet(rec, log, tmp_path / "ex.parquet", k=10, chunk_users=CHUNK).path)
    seen_rows = _rows(seen.path)
    history_items = [set(log.items.to_external(seqs[u])) for u in range(150)]
    assert all(not set(r["items"]) & h for r, h in zip(excluded, history_items, strict=True))
    assert any(set(r["items"]) & h for r, h in zip(seen_rows, history_items, strict=True))
    include = [f"i{i}" for i in range(0, 40, 3)]
    inc = _rows(
        score_to_parquet(
            rec, log, tmp_path / "inc.parquet", k=4, chunk_users=CHUNK, include=include, exclude=["i0"]
        ).path
    )
    assert all(set(r["items"]) <= set(include) - {"i0"} for r in inc)
    for u in (0, 77, 149):
        _same_answer(seen_rows[u], rec, user=users[u], k=10, exclude_seen=False)
        _same_answer(inc[u], rec, user=users[u], k=4, include=include, exclude=["i0"])


def test_an_include_list_of_unknown_items_only_is_refused(
    rec: Recommender, log: Interactions, tmp_path: Path
) -> None:
    with pytest.raises(BatchError, match="include: none of its 2 item"):
        score_to_parquet(rec, log, tmp_path / "x.parquet", include=["nope", "nada"])


# -- input files -------------------------------------------------------------------------------------
REQUESTS: list[Request] = [
    {"user": "u3"},  # known user: its stored history
    {"user": "stranger"},  # unknown user, no history: popularity with a fallback note
    {"history": ["i5", "i6", "i7"]},  # ad-hoc history, no user
    {"user": "newcomer", "history": ["i9", "i10"]},  # unknown user scored from its history
    {"user": "u4", "history": ["i1", "no-such-item", "i2"]},  # known user, history with an unknown item
    {"history": ["no-such-item"]},  # nothing known: popularity
]


def _write(path: Path, requests: list[Request]) -> Path:
    fmt = path.suffix
    if fmt == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n\n" for r in requests))  # blank lines are skipped
    elif fmt == ".csv":
        lines = [
            "user,history",
            *(f'{r.get("user", "")},"{" ".join(r.get("history", []))}"' for r in requests),
        ]
        path.write_text("\n".join(lines) + "\n")
    else:
        table = pa.table(
            {"user": [r.get("user") for r in requests], "history": [r.get("history") for r in requests]}
        )
        pq.write_table(table, path, row_group_size=4)  # several row groups, not aligned with the chunks
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_file_of_users_and_histories(rec: Recommender, tmp_path: Path, suffix: str) -> None:
    path = _write(tmp_path / f"users{suffix}", REQUESTS)
    res = score_to_parquet(rec, path, tmp_path / "out.parquet", k=6, chunk_users=4)
    rows = _rows(res.path)
    assert len(rows) == len(REQUESTS) and res.chunks == 2
    for row, request in zip(rows, REQUESTS, strict=True):
        assert row["user"] == request.get("user")
        _same_answer(row, rec, k=6, **request)
    assert rows[1]["fallback"] == "unknown user 'stranger': most popular items"
    assert res.fallbacks == 3  # stranger, newcomer (scored from its history), the unknown-only history
    assert read_batch_metadata(res.path)["data"]["kind"] == "file"


def test_integer_ids_in_parquet_are_read_as_text(rec: Recommender, tmp_path: Path) -> None:
    log = ring_log(20, 12, 1)
    ext = [int(i[1:]) for i in log.items.to_list()]
    int_rec = _fit(
        Interactions(
            log.user, log.item, log.users, type(log.items)(np.array([str(e) for e in ext], dtype=object), 1)
        )
    )
    path = tmp_path / "ints.parquet"
    pq.write_table(
        pa.table({"user": pa.array([7], pa.int64()), "history": pa.array([[3, 4]], pa.list_(pa.int32()))}),
        path,
    )
    row = _rows(score_to_parquet(int_rec, path, tmp_path / "o.parquet", k=3).path)[0]
    assert row["user"] == "7"
    _same_answer(row, int_rec, user="7", history=["3", "4"], k=3)


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("gap.csv", "user,history\nu1,\n,\n", r"gap.csv line 3: no user and no history"),
        (
            "cols.csv",
            "who,what\nu1,i1\n",
            r"cols.csv: needs a 'user' or a 'history' column; found 'who', 'what'",
        ),
        ("extra.csv", "user\nu1,i2\n", r"extra.csv line 2: 2 cells, the header has 1"),
        ("broken.jsonl", '{"user": "u1"}\n{"user": \n', r"broken.jsonl line 2: not valid JSON"),
        ("list.jsonl", '["u1"]\n', r"list.jsonl line 1: expected a JSON object"),
        (
            "hist.jsonl",
            '{"history": [1, {"a": 2}]}\n',
            r"hist.jsonl line 1: history must be a list of item IDs",
        ),
        ("flag.jsonl", '{"user": false}\n', r"flag.jsonl line 1: user must be a string or an integer"),
        ("users.txt", "u1\n", r"users.txt: cannot tell the format from the name"),
        ("fake.parquet", "not parquet", r"fake.parquet: not a readable Parquet file"),
    ],
)
def test_bad_input_files_are_one_clear_error(
    rec: Recommender, tmp_path: Path, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataError, match=message):
        score_to_parquet(rec, path, tmp_path / "o.parquet")
    assert not (tmp_path / "o.parquet").exists()


def test_a_parquet_history_column_of_floats_is_refused(rec: Recommender, tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"user": ["u1"], "history": [[1.5]]}), path)
    with pytest.raises(
        DataError, match=r"f.parquet: column 'history' must hold lists of strings or integers"
    ):
        score_to_parquet(rec, path, tmp_path / "o.parquet")


def test_an_empty_file_writes_an_empty_table(rec: Recommender, tmp_path: Path) -> None:
    path = tmp_path / "none.csv"
    path.write_text("user,history\n")
    res = score_to_parquet(rec, path, tmp_path / "o.parquet")
    assert res.users == 0 and pq.read_table(res.path).num_rows == 0


# -- streaming and resuming --------------------------------------------------------------------------
class CountingSource:
    """The log's users, counting the rows handed out."""

    def __init__(self, log: Interactions) -> None:
        self.users, self.pulled = log.users.to_list(), 0

    def describe(self) -> dict[str, Any]:
        return {"kind": "test", "sha256": "1" * 64}

    def n_rows(self) -> int:
        return len(self.users)

    def rows(self) -> Iterator[Request]:
        for u in self.users:
            self.pulled += 1
            yield {USER: u}


def test_users_are_read_chunk_by_chunk(
    rec: Recommender, log: Interactions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, pulled_at_call = CountingSource(log), []
    real = rec.recommend_many

    def spy(requests: list[Request]) -> Any:
        pulled_at_call.append(source.pulled)
        return real(requests)

    monkeypatch.setattr(rec, "recommend_many", spy)
    score_to_parquet(rec, source, tmp_path / "o.parquet", k=3, chunk_users=CHUNK)
    # when chunk i is scored, no more than its rows (and the one that told islice to stop) were read
    assert pulled_at_call == [32, 64, 96, 128, 150]


def _crash_after(rec: Recommender, calls: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make ``rec.recommend_many`` raise on its call number ``calls + 1``; returns the list of sizes asked."""
    real, sizes = rec.recommend_many, []

    def flaky(requests: list[Request]) -> Any:
        if len(sizes) == calls:
            raise RuntimeError("killed")
        sizes.append(len(requests))
        return real(requests)

    monkeypatch.setattr(rec, "recommend_many", flaky)
    return sizes


def test_a_killed_run_resumes_and_equals_an_uninterrupted_one(
    rec: Recommender, log: Interactions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = score_to_parquet(rec, log, tmp_path / "whole.parquet", k=8, chunk_users=CHUNK)
    out = tmp_path / "recs.parquet"
    with monkeypatch.context() as m:
        _crash_after(rec, 2, m)
        with pytest.raises(RuntimeError, match="killed"):
            score_to_parquet(rec, log, out, k=8, chunk_users=CHUNK)
    parts = tmp_path / "recs.parquet.parts"
    assert sorted(p.name for p in parts.glob("part-*")) == ["part-00000.parquet", "part-00001.parquet"]
    assert not out.exists()
    (parts / "part-00002.parquet.tmp").write_bytes(b"half a part")  # killed while writing chunk 2
    with monkeypatch.context() as m:
        sizes = _crash_after(rec, 99, m)
        res = score_to_parquet(rec, log, out, k=8, chunk_users=CHUNK)
    assert sizes == [32, 32, 22]  # only chunks 2, 3 and 4 were scored again
    assert (res.resumed_chunks, res.chunks, res.users) == (2, 5, 150)
    assert pq.read_table(out).equals(pq.read_table(whole.path))
    assert not parts.exists()


def test_a_resume_with_other_arguments_is_refused(
    rec: Recommender, log: Interactions, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "recs.parquet"
    with monkeypatch.context() as m:
        _crash_after(rec, 1, m)
        with pytest.raises(RuntimeError, match="killed"):
            score_to_parquet(rec, log, out, k=8, chunk_users=CHUNK)
    with pytest.raises(BatchError, match=r"unfinished run with other arguments \(k: 8 -> 9\).*--no-resume"):
        score_to_parquet(rec, log, out, k=9, chunk_users=CHUNK)
    with pytest.raises(BatchError, match=r"other arguments \(model_sha256: "):
        score_to_parquet(_fit(log, seed=1), log, out, k=8, chunk_users=CHUNK)
    other = ring_log(150, 40, 5, source=DataSource("ring", sha256="0" * 64))  # same file hash, other content
    with pytest.raises(BatchError, match=r"other arguments \(data.content_sha256: "):
        score_to_parquet(rec, other, out, k=8, chunk_users=CHUNK)
    with pytest.raises(BatchError, match=r"other arguments \(exclude: \[\] -> \[\"i1\"\]\)"):
        score_to_parquet(rec, log, out, k=8, chunk_users=CHUNK, exclude=["i1"])
    res = score_to_parquet(rec, log, out, k=9, chunk_users=CHUNK, resume=False)  # afresh
    assert res.resumed_chunks == 0 and read_batch_metadata(out)["k"] == 9


def _arrow_memory_while_reading(path: Path, groups: int) -> tuple[float, int]:
    """``(bytes per row group, most arrow memory held while reading)`` of a file of ``groups`` row groups."""
    from attnrec.recommend.batch_input import FileUsers

    rng = np.random.default_rng(0)
    with pq.ParquetWriter(path, pa.schema([("user", pa.string()), ("history", pa.list_(pa.string()))])) as w:
        for g in range(groups):
            hist = rng.integers(0, 10**9, (500, 40)).astype(str).tolist()  # barely compressible
            w.write_table(pa.table({"user": [f"u{g}-{i}" for i in range(500)], "history": hist}))
    before, most = pa.total_allocated_bytes(), 0
    for n, _ in enumerate(FileUsers(path).rows(), 1):
        if n % 250 == 0:
            most = max(most, pa.total_allocated_bytes() - before)
    return path.stat().st_size / groups, most


def test_reading_a_parquet_file_holds_as_much_memory_whatever_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow's pre-buffering keeps the row groups it read (up to 32 MB at a time) until the reader
    closes: memory that grows with a large file. Reading 16 row groups must hold what reading 4 does."""
    from attnrec.recommend import batch_input

    monkeypatch.setattr(batch_input, "_PARQUET_BATCH", 250)  # rows decoded at once: here half a row group
    row_group, small = _arrow_memory_while_reading(tmp_path / "small.parquet", 4)
    _, large = _arrow_memory_while_reading(tmp_path / "large.parquet", 16)
    assert large - small < 2 * row_group, (row_group, small, large)


@pytest.mark.parametrize("resume", [True, False])
def test_a_parts_folder_that_is_not_a_run_is_left_alone(
    rec: Recommender, log: Interactions, tmp_path: Path, resume: bool
) -> None:
    foreign = tmp_path / "recs.parquet.parts"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(
        BatchError, match=r"recs.parquet.parts exists and holds no batch run \(run.json missing\)"
    ):
        score_to_parquet(rec, log, tmp_path / "recs.parquet", resume=resume)
    assert (foreign / "notes.txt").read_text() == "mine"


def test_an_unfitted_model_is_refused(log: Interactions, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"sasrec: call fit\(\) or Recommender.load\(\) first"):
        score_to_parquet(Recommender("sasrec"), log, tmp_path / "recs.parquet")
