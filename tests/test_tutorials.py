"""Every tutorial runs: the fenced ``python`` code blocks of each ``docs/tutorials/*.md`` page are
executed in page order, in one namespace per page, in a fresh temporary working directory.

A block whose info string carries ``no-run`` (```` ```python no-run ````) is shown to readers but
not executed: use it only for what a test cannot do (a long training, a server left running).
A failing block is reported with its page and line, so the page is what needs fixing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"
# an opening fence (``` or more backticks) with its info string, then the body up to the same fence
_BLOCK = re.compile(r"^(?P<fence>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line, code)`` of the executed blocks of a page: fence info ``python`` without ``no-run``."""
    blocks = []
    for m in _BLOCK.finditer(text):
        words = m["info"].split()
        if words[:1] == ["python"] and "no-run" not in words:
            blocks.append((text.count("\n", 0, m.start()) + 2, m["body"]))
    return blocks


def test_python_blocks_are_found_in_order_and_no_run_blocks_are_skipped() -> None:
    page = (
        "# t\n```python\na = 1\n```\ntext\n```python no-run\nboom()\n```\n````python\nb = a + "
        "1\n````\n```bash\nls\n```\n"
    )
    assert python_blocks(page) == [(3, "a = 1\n"), (10, "b = a + 1\n")]


# Pages that are not tutorials, or whose blocks a test of their own runs with more checks.
NOT_HERE = {
    "index.md": "the section's landing page",
    "daily-batch.md": "tests/cli/test_daily_batch_tutorial.py runs it and checks its figures",
}
PAGES = sorted(p for p in TUTORIALS.glob("*.md") if p.name not in NOT_HERE)


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_tutorial_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = python_blocks(page.read_text(encoding="utf-8"))
    assert blocks, f"{page.name} has no python code blocks to run"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"tutorial_{page.stem.replace('-', '_')}"}
    for line, code in blocks:
        compiled = compile(code, f"{page.name}:{line}", "exec")
        try:
            exec(compiled, namespace)  # the project's own documentation, nothing else
        except Exception as e:
            pytest.fail(
                f"{page.relative_to(TUTORIALS.parents[1])}, block at line {line}: {type(e).__name__}: {e}"
            )
