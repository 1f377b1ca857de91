"""``GET /v1/models``: names, kinds, versions, data hashes and loaded-at times, never a local path."""

from __future__ import annotations

import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec import __version__
from attnrec.data.schema import DataSource
from attnrec.recommend import Recommender
from attnrec.recommend.persistence import FORMAT_VERSION
from attnrec.serving.app import FromDirectory, ServingConfig, create_app


@pytest.fixture()
def dirs(sasrec_dir: Path, tmp_path: Path) -> dict[str, Path]:
    """A model whose training data (and evaluation records) name a local file, and a broken directory."""
    data = tmp_path / "home" / "alice" / "ratings.dat"
    rec = Recommender.load(sasrec_dir)
    rec.source_ = DataSource("ml-1m", str(data), "ml1m", "ab" * 32)
    rec.evaluations_ = [
        dict(ev, data={"name": "ml-1m", "path": str(data), "format": "ml1m", "sha256": "ab" * 32})
        for ev in rec.evaluations_
    ]
    broken = tmp_path / "models" / "broken"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text("{not json")
    return {"disk": rec.save(tmp_path / "models" / "sasrec-v1"), "broken": broken}


def test_models_never_show_local_paths(
    dirs: dict[str, Path], sasrec_dir: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    started = datetime.now(UTC).replace(microsecond=0)
    key = "models-test-key-0123456789"
    app = create_app(
        {
            "disk": dirs["disk"],
            "broken": dirs["broken"],
            "preloaded": FromDirectory(sasrec_dir, Recommender.load(sasrec_dir)),
        },
        ServingConfig(api_keys=frozenset({key}), allow_unsigned=True),  # "broken" has no manifest
    )
    with TestClient(app, headers={"X-API-Key": key}) as c:
        for _ in range(400):
            if "loading" not in c.get("/readyz").json()["models"].values():
                break
            time.sleep(0.02)
        r = c.get("/v1/models")
        assert r.status_code == 200
        text = r.text
        for p in {tmp_path, tmp_path.resolve(), tmp_path_factory.getbasetemp(), sasrec_dir.parent}:
            assert str(p) not in text
        assert "/home/alice" not in text and "ratings.dat" not in text and "sasrec-v1" not in text
        models = {m["name"]: m for m in r.json()["models"]}
        disk = models["disk"]
        assert disk["status"] == "ready" and disk["model"] == "sasrec" and disk["kind"] == "torch"
        assert disk["dataset"] == {"name": "ml-1m", "format": "ml1m", "sha256": "ab" * 32}
        assert all(ev["data"] == disk["dataset"] for ev in disk["evaluations"]) and disk["evaluations"]
        assert disk["versions"] == {"attnrec": __version__, "format": FORMAT_VERSION}
        loaded = datetime.fromisoformat(disk["loaded_at"])
        assert started - timedelta(seconds=1) <= loaded <= datetime.now(UTC) + timedelta(seconds=1)
        assert models["preloaded"]["versions"]["format"] == FORMAT_VERSION
        broken = models["broken"]
        assert broken["status"] == "failed" and "corrupted JSON" in broken["error"]
        assert "<model dir>/config.json" in broken["error"] and broken["loaded_at"] is None


def test_objects_passed_in_report_the_running_version(sasrec: Recommender) -> None:
    with TestClient(create_app({"sas": sasrec})) as c:
        m = c.get("/v1/models").json()["models"][0]
        assert m["versions"] == {"attnrec": __version__, "format": None} and m["kind"] == "torch"
        assert m["dataset"] == {"name": "ring-synthetic", "format": "", "sha256": ""}
