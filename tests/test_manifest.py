"""Model directories are verified as a whole (issue 18, item 5).

Every damage class of the issue's table, through the three doors a directory is opened by:
``attnrec.load`` (one :class:`CheckpointError` line naming the file), the CLI (exit 2, one
``error:`` line, no traceback) and the server (the model is refused, ``/readyz`` says so, no hang).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import attnrec
from attnrec import Recommender
from attnrec.checkpoint import CheckpointError
from attnrec.cli.main import app as cli
from attnrec.data.schema import DataSource
from attnrec.serving.app import create_app
from synthetic_logs import ring_log

LEGACY = Path(__file__).parent / "fixtures" / "legacy"
FILES = ("arrays.safetensors", "config.json", "id_maps.json", "titles.json", "weights.safetensors")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = ring_log(
        n_users=40,
        n_items=20,
        source=DataSource("ring"),
        item_titles={f"i{i}": f"Item {i}" for i in range(20)},
    )
    rec = Recommender(
        "sasrec", {"hidden": 8, "n_layers": 1, "max_len": 10}, {"max_epochs": 1, "device": "cpu"}
    )
    return rec.fit(log, progress=False).save(tmp_path_factory.mktemp("m") / "good")


def _json_edit(name: str, edit: Callable[[object], object]) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        f = d / name
        f.write_text(json.dumps(edit(json.loads(f.read_text())), indent=2, sort_keys=True))

    return apply


def _shift_items(maps: object) -> object:
    assert isinstance(maps, dict)
    return maps | {"items": maps["items"][1:] + maps["items"][:1]}  # same IDs, each one index off


def _retitle(titles: object) -> object:
    assert isinstance(titles, dict)
    return titles | {"i3": "Item 4"}  # same length: only the checksum tells


def _rehide(cfg: object) -> object:
    assert isinstance(cfg, dict)
    return cfg | {"model_config": cfg["model_config"] | {"dropout": 0.5}}


def _truncate(name: str) -> Callable[[Path], None]:
    def apply(d: Path) -> None:
        f = d / name
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])

    return apply


def _write(name: str, text: str) -> Callable[[Path], None]:
    return lambda d: (d / name).write_text(text) and None


def _remove(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


# damage -> (what to do to a copy of a good directory, the file the error must name)
DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "id_maps shifted by one": (_json_edit("id_maps.json", _shift_items), "id_maps.json"),
    "titles edited": (_json_edit("titles.json", _retitle), "titles.json"),
    "config edited": (_json_edit("config.json", _rehide), "config.json"),
    "weights truncated": (_truncate("weights.safetensors"), "weights.safetensors"),
    "config malformed JSON": (_write("config.json", "{not json"), "config.json"),
    "id_maps malformed JSON": (_write("id_maps.json", '{"users": ['), "id_maps.json"),
    "manifest malformed JSON": (_write("manifest.json", "{not json"), "manifest.json"),
    "manifest not a manifest": (_write("manifest.json", '{"files": []}'), "manifest.json"),
    "manifest names a path": (
        _write(
            "manifest.json",
            json.dumps(
                {"manifest_version": 1, "files": {"../config.json": {"sha256": "0" * 64, "bytes": 1}}}
            ),
        ),
        "manifest.json",
    ),
} | {f"{name} removed": (_remove(name), name) for name in FILES}


def _damaged(saved: Path, tmp_path: Path, case: str) -> tuple[Path, str]:
    d = tmp_path / "damaged"
    shutil.copytree(saved, d)
    damage, names = DAMAGE[case]
    damage(d)
    return d, names


def test_save_writes_a_manifest_of_every_file(saved: Path) -> None:
    man = json.loads((saved / "manifest.json").read_text())
    assert man["manifest_version"] == 1 and sorted(man["files"]) == list(FILES)
    import hashlib

    for name, entry in man["files"].items():
        data = (saved / name).read_bytes()
        assert entry == {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_directory_is_one_clear_error(saved: Path, tmp_path: Path, case: str) -> None:
    d, name = _damaged(saved, tmp_path, case)
    with pytest.raises(CheckpointError, match=rf"{name}: ") as info:
        attnrec.load(d, device="cpu")
    assert "\n" not in str(info.value)


def test_a_file_or_an_empty_directory_is_not_a_model(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match="not a directory"):
        attnrec.load(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no manifest.json and no config.json"):
        attnrec.load(tmp_path / "empty")
    other = tmp_path / "other"  # another tool's folder: was "unsupported checkpoint format None"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(
        CheckpointError, match="other/config.json: no format_version; not an attnrec checkpoint"
    ):
        attnrec.load(other, allow_unsigned=True)


def test_files_the_manifest_does_not_list_are_ignored(saved: Path, tmp_path: Path) -> None:
    d = tmp_path / "m"
    shutil.copytree(saved, d)
    (d / "notes.txt").write_text("trained on Tuesday")
    (d / "train_state").mkdir()  # what `attnrec train` keeps beside a resumable run
    assert (
        attnrec.load(d, device="cpu").recommend(user="u3", k=5).items
        == attnrec.load(saved, device="cpu").recommend(user="u3", k=5).items
    )


# -- directories without a manifest: refused unless allowed; then a warning and the structure checks ----
def test_directory_without_manifest_is_refused_by_default(saved: Path, tmp_path: Path) -> None:
    d = tmp_path / "old"
    shutil.copytree(saved, d)
    (d / "manifest.json").unlink()
    _json_edit("id_maps.json", _shift_items)(d)  # same IDs, other answers: only a manifest could tell
    with pytest.raises(CheckpointError, match="no manifest.json, so nothing tells an edited file") as info:
        attnrec.load(d, device="cpu")
    assert "\n" not in str(info.value)


def test_directory_without_manifest_loads_identically_with_a_warning(
    saved: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "old"
    shutil.copytree(saved, d)
    (d / "manifest.json").unlink()
    before = sorted(p.name for p in d.iterdir())
    with caplog.at_level(logging.WARNING, logger="attnrec"):
        rec = attnrec.load(d, device="cpu", allow_unsigned=True)
    assert any("no manifest.json" in r.getMessage() for r in caplog.records)
    assert (
        rec.recommend(user="u3", k=5).items
        == attnrec.load(saved, device="cpu").recommend(user="u3", k=5).items
    )
    assert sorted(p.name for p in d.iterdir()) == before, "loading never writes into the directory"


def test_legacy_fixtures_load_with_the_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="attnrec"):
        attnrec.load(LEGACY / "sasrec", device="cpu", allow_unsigned=True)
    assert any("no manifest.json" in r.getMessage() for r in caplog.records)


def _config(edit: Callable[[dict[str, object]], dict[str, object]]) -> Callable[[Path], None]:
    return _json_edit("config.json", lambda c: edit(c) if isinstance(c, dict) else c)


def _drop_line(d: Path) -> None:  # the "id_maps.json shifted by one line"
    lines = (d / "id_maps.json").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if '"items"' in ln) + 1
    (d / "id_maps.json").write_text("\n".join(lines[:at] + lines[at + 1 :]))


def _other_arrays(d: Path) -> None:  # with config.json's checksum of them updated too
    shutil.copy(LEGACY / "sasrec" / "arrays.safetensors", d)
    sha = json.loads((LEGACY / "sasrec" / "config.json").read_text())["arrays_sha256"]
    _config(lambda c: c | {"arrays_sha256": sha})(d)


NO_MANIFEST: dict[str, tuple[Callable[[Path], None], str]] = {
    "id_maps one line removed": (_drop_line, "id_maps.json: 19 items where config.json says n_items = 20"),
    "id_maps a list": (_write("id_maps.json", "[]"), "id_maps.json: not an object"),
    "titles a list": (_write("titles.json", '["x"]'), "titles.json: not a mapping"),
    "n_items a string": (
        _config(lambda c: c | {"n_items": "20"}),
        "config.json: 'n_items' is missing or not of JSON type integer",
    ),
    "unknown data key": (_config(lambda c: c | {"data": {"name": "x", "rows": 3}}), "config.json: .*rows"),
    "config asks for a huge model": (
        _config(
            lambda c: (
                c
                | {
                    "model_config": c["model_config"]
                    | {  # type: ignore[operator]
                        "max_len": 10**9
                    }
                }
            )
        ),
        r"config.json: the model it describes is too large to build \(parameters .*; activations per seq",
    ),
    "arrays of another model": (_other_arrays, "arrays.safetensors: popularity has 31 entries for 20 items"),
}


@pytest.mark.parametrize("case", sorted(NO_MANIFEST))
def test_directory_without_manifest_is_checked_for_structure(saved: Path, tmp_path: Path, case: str) -> None:
    d = tmp_path / "old"
    shutil.copytree(saved, d)
    (d / "manifest.json").unlink()
    damage, message = NO_MANIFEST[case]
    damage(d)
    t0 = time.perf_counter()
    with pytest.raises(CheckpointError, match=message) as info:
        attnrec.load(d, device="cpu", allow_unsigned=True)
    assert "\n" not in str(info.value) and time.perf_counter() - t0 < 20


# -- the CLI and the server ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "case",
    [
        "id_maps shifted by one",
        "titles edited",
        "config edited",
        "titles.json removed",
        "weights truncated",
        "manifest malformed JSON",
    ],
)
def test_cli_refuses_a_damaged_directory_with_one_line(saved: Path, tmp_path: Path, case: str) -> None:
    d, name = _damaged(saved, tmp_path, case)
    result = CliRunner().invoke(cli, ["recommend", "--model", str(d), "--user", "u3"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and name in lines[0], result.output


def test_server_refuses_a_damaged_directory_and_serves_the_rest(saved: Path, tmp_path: Path) -> None:
    d, _ = _damaged(saved, tmp_path, "id_maps shifted by one")
    with TestClient(create_app({"good": saved, "bad": d})) as c:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "loading" in c.get("/readyz").json()["models"].values():
            time.sleep(0.05)
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["models"] == {"good": "ready", "bad": "failed"}
        err = c.post("/v1/recommend", json={"model": "bad", "user": "u3"})
        assert err.status_code == 503
        assert "id_maps.json: checksum differs from manifest.json" in err.json()["error"]["message"]
        assert c.post("/v1/recommend", json={"model": "good", "user": "u3", "k": 5}).status_code == 200
