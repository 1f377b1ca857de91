"""``attnrec batch``: the command writes what the API answers, and bad input is one error line (exit 2)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data.schema import DataSource
from attnrec.recommend import Recommendation, Recommender
from synthetic_logs import ring_log

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["batch", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Recommender]:
    """A saved tiny SASRec and the ``user item`` file it was trained on."""
    d = tmp_path_factory.mktemp("batch")
    log = ring_log(90, 30, 2, source=DataSource("ring"))
    rec = Recommender(
        "sasrec",
        {"hidden": 8, "n_layers": 1, "max_len": 12},
        {"max_epochs": 1, "batch_size": 64, "device": "cpu"},
    ).fit(log, progress=False)
    rec.save(d / "model")
    seqs = log.sequences()
    lines = [
        f"{log.users.external[u]} {i}" for u in range(log.n_users) for i in log.items.to_external(seqs[u])
    ]
    (d / "pairs.txt").write_text("\n".join(lines) + "\n")
    return d / "model", d / "pairs.txt", Recommender.load(d / "model", device="cpu")


def test_batch_over_a_dataset_equals_recommend(setup: tuple[Path, Path, Recommender], tmp_path: Path) -> None:
    model, pairs, rec = setup
    out = tmp_path / "recs.parquet"
    code, output = run(
        "--model",
        str(model),
        "--data",
        str(pairs),
        "--out",
        str(out),
        "-k",
        "5",
        "--chunk-users",
        "16",
        "--no-progress",
    )
    assert code == 0, output
    assert f"wrote {out}: top 5 for 90 users (wide)" in output and "peak RSS" in output
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == 90
    for row in rows[::17]:
        want = rec.recommend(user=row["user"], k=5)
        assert row["items"] == want.items
        np.testing.assert_allclose(row["scores"], want.scores, rtol=1e-5, atol=1e-6)


def test_batch_over_a_user_file_with_filters(setup: tuple[Path, Path, Recommender], tmp_path: Path) -> None:
    model, _, rec = setup
    users = tmp_path / "users.csv"
    users.write_text('user,history\nu1,\nghost,\n,"i3 i4"\n')
    out = tmp_path / "long.parquet"
    code, output = run(
        "--model",
        str(model),
        "--users",
        str(users),
        "--out",
        str(out),
        "-k",
        "3",
        "--layout",
        "long",
        "--include-seen",
        "--exclude",
        "i5,unknown-item",
        "--no-progress",
    )
    assert code == 0, output
    assert "unknown-item" in output and "1 not personalised" in output
    rows = pq.read_table(out).to_pylist()
    assert [(r["user"], r["rank"]) for r in rows] == [
        ("u1", 1),
        ("u1", 2),
        ("u1", 3),
        ("ghost", 1),
        ("ghost", 2),
        ("ghost", 3),
        (None, 1),
        (None, 2),
        (None, 3),
    ]
    want = rec.recommend(history=["i3", "i4"], k=3, exclude_seen=False, exclude=["i5", "unknown-item"])
    assert [r["item"] for r in rows[6:]] == want.items
    assert rows[3]["fallback"] == "unknown user 'ghost': most popular items"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give either --data DATA (every user of a dataset) or --users FILE"),
        (
            ["--data", "demo", "--users", "u.csv"],
            "give either --data DATA (every user of a dataset) or --users FILE",
        ),
        (["--users", "{tmp}/missing.csv"], "{tmp}/missing.csv: file not found"),
        (["--users", "{tmp}/bad.jsonl"], "{tmp}/bad.jsonl line 2: no user and no history"),
        (
            ["--users", "{tmp}/ok.csv", "--include", "nope"],
            "include: none of its 1 item(s) is known to the model",
        ),
    ],
)
def test_bad_input_is_one_error_line(
    setup: tuple[Path, Path, Recommender], tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "bad.jsonl").write_text('{"user": "u1"}\n{"history": null}\n')
    (tmp_path / "ok.csv").write_text("user\nu1\n")
    code, output = run(
        "--model",
        str(setup[0]),
        "--out",
        str(tmp_path / "o.parquet"),
        *(a.format(tmp=tmp_path) for a in args),
    )
    assert code == 2, output
    assert output.strip() == f"error: {message.format(tmp=tmp_path)}"  # one line, naming the file


def _crashing_run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``attnrec batch ARGS`` with a scorer that fails on its second chunk (a crash after one part)."""
    real, calls = Recommender.recommend_many, []

    def flaky(self: Recommender, requests: list[dict[str, object]]) -> list[Recommendation]:
        if calls:
            raise RuntimeError("killed")
        calls.append(len(requests))
        return real(self, requests)

    with monkeypatch.context() as m:
        m.setattr(Recommender, "recommend_many", flaky)
        result = runner.invoke(app, ["batch", *args])
    assert isinstance(result.exception, RuntimeError) and calls == [16]


def test_a_resume_with_other_arguments_needs_no_resume(
    setup: tuple[Path, Path, Recommender], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, pairs, _ = setup
    base = [
        "--model",
        str(model),
        "--data",
        str(pairs),
        "--out",
        str(tmp_path / "recs.parquet"),
        "--chunk-users",
        "16",
        "--no-progress",
    ]
    _crashing_run([*base, "-k", "4"], monkeypatch)
    code, output = run(*base, "-k", "5")
    assert code == 2
    assert output.strip() == (
        "error: " + str(tmp_path / "recs.parquet.parts") + " holds an unfinished run with "
        "other arguments (k: 4 -> 5); re-run with the same arguments to resume it, or start "
        "afresh (--no-resume)"
    )
    code, output = run(*base, "-k", "4")
    assert code == 0 and "1 of 6 chunks resumed" in output
    _crashing_run([*base, "-k", "4"], monkeypatch)
    code, output = run(*base, "-k", "5", "--no-resume")
    assert code == 0 and "resumed" not in output


@pytest.mark.slow  # starts a second Python process (torch import)
def test_a_killed_process_resumes(setup: tuple[Path, Path, Recommender], tmp_path: Path) -> None:
    """SIGKILL a real ``attnrec batch`` once its first parts are on disk; the re-run finishes the rest
    and its file equals one written in a single run."""
    model, pairs, _ = setup
    big = tmp_path / "users.jsonl"  # many rows of small chunks, so the process is still running when killed
    big.write_text("".join(f'{{"user": "u{u % 90}"}}\n' for u in range(400)))
    out, whole = tmp_path / "recs.parquet", tmp_path / "whole.parquet"
    args = ["--model", str(model), "--users", str(big), "-k", "3", "--chunk-users", "8", "--no-progress"]
    env = {"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnrec", "batch", *args, "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    parts = tmp_path / "recs.parquet.parts"
    deadline = time.monotonic() + 120
    while len(list(parts.glob("part-*.parquet"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    code, output = run(*args, "--out", str(out))
    assert code == 0 and "chunks resumed" in output
    assert run(*args, "--out", str(whole))[0] == 0
    assert pq.read_table(out).equals(pq.read_table(whole))
