"""/v1/explain with a real PETER checkpoint loaded from its directory (next to a SASRec model)."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from attnrec.recommend import Recommender

explainer = pytest.importorskip("attnrec.recommend.explainer")
reviews = pytest.importorskip("attnrec.data.reviews")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec.serving.app import create_app  # noqa: E402


def _reviews():  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    phrases = {
        "strings": "these strings sound bright",
        "tuner": "the tuner is accurate",
        "strap": "the strap is soft",
    }
    recs = []
    for _ in range(120):
        item = int(rng.integers(6))
        feat = list(phrases)[item % 3]
        recs.append(
            {
                "user": f"u{rng.integers(8)}",
                "item": f"i{item}",
                "rating": float(3 + item % 3),
                "template": (feat, "good", phrases[feat], 1),
            }
        )
    return reviews.from_records(recs)


@pytest.fixture(scope="module")
def peter_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    data = _reviews()
    ex = explainer.Explainer(
        config={"emsize": 16, "ffn": 32, "n_heads": 2, "n_layers": 1, "use_feature": True},
        train={"lr": 0.01, "max_epochs": 2, "threads": 1, "device": "cpu"},
        preset="plus",
    )
    ex.fit(data, reviews.random_split(data, seed=0), progress=False)
    return ex.save(tmp_path_factory.mktemp("peter") / "peter")  # type: ignore[no-any-return]


def test_explain_endpoint_equals_python_api(peter_dir: Path, sasrec: Recommender) -> None:
    want = explainer.Explainer.load(peter_dir, device="cpu")
    with TestClient(create_app({"sas": sasrec, "peter": peter_dir})) as c:
        for _ in range(600):
            if c.get("/readyz").status_code == 200:
                break
            time.sleep(0.05)
        assert c.get("/readyz").json()["models"] == {"sas": "ready", "peter": "ready"}
        for body in ({"user": "u1", "item": "i0"}, {"user": "u2", "item": "i4", "feature": "tuner"}):
            r = c.post("/v1/explain", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["model"] == "peter"
            assert r.json()["explanation"] == want.explain(
                body["user"], body["item"], feature=body.get("feature")
            )
        r = c.post("/v1/explain", json={"user": "nobody", "item": "i0"})
        assert r.status_code == 404 and "unknown user" in r.json()["error"]["message"]
        assert (
            c.post("/v1/recommend", json={"user": "u1"}).json()["model"] == "sas"
        )  # default: the recommender
        assert c.post("/v1/recommend", json={"model": "peter", "user": "u1"}).status_code == 400
        info = {m["name"]: m for m in c.get("/v1/models").json()["models"]}["peter"]
        assert info["model"] == "peter" and info["task"] == "explain" and info["capabilities"] == ["explain"]


def test_attnrec_load_dispatches_on_the_checkpoint_task(peter_dir: Path) -> None:
    import attnrec

    loaded = attnrec.load(peter_dir)
    assert isinstance(loaded, explainer.Explainer)
    direct = explainer.Explainer.load(peter_dir)
    a, b = loaded.explain("u1", "i1"), direct.explain("u1", "i1")
    assert a == b


def test_explainer_directory_has_a_manifest_and_damage_is_refused(peter_dir: Path, tmp_path: Path) -> None:
    import json
    import shutil

    import attnrec
    from attnrec.checkpoint import CheckpointError

    listed = json.loads((peter_dir / "manifest.json").read_text())["files"]
    assert sorted(listed) == [
        "config.json",
        "features.json",
        "id_maps.json",
        "vocab.json",
        "weights.safetensors",
    ]
    d = tmp_path / "p"
    shutil.copytree(peter_dir, d)
    vocab = (d / "vocab.json").read_text()
    (d / "vocab.json").write_text(json.dumps(json.loads(vocab)[::-1]))
    with pytest.raises(CheckpointError, match=r"vocab\.json: .* manifest\.json"):
        attnrec.load(d)
    (d / "manifest.json").unlink()  # without the manifest, the structure is still checked
    with pytest.raises(CheckpointError, match=r"vocab\.json: a vocabulary starts with"):
        attnrec.load(d, allow_unsigned=True)
    (d / "vocab.json").write_text(vocab)
    (d / "features.json").write_text('{"features": "strings"}')
    with pytest.raises(CheckpointError, match=r"features\.json: expected 'features' \(a list of words\)"):
        attnrec.load(d, allow_unsigned=True)
