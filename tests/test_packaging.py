"""The package as users get it: a wheel that declares a torch range (not this machine's pin), carries its
package data, and installs and runs outside the source tree.

Built without network (``--no-isolation``: setuptools and wheel come from the dev extras) and installed
with ``--no-deps`` into a temporary target, so the check takes seconds and never touches the test
environment's own torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import attnrec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (whl,) = out.glob("attnrec-*.whl")
    return whl


def test_wheel_declares_a_torch_range_not_the_local_pin(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(z.read(meta).decode())
    requires = msg.get_all("Requires-Dist") or []
    torch_req = [r for r in requires if r.replace(" ", "").startswith("torch") and "extra" not in r]
    assert torch_req == ["torch>=2.2"], requires
    assert msg["Version"] == attnrec.__version__


def test_wheel_installs_and_runs_outside_the_source_tree(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    probe = (
        "import attnrec, attnrec.data.text as t; from importlib import resources; "
        "print(attnrec.__file__); print(len(t.stop_words()) > 100); "
        "print(sorted(p.name for p in resources.files('attnrec.data').joinpath('resources').iterdir())); "
        "print(sorted(p.name for p in "
        "resources.files('attnrec.evaluation').joinpath('resources').iterdir())); print(sorted(p.name for p "
        "in resources.files('attnrec.serving').joinpath('ui').iterdir())); import attnrec.data.catalog as "
        "c, attnrec.evaluation.published as p; print(len(c.DATASETS), len(p.TABLES), len(p.FULL_RANKING))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].startswith(str(target)), out  # the installed copy, not the source tree
    assert out[1] == "True"
    assert out[2] == "['datasets.toml', 'opinion_en.txt', 'stopwords_en.txt']"
    assert out[3] == "['published.toml']"
    assert out[4] == "['app.js', 'index.html', 'style.css']"  # the web page of attnrec serve
    # the dataset catalogue and the published figures load from the installed data, all of them
    import attnrec.data.catalog as catalog
    import attnrec.evaluation.published as published

    assert out[5] == f"{len(catalog.DATASETS)} {len(published.TABLES)} {len(published.FULL_RANKING)}"
    assert len(catalog.DATASETS) >= 10 and len(published.FULL_RANKING) >= 19
    version = subprocess.run(
        [sys.executable, "-m", "attnrec", "--version"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == f"attnrec {attnrec.__version__}"
