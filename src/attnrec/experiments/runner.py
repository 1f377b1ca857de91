"""The one runner: fit one configured model on a split, test it under each protocol, time it.

``attnrec compare``, the benchmark config runner and the BERT4Rec studies all train through
:func:`run_one`, so a model is fitted, selected on validation, tested and matched with the
published figures the same way wherever its numbers come from.

The cold-item protocol in a run (its split side, which items and what is removed, is
:mod:`attnrec.data.cold`): a model is fitted on :attr:`~attnrec.data.cold.ColdStart.warm` (its
catalogue has no cold item); afterwards :func:`add_cold_items` adds the cold items as production adds
new ones (``Recommender.add_items``: their features, all-zero ID vectors) when the model can take them.
A model that cannot (ID-only models, POP) has no score for them: they score ``-inf`` and a cold target
ranks behind every other item, which is what "cannot rank them at all" means. :func:`test_cold` reports
every test case, and the cold and the warm targets apart.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnrec import __version__
from attnrec.data.cold import ColdStart
from attnrec.data.schema import Interactions
from attnrec.data.split import Split
from attnrec.evaluation.protocol import FULL, EvalResult, Protocol, evaluate, unscored_last
from attnrec.evaluation.published import published_metrics
from attnrec.recommend import Recommender, cold_items
from attnrec.training.state import STATE_JSON


@dataclass(frozen=True)
class RunRequest:
    """One model to fit: its settings over a preset, the validation protocol and the test protocols."""

    model: str
    preset: str | None = None
    model_settings: Mapping[str, Any] = field(default_factory=dict)
    train_settings: Mapping[str, Any] = field(default_factory=dict)
    valid_protocol: Protocol = FULL  # model selection (early stopping) on the validation cases
    tests: Sequence[Protocol] = (FULL,)  # each is scored once on the test cases, after training


@dataclass
class RunOutcome:
    """A fitted model with its test results, in the order of :attr:`RunRequest.tests`."""

    recommender: Recommender
    results: list[EvalResult]
    published: list[dict[str, float] | None]  # the paper's figures comparable with each result, or None
    fit_seconds: float  # fit() including validation; over every session when resumed from a saved state
    resumed: bool  # whether training continued from a saved training state
    cold: dict[str, Any] | None = None  # the cold-item protocol's record (cold_record)


def run_one(
    request: RunRequest,
    data: Interactions,
    split: Split,
    *,
    progress: bool = False,
    state_dir: Path | None = None,
    cold: ColdStart | None = None,
) -> RunOutcome:
    """Fit ``request.model`` on ``split.train``, select it on ``split.valid``, test it on ``split.test``.

    ``state_dir`` keeps a resumable training state (see :func:`attnrec.training.loop.train`); a run
    started again with the same directory continues where it stopped. ``cold``: the cold-item protocol
    (:mod:`attnrec.data.cold`); ``data`` and ``split`` are then ignored for its warm log and split, the
    cold items are added after training when the model can take them, and each test reports cold and
    warm targets apart (full ranking only; no published figure is comparable).
    """
    if cold is not None:
        data, split = cold.warm, cold.split
    rec = Recommender(
        request.model, dict(request.model_settings), dict(request.train_settings), preset=request.preset
    )
    resumed = state_dir is not None and (state_dir / STATE_JSON).exists()
    t0 = time.perf_counter()
    rec.fit(data, split, valid_protocol=request.valid_protocol, progress=progress, state_dir=state_dir)
    tr = rec.train_result_
    # A resumed fit's wall time covers one session only; the loop's own clock spans them all.
    fit_seconds = tr.seconds if resumed and tr else time.perf_counter() - t0
    if cold is not None:
        added = add_cold_items(rec, cold)
        results = [test_cold(rec, cold, p) for p in request.tests]
        return RunOutcome(rec, results, [None] * len(results), fit_seconds, resumed, cold_record(cold, added))
    results = [rec.evaluate(split.test, p, split=split.describe(), target="test") for p in request.tests]
    published = [published_metrics(rec.name, data.source.sha256, p, split.name) for p in request.tests]
    return RunOutcome(rec, results, published, fit_seconds, resumed)


def count_parameters(rec: Recommender) -> int:
    """Trainable parameters of a fitted model (0 for estimators such as POP, whose counts are not learned)."""
    core = rec.core
    if isinstance(core, torch.nn.Module):
        return sum(p.numel() for p in core.parameters() if p.requires_grad)
    return 0


def machine_info() -> dict[str, Any]:
    """The machine and versions a result was measured with."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "attnrec": __version__,
    }


# -- the cold-item protocol -------------------------------------------------------------------------
def add_cold_items(rec: Recommender, cold: ColdStart) -> bool:
    """Add ``cold``'s items to the fitted ``rec`` when it can score items from their features; whether it
    did."""
    if cold.cold_features is None or not cold_items.takes_new_items(rec.core, rec.context_, rec.config):
        return False
    added = rec.add_items(cold.cold_features)
    assert added == cold.cold_ids, "cold items must take the indices the test cases use"
    return True


def test_cold(rec: Recommender, cold: ColdStart, protocol: Protocol) -> EvalResult:
    """Test ``rec`` on ``cold``'s test cases under full-ranking ``protocol``: overall, cold and warm
    targets."""
    if protocol.candidates != "full":
        raise ValueError(
            "the cold-item protocol is measured under full ranking only (a sampled protocol would "
            "draw negatives among items an ID-only model has no score for)"
        )
    cases = cold.split.test
    is_cold = cold.is_cold(cases.targets)
    res = evaluate(
        unscored_last(rec.score_histories, cold.data.n_items),
        cases,
        protocol,
        data=rec.source_,
        split=cold.split.describe(),
        target="test",
        groups={"cold": is_cold, "warm": ~is_cold},
    )
    rec.evaluations_.append(res.to_dict())
    return res


def cold_record(cold: ColdStart, added: bool) -> dict[str, Any]:
    """The result JSON's ``cold_items`` entry: the protocol's record and how the model scored the cold
    items."""
    how = (
        "added after training from their features alone (all-zero ID vectors where the model has them)"
        if added
        else "not scorable by this model (no features in its item table): scored -inf, ranked last"
    )
    return cold.record.to_dict() | {"text": cold.record.describe(), "scored": how}
