"""Attributions of a model with per-event inputs (issue #19): occlusion removes each event with its columns;
attention, which sees the items only, is a clear one-line error instead of a wrong answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnrec.data.schema import IdMap, Sequences
from attnrec.evaluation.attribution import AttributionError, attribute
from attnrec.models.item_context import ModelContext
from attnrec.models.sasrec import SASRec, SASRecConfig

HISTORY = np.array([3, 7, 2, 9])
COLUMNS = {
    "timestamp": np.array([1_700_000_000, 1_700_003_000, 1_700_090_000, 1_700_200_000]),
    "event": np.array([1, 2, 2, 1]),
}
TARGETS = np.array([4, 5])


def model() -> SASRec:
    torch.manual_seed(0)
    cfg = SASRecConfig(
        hidden=16,
        max_len=8,
        n_heads=2,
        dropout=0.0,
        loss="ce",
        time_intervals=8,
        time_features="periodic",
        event_input=True,
    )
    net = SASRec(
        cfg, 1, 12, ModelContext(events=IdMap(np.array(["buy", "view"], dtype=object), offset=1))
    ).eval()
    with torch.no_grad():
        net.event_ctx.intervals.normal_(0.0, 1.0)  # type: ignore[union-attr]  # visible interval biases
    return net


def _score(net: SASRec, keep: np.ndarray) -> np.ndarray:
    seqs = Sequences(np.array([0, keep.sum()]), HISTORY[keep], 12, {k: v[keep] for k, v in COLUMNS.items()})
    with torch.no_grad():
        return net.score(net.score_inputs(np.zeros(1, dtype=np.int64), seqs))[0, TARGETS].double().numpy()


def test_occlusion_removes_each_event_with_its_time_and_type() -> None:
    net = model()
    att = attribute(net, HISTORY, TARGETS, n_items=12, method="occlusion", columns=COLUMNS)
    full = _score(net, np.ones(4, dtype=bool))
    for j in range(4):
        keep = np.arange(4) != j
        np.testing.assert_allclose(att.values[:, j], full - _score(net, keep), rtol=1e-5, atol=1e-6)
    # the columns matter: the same items with other times give other attributions
    moved = {"timestamp": COLUMNS["timestamp"] + np.array([0, 80_000, 0, 0]), "event": COLUMNS["event"]}
    assert not np.allclose(att.values, attribute(net, HISTORY, TARGETS, n_items=12, columns=moved).values)


def test_greedy_removes_its_chosen_events_with_their_time_and_type() -> None:
    net = model()
    att = attribute(net, HISTORY, TARGETS, n_items=12, method="greedy", columns=COLUMNS, depth=3)
    full = _score(net, np.ones(4, dtype=bool))
    for k in range(len(TARGETS)):
        order = att.ranking(k)
        first = np.arange(4) != order[0]
        np.testing.assert_allclose(
            att.values[k, order[0]], full[k] - _score(net, first)[k], rtol=1e-5, atol=1e-6
        )
        second = first & (np.arange(4) != order[1])  # round 2: the drop given the first choice is gone
        np.testing.assert_allclose(
            att.values[k, order[1]], _score(net, first)[k] - _score(net, second)[k], rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize("method", ["attention", "rollout"])
def test_attention_is_a_clear_error_for_a_model_with_per_event_inputs(method: str) -> None:
    with pytest.raises(AttributionError, match=r"per-event events, timestamps; use occlusion") as err:
        attribute(model(), HISTORY, TARGETS, n_items=12, method=method, columns=COLUMNS)
    assert "\n" not in str(err.value)
