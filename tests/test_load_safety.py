"""Loading cannot hang or explode: every damage kind that once hung a loader or ate the machine's
memory (a FIFO, /dev/zero or a file outside behind a link, a sparse 4 GB file, a config ten thousand
layers deep, NaN weights, an edited file without a manifest, a tampered signed manifest) is refused
in one line, at once, by ``attnrec.load`` and by the CLI (exit 2); signed manifests verify."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import attnrec
from attnrec import Recommender
from attnrec.checkpoint import MANIFEST, CheckpointError, LoadLimits, write_manifest
from attnrec.cli.main import app as cli
from attnrec.config import ConfigError
from attnrec.data.schema import DataSource
from damaged_dirs import DAMAGE, KEY, damaged, sparse_huge_weights
from synthetic_logs import ring_log

QUICK_S = 10  # "at once": far below any hang, generous for a loaded 2-core machine


@pytest.fixture(scope="module")
def rec() -> Recommender:
    log = ring_log(n_users=40, n_items=20, source=DataSource("ring"))
    model = Recommender(
        "sasrec", {"hidden": 8, "n_layers": 1, "max_len": 10}, {"max_epochs": 1, "device": "cpu"}
    )
    return model.fit(log, progress=False)


@pytest.fixture(scope="module")
def signed(rec: Recommender, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return rec.save(tmp_path_factory.mktemp("m") / "signed", manifest_key=KEY)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_load_refuses_each_damage_in_one_line_at_once(signed: Path, tmp_path: Path, kind: str) -> None:
    d = damaged(signed, tmp_path, kind)
    t0 = time.monotonic()
    with pytest.raises(CheckpointError, match=DAMAGE[kind][1]) as info:
        attnrec.load(d, device="cpu", manifest_key=KEY)
    assert time.monotonic() - t0 < QUICK_S
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_cli_recommend_refuses_each_damage_with_exit_2(signed: Path, tmp_path: Path, kind: str) -> None:
    d = damaged(signed, tmp_path, kind)
    result = CliRunner().invoke(
        cli, ["recommend", "--model", str(d), "--user", "u3"], env={"ATTNREC_MANIFEST_KEY": KEY}
    )
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert re.search(DAMAGE[kind][1], lines[0]), lines[0]


def test_checks_hold_without_a_key_and_for_unsigned_directories(signed: Path, tmp_path: Path) -> None:
    """The file and size checks do not depend on the signature: without a key, and for a directory
    without a manifest that is allowed, the same damage is refused."""
    for kind in ("FIFO weights", "weights linked to /dev/zero", "n_layers 10^4", "NaN weights"):
        d = damaged(signed, tmp_path / kind.replace(" ", "_").replace("/", "_"), kind)
        with pytest.raises(CheckpointError, match=DAMAGE[kind][1]):
            attnrec.load(d, device="cpu")
        (d / MANIFEST).unlink()
        with pytest.raises(CheckpointError, match=DAMAGE[kind][1].replace("manifest", "")):
            attnrec.load(d, device="cpu", allow_unsigned=True)


def test_a_huge_file_without_manifest_is_refused_by_its_size_before_it_is_read(
    signed: Path, tmp_path: Path
) -> None:
    d = tmp_path / "old"
    shutil.copytree(signed, d)
    (d / MANIFEST).unlink()
    sparse_huge_weights(d)
    with pytest.raises(
        CheckpointError, match=r"weights\.safetensors: 4000000000 bytes, over the .*-byte limit"
    ):
        attnrec.load(d, device="cpu", allow_unsigned=True)
    small = LoadLimits(max_file_bytes=1000)  # the limit is the caller's to set
    with pytest.raises(CheckpointError, match=r"arrays\.safetensors: \d+ bytes, over the 1000-byte limit"):
        attnrec.load(signed, device="cpu", limits=small)


def test_a_signed_directory_loads_with_its_key_and_without_one(rec: Recommender, signed: Path) -> None:
    want = rec.recommend(user="u3", k=5).items
    assert attnrec.load(signed, device="cpu", manifest_key=KEY).recommend(user="u3", k=5).items == want
    assert attnrec.load(signed, device="cpu").recommend(user="u3", k=5).items == want
    with pytest.raises(CheckpointError, match="signature does not verify; .* or signed with another key"):
        attnrec.load(signed, device="cpu", manifest_key="another-key-0123456789")


def test_an_unsigned_manifest_under_a_key_is_refused_unless_allowed(rec: Recommender, tmp_path: Path) -> None:
    d = rec.save(tmp_path / "plain")
    assert "hmac_sha256" not in json.loads((d / MANIFEST).read_text())
    with pytest.raises(CheckpointError, match=r"manifest\.json: not signed, and a manifest key was given"):
        attnrec.load(d, device="cpu", manifest_key=KEY)
    attnrec.load(d, device="cpu", manifest_key=KEY, allow_unsigned=True)


def test_removing_the_signature_does_not_help(signed: Path, tmp_path: Path) -> None:
    d = tmp_path / "stripped"
    shutil.copytree(signed, d)
    maps = json.loads((d / "id_maps.json").read_text())
    (d / "id_maps.json").write_text(json.dumps(maps | {"items": maps["items"][::-1]}))
    write_manifest(d, json.loads((d / MANIFEST).read_text())["files"])  # re-made without the key
    with pytest.raises(CheckpointError, match="not signed"):
        attnrec.load(d, device="cpu", manifest_key=KEY)


def test_a_short_key_is_a_config_error(rec: Recommender, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least 16 characters"):
        rec.save(tmp_path / "x", manifest_key="short")


def test_an_unknown_model_name_is_one_line_not_a_key_error(signed: Path, tmp_path: Path) -> None:
    d = tmp_path / "renamed"
    shutil.copytree(signed, d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps(cfg | {"model": "unknown-name"}))
    write_manifest(d, json.loads((d / MANIFEST).read_text())["files"])
    with pytest.raises(
        CheckpointError, match="config.json: unknown model 'unknown-name'; known models: "
    ) as info:
        attnrec.load(d, device="cpu")
    assert not isinstance(info.value, KeyError)
    with pytest.raises(CheckpointError, match="unknown-name: not a directory"):
        attnrec.load("unknown-name")


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [
        ("n_layers", 10**4, "depth"),
        ("hidden", 10**6, "parameters"),
        ("max_len", 10**7, "activations per sequence"),
        ("n_heads", 10**5, "activations per sequence"),
    ],
)
def test_each_size_setting_is_refused_before_building(
    signed: Path, tmp_path: Path, key: str, value: int, what: str
) -> None:
    d = tmp_path / key
    shutil.copytree(signed, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_config"][key] = value
    (d / "config.json").write_text(json.dumps(cfg))
    write_manifest(d, json.loads((d / MANIFEST).read_text())["files"])
    t0 = time.monotonic()
    limits = LoadLimits(max_activation=10**6) if key == "n_heads" else None
    with pytest.raises(CheckpointError, match=rf"too large to build \(.*{what}"):
        attnrec.load(d, device="cpu", limits=limits)
    assert time.monotonic() - t0 < QUICK_S


def test_the_cli_signs_when_training_and_verifies_when_recommending(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(f"u{u} i{(u + t) % 15}\n" for u in range(30) for t in range(6)))
    out = tmp_path / "m"
    runner = CliRunner()

    def run(*args: str, key: str | None = KEY) -> tuple[int, str]:
        env = {"ATTNREC_MANIFEST_KEY": key} if key else {}
        result = runner.invoke(cli, list(args), env=env)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result.exit_code, result.output

    code, output = run("train", "--data", str(pairs), "--model", "pop", "--out", str(out), "--quiet")
    assert code == 0, output
    assert json.loads((out / MANIFEST).read_text())["hmac_sha256"]
    assert run("recommend", "--model", str(out), "--user", "u3")[0] == 0
    code, output = run(
        "recommend", "--model", str(out), "--user", "u3", "--manifest-key", "another-key-0123456789"
    )
    assert code == 2 and "signature does not verify" in output, output
    code, output = run(
        "train", "--data", str(pairs), "--model", "pop", "--out", str(tmp_path / "x"), key="short"
    )
    assert code == 2 and "at least 16 characters" in output and not (tmp_path / "x").exists(), output
