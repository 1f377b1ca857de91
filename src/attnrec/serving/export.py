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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models.contracts import Batch, ClosedForm, Factorised, ItemBiased, Scorer
from attnrec.recommend import Recommender

log = logging.getLogger("attnrec.serving")


class _NodeArg(Protocol):
    name: str


class OrtSession(Protocol):
    """The part of ``onnxruntime.InferenceSession`` used here (onnxruntime ships no type hints)."""

    def get_inputs(self) -> Sequence[_NodeArg]: ...

    def get_outputs(self) -> Sequence[_NodeArg]: ...

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, np.ndarray]
    ) -> list[np.ndarray]: ...


@runtime_checkable
class _Windowed(Protocol):
    """A model config with a longest sequence length (the exported length may range up to it)."""

    max_len: int


def torch_core(core: object) -> nn.Module:
    """The torch module behind a recommender's ``core`` (the wrapped one when it runs on ONNX)."""
    inner = core.torch_core if isinstance(core, OnnxCore) else core
    if not isinstance(inner, nn.Module):
        raise ValueError(f"{type(inner).__name__} is not a torch model")
    return inner


class _Scoring(nn.Module):
    """Positional tensors in, the query vectors or the full scores out (what ONNX sees)."""

    def __init__(self, core: nn.Module, names: list[str], output: str) -> None:
        super().__init__()
        self.core, self.names, self.output = core, names, output
        if output == "query":
            assert isinstance(core, Factorised)  # export_onnx checked it
            self.head: Callable[[Batch], torch.Tensor] = core.query_vectors
        else:
            assert isinstance(core, Scorer)
            self.head = core.score

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        batch = dict(zip(self.names, inputs, strict=True))
        return self.head(batch)  # (B, D) query vectors or (B, I + 1) scores


def example_batch(rec: Recommender, n: int = 4) -> dict[str, torch.Tensor]:
    """Model inputs for ``n`` stored histories of different lengths (at least one full-length)."""
    assert rec.histories_ is not None
    lengths = rec.histories_.lengths()
    users = np.argsort(-lengths, kind="stable")[: max(1, n)]
    users = users[lengths[users] > 0]
    seqs = rec.histories_.take(users)
    return {k: v.cpu() for k, v in rec.core.score_inputs(users, seqs).items()}


def _dynamic_shapes(
    batch: Batch, names: list[str], window: int, dynamic_length: bool
) -> dict[str, tuple[dict[int, object], ...]]:
    """torch.export's dynamic dimensions: the batch always, the sequence length when ``dynamic_length``
    (up to the longer of the example and the model's ``window``)."""
    batch_dim = torch.export.Dim("batch", min=1, max=65536)
    out: dict[str, dict[int, object]] = {}
    for k in names:
        dims: dict[int, object] = {0: batch_dim}
        if dynamic_length and batch[k].dim() == 2:
            longest = max(int(batch[k].shape[1]), window)
            dims[1] = torch.export.Dim(f"{k}_length", min=1, max=max(2, longest))
        out[k] = dims
    return {"inputs": tuple(out[k] for k in names)}


def _write_onnx(name: str, module: _Scoring, batch: Batch, path: Path, window: int, opset: int) -> bool:
    """Export ``module`` to ``path`` with a dynamic sequence length, else a fixed one; whether it is
    dynamic."""
    names = module.names
    args = tuple(batch[k] for k in names)
    last: Exception | None = None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for dynamic_length in (True, False):
            try:
                torch.onnx.export(
                    module,
                    args,
                    str(path),
                    dynamo=True,
                    input_names=names,
                    output_names=[module.output],
                    opset_version=opset,
                    verbose=False,
                    dynamic_shapes=_dynamic_shapes(batch, names, window, dynamic_length),
                )
                return dynamic_length
            except Exception as e:  # noqa: BLE001 - retried with a fixed sequence length
                last = e
                log.info("ONNX export with dynamic length failed (%s); trying a fixed length", e)
    raise RuntimeError(f"ONNX export of {name} failed: {last}") from last


def export_onnx(rec: Recommender, path: str | Path, output: str = "auto", opset: int = 18) -> Path:
    """Write ``rec``'s scoring path to ``path`` (``.onnx``) and ``path.json`` (inputs, output kind).

    ``output``: ``"query"`` (factorised models), ``"scores"``, or ``"auto"`` (query when possible).
    Batch size is dynamic; so is the sequence length when the model allows it.
    """
    rec._require_fitted()
    core = torch_core(rec.core)
    if isinstance(core, ClosedForm):  # counts, not a network: nothing for onnxruntime to speed up
        raise ValueError(f"{rec.name} is not a torch model; only neural models can be exported to ONNX")
    if output == "auto":
        output = "query" if isinstance(core, Factorised) else "scores"
    if output not in ("query", "scores"):
        raise ValueError(f"output must be auto, query or scores, not {output!r}")
    if output == "query" and not isinstance(core, Factorised):
        raise ValueError(f"{rec.name} has no query_vectors/item_vectors; export output='scores'")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    batch = example_batch(rec)
    names = sorted(batch)
    window = int(rec.config.max_len) if isinstance(rec.config, _Windowed) else 0
    try:
        dynamic_length = _write_onnx(
            rec.name, _Scoring(core.cpu().eval(), names, output), batch, p, window, opset
        )
    finally:
        rec.core.to(rec.device)  # exported on the CPU; the recommender keeps its device
    info = {
        "model": rec.name,
        "output": output,
        "inputs": {k: list(batch[k].shape) for k in names},
        "dynamic_length": dynamic_length,
        "opset": opset,
    }
    Path(str(p) + ".json").write_text(json.dumps(info, indent=2))
    return p


def session(path: str | Path, threads: int = 0) -> OrtSession:
    """An onnxruntime CPU session (``threads`` intra-op threads; 0: torch's current setting)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads or torch.get_num_threads()
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess: OrtSession = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess


class OnnxCore:
    """Stands in for a torch model's core: the exported path runs in onnxruntime, the rest in torch.

    It implements the :class:`~attnrec.recommend.model_core.ModelCore` contract explicitly: weights
    (``state_dict``) stay those of the wrapped torch module, and the optional capabilities are
    declared by the subclasses (:class:`OnnxQueryCore`, :class:`OnnxBiasedQueryCore`), never
    forwarded implicitly.
    """

    training = False  # inference only: dropout and the like are baked into the exported graph

    def __init__(
        self, torch_core: nn.Module, sess: OrtSession, output: str, fixed_length: int | None = None
    ) -> None:
        if not isinstance(torch_core, Scorer):
            raise TypeError(f"{type(torch_core).__name__} does not score a catalog; it cannot run on ONNX")
        self.torch_core, self.session, self.output = torch_core, sess, output
        self.scorer: Scorer = torch_core
        self.vectors: Factorised | None = torch_core if isinstance(torch_core, Factorised) else None
        self.bias: ItemBiased | None = torch_core if isinstance(torch_core, ItemBiased) else None
        self.input_names = [i.name for i in sess.get_inputs()]
        self.fixed_length = fixed_length

    def eval(self) -> OnnxCore:
        return self

    def to(self, *args: object, **kwargs: object) -> OnnxCore:
        return self

    def cpu(self) -> OnnxCore:
        return self

    def state_dict(self) -> Mapping[str, torch.Tensor]:
        """The wrapped torch module's weights (what a saved model directory holds)."""
        return self.torch_core.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> object:
        return self.torch_core.load_state_dict(state_dict, strict)

    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        batch = self.scorer.score_inputs(users, histories, request_time)
        if self.fixed_length is not None and "seq" in batch and batch["seq"].shape[1] != self.fixed_length:
            batch["seq"] = torch.from_numpy(histories.padded(self.fixed_length))
        return batch

    def run(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The exported path's output: ``(B, D)`` query vectors or ``(B, I + 1)`` scores."""
        feeds = {k: batch[k].cpu().numpy() for k in self.input_names}
        return torch.from_numpy(self.session.run(None, feeds)[0])

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores ``(B, I + 1)``, column 0 (padding) ``-inf``, as the torch module's ``score``."""
        if self.output == "scores":
            return self.run(batch)
        assert self.vectors is not None  # the query output is exported for factorised models only
        s = self.run(batch) @ self.vectors.item_vectors().T  # (B, I + 1)
        if self.bias is not None:
            s = s + self.bias.item_bias()
        s[:, 0] = -torch.inf
        return s


class OnnxQueryCore(OnnxCore, Factorised):
    """:class:`OnnxCore` of a factorised model: the encoder in onnxruntime, the item table in torch."""

    def query_vectors(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.run(batch)

    def item_vectors(self) -> torch.Tensor:
        assert self.vectors is not None
        return self.vectors.item_vectors()


class OnnxBiasedQueryCore(OnnxQueryCore, ItemBiased):
    """:class:`OnnxQueryCore` of a factorised model with per-item biases."""

    def item_bias(self) -> torch.Tensor:
        assert self.bias is not None
        return self.bias.item_bias()


def onnx_core(
    torch_module: nn.Module, sess: OrtSession, output: str, fixed_length: int | None = None
) -> OnnxCore:
    """The ONNX stand-in with exactly the capabilities of ``torch_module`` that the export keeps."""
    if output != "query":
        return OnnxCore(torch_module, sess, output, fixed_length)
    if isinstance(torch_module, ItemBiased):
        return OnnxBiasedQueryCore(torch_module, sess, output, fixed_length)
    return OnnxQueryCore(torch_module, sess, output, fixed_length)


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
    rec.core = onnx_core(torch_core(rec.core), sess, info["output"], fixed)
    rec._cache.clear()
    return rec


def parity(rec: Recommender, sess: OrtSession, batch: dict[str, torch.Tensor] | None = None) -> float:
    """Largest absolute difference between PyTorch's and onnxruntime's scores on ``batch``."""
    core = torch_core(rec.core)
    if not isinstance(core, Scorer):
        raise ValueError(f"{rec.name} does not score a catalog")
    batch = batch or example_batch(rec)
    info_out = sess.get_outputs()[0].name
    with torch.no_grad():
        core.eval()
        want = core.score({k: v.to(rec.device) for k, v in batch.items()}).float().cpu()
        got = onnx_core(core, sess, info_out).score(batch).float().cpu()
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)):
        return float("inf")
    return float((want[finite] - got[finite]).abs().max())


__all__ = [
    "OnnxBiasedQueryCore",
    "OnnxCore",
    "OnnxQueryCore",
    "onnx_core",
    "OrtSession",
    "example_batch",
    "export_onnx",
    "parity",
    "session",
    "torch_core",
    "use_onnx",
]
