"""ONNX export of a model's scoring path, a parity check against PyTorch, and an ONNX backend.

Models that factorise their scores (``query_vectors(batch) @ item_vectors().T``, e.g. SASRec)
export only the sequence encoder (``output="query"``): the item table stays in torch, where the
serving path scores the catalog in chunks with a running top-k, so a 1M-item catalog never goes
through ONNX. Other torch models export the full ``score(batch) -> (B, n_items + 1)`` path.

Needs the ``export`` extra (``onnx``, ``onnxruntime``, ``onnxscript``).
"""

from __future__ import annotations

import json
import logging
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.recommend import Recommender
from attnrec.registry import factorised

log = logging.getLogger("attnrec.serving")


class _Scoring(nn.Module):
    """Positional tensors in, the query vectors or the full scores out (what ONNX sees)."""

    def __init__(self, core: Any, names: list[str], output: str) -> None:
        super().__init__()
        self.core, self.names, self.output = core, names, output

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        batch = dict(zip(self.names, inputs, strict=True))
        if self.output == "query":
            return self.core.query_vectors(batch)
        return self.core.score(batch)


def example_batch(rec: Recommender, n: int = 4) -> dict[str, torch.Tensor]:
    """Model inputs for ``n`` stored histories of different lengths (at least one full-length)."""
    assert rec.histories_ is not None
    lengths = rec.histories_.lengths()
    users = np.argsort(-lengths, kind="stable")[: max(1, n)]
    users = users[lengths[users] > 0]
    seqs = rec.histories_.take(users)
    return {k: v.cpu() for k, v in rec.core.score_inputs(users, seqs).items()}


def export_onnx(rec: Recommender, path: str | Path, output: str = "auto", opset: int = 18) -> Path:
    """Write ``rec``'s scoring path to ``path`` (``.onnx``) and ``path.json`` (inputs, output kind).

    ``output``: ``"query"`` (factorised models), ``"scores"``, or ``"auto"`` (query when possible).
    Batch size is dynamic; so is the sequence length when the model allows it.
    """
    rec._require_fitted()
    if rec.spec.kind != "torch":
        raise ValueError(f"{rec.name} is not a torch model; only neural models can be exported to ONNX")
    core = getattr(rec.core, "torch_core", rec.core)
    if output == "auto":
        output = "query" if factorised(core) else "scores"
    if output not in ("query", "scores"):
        raise ValueError(f"output must be auto, query or scores, not {output!r}")
    if output == "query" and not factorised(core):
        raise ValueError(f"{rec.name} has no query_vectors/item_vectors; export output='scores'")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    batch = example_batch(rec)
    names = sorted(batch)
    module = _Scoring(core.cpu().eval(), names, output)
    args = tuple(batch[k] for k in names)
    batch_dim = torch.export.Dim("batch", min=1, max=65536)

    def shapes(dynamic_length: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in names:
            dims: dict[int, Any] = {0: batch_dim}
            if dynamic_length and batch[k].dim() == 2:
                longest = max(int(batch[k].shape[1]), int(getattr(getattr(core, "config", None), "max_len", 0)))
                dims[1] = torch.export.Dim(f"{k}_length", min=1, max=max(2, longest))
            out[k] = dims
        return {"inputs": tuple(out[k] for k in names)}

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        last: Exception | None = None
        for dynamic_length in (True, False):
            try:
                torch.onnx.export(module, args, str(p), dynamo=True, input_names=names,
                                  output_names=[output], dynamic_shapes=shapes(dynamic_length), opset_version=opset,
                                  verbose=False)
                break
            except Exception as e:  # noqa: BLE001 - retried with a fixed sequence length
                last = e
                log.info("ONNX export with dynamic length failed (%s); trying a fixed length", e)
        else:
            raise RuntimeError(f"ONNX export of {rec.name} failed: {last}") from last
    rec.core.to(rec.device)
    info = {"model": rec.name, "output": output, "inputs": {k: list(batch[k].shape) for k in names},
            "dynamic_length": dynamic_length, "opset": opset}
    Path(str(p) + ".json").write_text(json.dumps(info, indent=2))
    return p


def session(path: str | Path, threads: int = 0) -> Any:
    """An onnxruntime CPU session (``threads`` intra-op threads; 0: torch's current setting)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or torch.get_num_threads()
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


class OnnxCore:
    """Stands in for a torch model's core: the exported path runs in onnxruntime, the rest in torch.

    Attributes it does not define (``score_inputs``, ``item_vectors``, ``state_dict``, ...) come
    from the wrapped torch module, so a :class:`Recommender` uses it unchanged.
    """

    def __init__(self, torch_core: Any, sess: Any, output: str, fixed_length: int | None = None) -> None:
        self.torch_core, self.session, self.output = torch_core, sess, output
        self.input_names = [i.name for i in sess.get_inputs()]
        self.fixed_length = fixed_length

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["torch_core"], name)

    def eval(self) -> OnnxCore:
        return self

    def to(self, *args: Any, **kwargs: Any) -> OnnxCore:
        return self

    def score_inputs(self, users: np.ndarray, histories: Sequences) -> dict[str, torch.Tensor]:
        batch = self.torch_core.score_inputs(users, histories)
        if self.fixed_length is not None and "seq" in batch and batch["seq"].shape[1] != self.fixed_length:
            batch["seq"] = torch.from_numpy(histories.padded(self.fixed_length))
        return batch

    def run(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        feeds = {k: batch[k].cpu().numpy() for k in self.input_names}
        return torch.from_numpy(self.session.run(None, feeds)[0])

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.output == "scores":
            return self.run(batch)
        s = self.run(batch) @ self.torch_core.item_vectors().T
        if hasattr(self.torch_core, "item_bias"):
            s = s + self.torch_core.item_bias()
        s[:, 0] = -torch.inf
        return s


class OnnxQueryCore(OnnxCore):
    """:class:`OnnxCore` of a factorised model: the encoder in onnxruntime, the item table in torch."""

    def query_vectors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.run(batch)


def use_onnx(rec: Recommender, path: str | Path | None = None, threads: int = 0) -> Recommender:
    """Switch ``rec`` to the ONNX backend in place (exporting to ``path`` or a temporary file first)."""
    if isinstance(rec.core, OnnxCore):
        return rec
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="attnrec-onnx-")) / f"{rec.name}.onnx"
    p = Path(path)
    if not p.exists():
        export_onnx(rec, p)
    info = json.loads(Path(str(p) + ".json").read_text())
    sess = session(p, threads)
    fixed = None if info.get("dynamic_length", True) else int(info["inputs"].get("seq", [0, 0])[1])
    cls = OnnxQueryCore if info["output"] == "query" else OnnxCore
    rec.core = cls(rec.core, sess, info["output"], fixed)
    rec._cache.clear()
    return rec


def parity(rec: Recommender, sess: Any, batch: dict[str, torch.Tensor] | None = None) -> float:
    """Largest absolute difference between PyTorch's and onnxruntime's scores on ``batch``."""
    core = getattr(rec.core, "torch_core", rec.core)
    batch = batch or example_batch(rec)
    info_out = sess.get_outputs()[0].name
    with torch.no_grad():
        core.eval()
        want = core.score({k: v.to(rec.device) for k, v in batch.items()}).float().cpu()
        onnx_core = (OnnxQueryCore if info_out == "query" else OnnxCore)(core, sess, info_out)
        got = onnx_core.score(batch).float().cpu()
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)):
        return float("inf")
    return float((want[finite] - got[finite]).abs().max())


__all__ = ["OnnxCore", "OnnxQueryCore", "example_batch", "export_onnx", "factorised", "parity", "session", "use_onnx"]
