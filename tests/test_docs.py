"""The user documentation: generated pages are current, and no user-facing page cites a commit or an issue.

Research notes (docs/research/) may cite the commits and issues behind a figure; the README, the tutorials,
how-to guides, reference and explanation pages are for users and say what the software does now.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# "issue #20", "e029fad (" and "commit 9ecd7d9": the ways a lab notebook cites its history
HISTORY = re.compile(r"(issue #[0-9]+|\b[0-9a-f]{7,10}\b \(|commit [0-9a-f]{7})", re.IGNORECASE)
USER_PAGES = sorted(
    [ROOT / "README.md", *(p for p in DOCS.rglob("*.md") if "research" not in p.relative_to(DOCS).parts)]
)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_generated_pages_are_the_generated_ones() -> None:
    # A model page's settings, presets and figures come from the registry and the result files, the
    # service metrics page from the metric declarations: a changed default, preset, committed result
    # or metric must come with its regenerated page.
    generated = _generator().pages()
    pages = [*(DOCS / "reference" / "models").glob("*.md"), DOCS / "reference" / "service-metrics.md"]
    committed = {p: p.read_text() for p in pages}
    assert set(committed) == set(generated), "run: python docs/gen_pages.py"
    stale = [str(p.relative_to(ROOT)) for p, text in generated.items() if committed[p] != text]
    assert not stale, f"out of date (run: python docs/gen_pages.py): {stale}"


def test_every_model_has_a_page_with_its_presets_and_results() -> None:
    from attnrec import get_spec, list_models

    for name in list_models():
        page = (DOCS / "reference" / "models" / f"{name}.md").read_text()
        assert all(f"`--preset {p}`" in page for p in get_spec(name).presets), name
        assert "## Settings" in page and "## Results" in page, name


@pytest.mark.parametrize("path", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_user_page_cites_no_commit_or_issue(path: Path) -> None:
    found = [
        f"{n}: {m.group(0)}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in HISTORY.finditer(line)
    ]
    assert not found, f"move the history to docs/research/: {found}"


@pytest.mark.parametrize(
    ("line", "cites"),
    [
        ("Until commit e029fad these models also trained", True),
        ("(issue #19, part 2)", True),
        ("Before e029fad (one seed) the run", True),
        ("the sha256 ddc484b3f9a5 of the file; 1,000,000 items (all of them)", False),
    ],
)
def test_the_history_pattern(line: str, cites: bool) -> None:
    assert bool(HISTORY.search(line)) == cites


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    assert "make demo" in readme and "make test" in readme
    # every model family is named, and installing is told as it is (not on a package index yet)
    for family in ("SASRec", "BERT4Rec", "gSASRec", "eSASRec", "HSTU", "PETER"):
        assert family in readme, family
    assert "pip install attnrec" not in readme
    # every link into docs/ leads to a page that exists
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).exists(), target
