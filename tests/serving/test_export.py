"""ONNX export of the scoring path: parity with PyTorch (onnxruntime) and the ONNX serving backend."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from attnrec.data.schema import Interactions, Sequences  # noqa: E402
from attnrec.models.registry import list_models  # noqa: E402
from attnrec.recommend import Recommender  # noqa: E402
from attnrec.serving.export import OnnxCore, export_onnx, parity, session, use_onnx  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from attnrec.serving.app import ServingConfig, create_app  # noqa: E402


@pytest.fixture(scope="module")
def sasrec_onnx(sasrec: Recommender, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_onnx(sasrec, tmp_path_factory.mktemp("onnx") / "sasrec.onnx")


def _batches(rec: Recommender) -> list[dict[str, torch.Tensor]]:
    """Histories of length 1, mixed lengths, and the longest ones (the exported length is dynamic)."""
    assert rec.items_ is not None
    n = len(rec.items_)
    rng = np.random.default_rng(1)
    out = []
    for lens in ([1], [3, 7, 1], [40, 2, 19, 5, 33]):
        seqs = Sequences.from_lists([rng.integers(1, n + 1, size=m).tolist() for m in lens], n)
        out.append(rec.core.score_inputs(np.zeros(len(lens), dtype=np.int64), seqs))
    return out


def test_sasrec_onnx_parity(sasrec: Recommender, sasrec_onnx: Path) -> None:
    sess = session(sasrec_onnx, threads=1)
    assert sess.get_outputs()[0].name == "query"  # factorised: only the encoder is exported
    for batch in _batches(sasrec):
        assert parity(sasrec, sess, batch) < 1e-4


def test_onnx_backend_answers_equal_torch(sasrec: Recommender, sasrec_onnx: Path) -> None:
    onnx_rec = use_onnx(copy.copy(sasrec), sasrec_onnx, threads=1)
    assert isinstance(onnx_rec.core, OnnxCore) and not isinstance(sasrec.core, OnnxCore)
    for req in (
        {"user": "u2", "k": 10},
        {"history": ["i4", "i5", "i6"], "k": 5},
        {"user": "u9", "k": 3, "include": ["i1", "i2", "i3"]},
    ):
        a, b = sasrec.recommend(**req), onnx_rec.recommend(**req)  # type: ignore[arg-type]
        assert a.items == b.items and a.scores == pytest.approx(b.scores, abs=1e-4)
    assert onnx_rec.similar_items("i3", 5).items == sasrec.similar_items("i3", 5).items
    with TestClient(create_app({"sas": onnx_rec}, ServingConfig(backend="onnx"))) as c:
        assert c.get("/v1/models").json()["models"][0]["backend"] == "onnx"
        body = c.post("/v1/recommend", json={"user": "u2", "k": 10}).json()
        assert [x["item"] for x in body["items"]] == sasrec.recommend(user="u2", k=10).items


@pytest.mark.skipif("bert4rec" not in list_models(), reason="BERT4Rec is not in this install")
def test_bert4rec_onnx_parity(log: Interactions, tmp_path: Path) -> None:
    rec = Recommender(
        "bert4rec",
        {"hidden": 16, "n_layers": 1, "n_heads": 2, "max_len": 20},
        {"max_epochs": 1, "device": "cpu"},
    )
    rec.fit(log, progress=False)
    path = export_onnx(rec, tmp_path / "bert4rec.onnx")
    sess = session(path, threads=1)
    for batch in _batches(rec):
        assert parity(rec, sess, batch) < 1e-4
    onnx_rec = use_onnx(copy.copy(rec), path, threads=1)
    assert onnx_rec.recommend(user="u1", k=8).items == rec.recommend(user="u1", k=8).items


def test_export_rejects_non_torch_models(log: Interactions, tmp_path: Path) -> None:
    if "pop" not in list_models():
        pytest.skip("no estimator model in this install")
    rec = Recommender("pop").fit(log, progress=False)
    with pytest.raises(ValueError, match="not a torch model"):
        export_onnx(rec, tmp_path / "pop.onnx")
