from pathlib import Path

import pytest
import torch

from attnrec import Recommender
from attnrec.checkpoint import CheckpointError, load_tensors, save_tensors
from attnrec.data.schema import Interactions


def test_tensors_round_trip_and_corruption_is_detected(tmp_path: Path) -> None:
    f = tmp_path / "w.safetensors"
    sha = save_tensors(f, {"a": torch.arange(10.0)})
    assert torch.equal(load_tensors(f, sha)["a"], torch.arange(10.0))
    f.write_bytes(f.read_bytes()[:-7])  # truncated
    with pytest.raises(CheckpointError, match="checksum"):
        load_tensors(f, sha)
    with pytest.raises(CheckpointError, match="not a valid safetensors"):
        load_tensors(f)
    with pytest.raises(CheckpointError, match="missing"):
        load_tensors(tmp_path / "nope.safetensors")


def test_saved_model_loads_with_identical_scores_and_no_training_data(
    ring: Interactions, tmp_path: Path
) -> None:
    rec = Recommender("sasrec", {"hidden": 8, "n_layers": 1, "max_len": 10, "loss": "ce"}, {"max_epochs": 1})
    rec.fit(ring, progress=False)
    rec.save(tmp_path / "m")
    loaded = Recommender.load(tmp_path / "m")
    a = rec.recommend(user="u3", k=5)
    b = loaded.recommend(user="u3", k=5)
    assert a.items == b.items and a.scores == pytest.approx(b.scores, abs=1e-6)
    assert loaded.train_config == rec.train_config and loaded.config == rec.config
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "arrays.safetensors",
        "config.json",
        "id_maps.json",
        "manifest.json",
        "titles.json",
        "weights.safetensors",
    ]


def test_damaged_checkpoints_give_clear_errors(ring: Interactions, tmp_path: Path) -> None:
    rec = Recommender("pop").fit(ring, progress=False)
    d = rec.save(tmp_path / "m")
    (d / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json: 9 bytes where manifest.json says"):
        Recommender.load(d)
    (d / "manifest.json").unlink()  # a directory saved before manifests: the JSON itself is checked
    with pytest.raises(CheckpointError, match="no manifest.json, so nothing tells an edited file"):
        Recommender.load(d)
    with pytest.raises(CheckpointError, match="corrupted JSON"):
        Recommender.load(d, allow_unsigned=True)
    with pytest.raises(CheckpointError, match="not a directory"):
        Recommender.load(tmp_path / "missing")
    d2 = rec.save(tmp_path / "m2")
    w = d2 / "weights.safetensors"
    w.write_bytes(w.read_bytes()[:10])
    with pytest.raises(CheckpointError, match="weights.safetensors: 10 bytes where manifest.json says"):
        Recommender.load(d2)
    (d2 / "manifest.json").unlink()  # without a manifest, config.json's checksum of the weights still holds
    with pytest.raises(CheckpointError, match="checksum mismatch; the file is truncated or corrupted"):
        Recommender.load(d2, allow_unsigned=True)


def test_one_load_dispatches_on_the_task_and_each_class_refuses_the_other(
    ring: Interactions, tmp_path: Path
) -> None:
    import json

    import attnrec
    from attnrec.recommend import Explainer

    rec = Recommender("pop").fit(ring, progress=False)
    d = rec.save(tmp_path / "m")
    meta = json.loads((d / "config.json").read_text())
    assert "task" not in meta, "sequential directories keep the pre-package format (no task key)"
    assert meta["weights_sha256"] and meta["arrays_sha256"]
    loaded = attnrec.load(d, device="cpu")
    assert isinstance(loaded, Recommender)
    assert loaded.recommend(user="u3", k=5).items == rec.recommend(user="u3", k=5).items
    with pytest.raises(CheckpointError, match="checkpoint of the sequential task"):
        Explainer.load(d)
    (d / "manifest.json").unlink()  # config.json is edited below: checked without the manifest's checksums
    (d / "config.json").write_text(json.dumps(meta | {"task": "explain"}))
    with pytest.raises(CheckpointError, match="checkpoint of the explain task"):
        Recommender.load(d, allow_unsigned=True)
    (d / "config.json").write_text(json.dumps(meta | {"format_version": 99}))
    with pytest.raises(CheckpointError, match="unsupported checkpoint format 99"):
        attnrec.load(d, allow_unsigned=True)


def test_capabilities_are_asked_once_per_core(ring: Interactions) -> None:
    pop = Recommender("pop")
    with pytest.raises(RuntimeError, match="call fit"):
        pop.capabilities  # noqa: B018
    pop.fit(ring, progress=False)
    assert pop.capabilities.closed_form and not pop.capabilities.factorised
    assert pop.train_result_ is not None and pop.train_result_.stopped == "fitted"
    sas = Recommender("sasrec", {"hidden": 8, "n_layers": 1, "max_len": 10}, {"max_epochs": 1}).fit(
        ring, progress=False
    )
    assert sas.capabilities.factorised and sas.capabilities.attention and not sas.capabilities.closed_form
    sas.core = pop.core  # a new core: its capabilities replace the old ones
    assert sas.capabilities.closed_form and not sas.capabilities.factorised
