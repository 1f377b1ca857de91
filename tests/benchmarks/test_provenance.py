"""The commit a benchmark result records."""

import re
from pathlib import Path

import pytest
from bench_scripts import load

provenance = load("provenance")


def test_records_the_checked_out_commit() -> None:
    if not (provenance.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert re.fullmatch(r"[0-9a-f]{40}", provenance.git_sha())


def test_a_tree_without_git_takes_the_commit_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    monkeypatch.setenv("ATTNREC_GIT_SHA", "abc1234")
    assert provenance.git_sha() == "abc1234"
    monkeypatch.delenv("ATTNREC_GIT_SHA")
    assert provenance.git_sha() == "unknown"


def test_the_environment_wins_over_a_copied_git(monkeypatch: pytest.MonkeyPatch) -> None:
    # a remote machine's copy of the tree can carry a .git at an older commit than its files
    if not (provenance.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.setenv("ATTNREC_GIT_SHA", "0123abc")
    assert provenance.git_sha() == "0123abc"
