"""Per-recommendation attributions: occlusion is the score change it claims, integrated gradients are
complete, and a planted trigger item that determines the target is ranked first by the faithful methods."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd
import pytest
import torch

from attnrec.data.features import FeatureTable
from attnrec.data.schema import IdMap, Sequences
from attnrec.evaluation.attribution import METHODS, AttributableModel, AttributionError, attribute
from attnrec.models.contracts import EmbeddingInputs, Scorer
from attnrec.models.item_context import ItemFeatures, ModelContext
from attnrec.models.registry import get_spec
from attnrec.models.sasrec import SASRec, SASRecConfig
from attnrec.training.loop import train
from attnrec.training.train_config import TrainConfig

N_TRIGGERS, N_NOISE = 5, 30
N_ITEMS = 2 * N_TRIGGERS + N_NOISE  # triggers 1..5, their targets 6..10, noise 11..40


def planted(rng: np.random.Generator, trigger: int, length: int = 7) -> list[int]:
    """Noise items with ``trigger`` at a random place, then (last) the target that ``trigger`` determines."""
    noise = list(rng.choice(np.arange(2 * N_TRIGGERS + 1, N_ITEMS + 1), size=length - 1, replace=False))
    noise.insert(int(rng.integers(0, length - 2)), trigger)  # never the newest position: recency alone fails
    return [int(i) for i in noise] + [trigger + N_TRIGGERS]


@pytest.fixture(scope="module")
def trained() -> SASRec:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    seqs = Sequences.from_lists(
        [planted(rng, int(rng.integers(1, N_TRIGGERS + 1))) for _ in range(1500)], N_ITEMS
    )
    model = SASRec(
        SASRecConfig(hidden=32, n_heads=1, n_layers=2, max_len=10, dropout=0.0, loss="ce"), 1500, N_ITEMS
    )
    train(
        model,
        seqs,
        lambda m: {"NDCG@10": 0.0},
        TrainConfig(max_epochs=25, batch_size=128, lr=5e-3, device="cpu", eval_every=1000, threads=1, seed=0),
        progress=False,
    )
    return model.eval()


def untrained() -> SASRec:
    torch.manual_seed(3)
    return SASRec(SASRecConfig(hidden=16, n_heads=2, n_layers=2, max_len=6, dropout=0.0), 10, 20).eval()


def rescore(model: Scorer, history: list[int], target: int) -> float:
    with torch.no_grad():
        batch = model.score_inputs(np.array([0]), Sequences.from_lists([history], 20))
        return float(model.score(batch)[0, target])


def test_occlusion_is_exactly_the_score_change_of_removing_each_event() -> None:
    model = untrained()
    history = [3, 7, 7, 12, 1, 19, 4, 9]  # longer than max_len 6: only the newest 6 are attributed
    a = attribute(model, np.array(history), np.array([2, 5, 11]), n_items=20, method="occlusion")
    assert a.events.tolist() == [2, 3, 4, 5, 6, 7], "the window: the 6 most recent events"
    for k, target in enumerate([2, 5, 11]):
        full = rescore(model, history, target)
        assert a.scores[k] == pytest.approx(full, abs=1e-5)
        for j, pos in enumerate(a.events):
            without = history[:pos] + history[pos + 1 :]  # an older event slides into the window
            assert a.values[k, j] == pytest.approx(full - rescore(model, without, target), abs=1e-5)


def test_integrated_gradients_are_complete() -> None:
    model = untrained()
    history = np.array([3, 7, 12, 1, 19])
    a = attribute(
        model, history, np.array([2, 5, 11, 17]), n_items=20, method="integrated_gradients", steps=64
    )
    assert a.baseline is not None and a.completeness_gap is not None
    moved = np.abs(a.scores - a.baseline)
    assert moved.min() > 1e-3, "the baseline must actually change the scores, or the check is empty"
    assert np.abs(a.completeness_gap).max() < 0.02 * max(1.0, float(moved.max()))
    coarse = attribute(model, history, np.array([2]), n_items=20, method="integrated_gradients", steps=1)
    assert not np.allclose(coarse.values[0], a.values[0], atol=1e-4), "steps change the path integral"


def test_attention_methods_share_one_ranking_and_are_distributions() -> None:
    model = untrained()
    for method in ("attention", "rollout"):
        a = attribute(model, np.array([3, 7, 12, 1]), np.array([2, 5]), n_items=20, method=method)
        assert a.shared and np.array_equal(a.values[0], a.values[1])
        assert (a.values >= 0).all() and a.values[0].sum() <= 1.0 + 1e-6


@pytest.mark.parametrize("method", ["occlusion", "greedy", "integrated_gradients"])
def test_the_planted_trigger_is_ranked_first(trained: SASRec, method: str) -> None:
    rng = np.random.default_rng(42)
    for trigger in range(1, N_TRIGGERS + 1):
        history = planted(rng, trigger)[:-1]
        with torch.no_grad():
            top = int(
                trained.score(trained.score_inputs(np.array([0]), Sequences.from_lists([history], N_ITEMS)))[
                    0
                ].argmax()
            )
        assert top == trigger + N_TRIGGERS, "the model learned the rule (else the test says nothing)"
        a = attribute(trained, np.array(history), np.array([top]), n_items=N_ITEMS, method=method)
        assert history[int(a.events[a.ranking(0)[0]])] == trigger, f"{method} missed the planted trigger"


def test_bad_requests_are_clear_errors() -> None:
    model = untrained()
    with pytest.raises(AttributionError, match="unknown attribution method"):
        attribute(model, np.array([1, 2]), np.array([3]), n_items=20, method="shap")
    with pytest.raises(AttributionError, match="no known items"):
        attribute(model, np.array([], dtype=np.int64), np.array([3]), n_items=20)
    with pytest.raises(AttributionError, match="at least two"):
        attribute(model, np.array([4]), np.array([3]), n_items=20, method="occlusion")
    with pytest.raises(AttributionError, match="depth must be at least 1"):
        attribute(model, np.array([1, 2]), np.array([3]), n_items=20, method="greedy", depth=0)
    assert set(METHODS) == {"attention", "rollout", "occlusion", "greedy", "integrated_gradients"}


def brute_greedy(model: Scorer, history: list[int], target: int, events: list[int], depth: int) -> list[int]:
    """Greedy joint occlusion spelled out by re-scoring: the history positions in choice order."""
    chosen: list[int] = []
    size = 1
    while len(chosen) < depth:
        left = [e for e in events if e not in chosen]
        without = {
            e: rescore(model, [h for p, h in enumerate(history) if p not in {*chosen, e}], target)
            for e in left
        }
        chosen += sorted(left, key=lambda e: (without[e], -e))[: min(size, depth - len(chosen))]
        size *= 2
    return chosen


def test_greedy_chooses_in_rounds_what_lowers_the_score_most() -> None:
    model = untrained()
    history = [3, 7, 7, 12, 1, 19, 4, 9, 15, 2]  # longer than max_len 6: older events slide in as events go
    targets = np.array([2, 5, 11])
    a = attribute(model, np.array(history), targets, n_items=20, method="greedy", depth=5)
    occ = attribute(model, np.array(history), targets, n_items=20, method="occlusion")
    assert a.order is not None and a.order.shape == (3, 6)
    for k, target in enumerate(targets.tolist()):
        order = a.events[a.ranking(k)].tolist()
        assert sorted(order) == a.events.tolist(), "every window event is ranked once"
        assert order[:5] == brute_greedy(
            model, history, target, a.events.tolist(), 5
        )  # rounds of 1, 2, then 2
        assert order[0] == occ.events[occ.ranking(k)[0]], "round 1 is occlusion's top event"
        first = a.ranking(k)[0]
        assert a.values[k, first] == pytest.approx(occ.values[k, first], abs=1e-5), (
            "round 1's drop is occlusion's"
        )
    fewer = attribute(model, np.array(history), targets, n_items=20, method="greedy", depth=3)
    assert np.array_equal(fewer.order[:, :3], a.order[:, :3]), "a smaller depth makes the same first choices"


# -- every model with input embeddings: SASRec, BERT4Rec, gSASRec, eSASRec, HSTU -----------------
SMALL = {
    "sasrec": {"hidden": 16, "n_heads": 2, "max_len": 6, "dropout": 0.0},
    "bert4rec": {"hidden": 16, "n_heads": 2, "max_len": 6, "dropout": 0.0, "attn_dropout": 0.0},
    "gsasrec": {"hidden": 16, "n_heads": 2, "max_len": 6, "dropout": 0.0, "n_negatives": 4},
    "esasrec": {"hidden": 16, "n_heads": 2, "max_len": 6, "dropout": 0.0, "n_negatives": 4},
    "hstu": {"hidden": 16, "n_heads": 2, "dqk": 8, "dv": 8, "max_len": 6, "dropout": 0.0, "n_negatives": 4},
}
CASES = [*SMALL, "sasrec+features", "bert4rec+features"]  # the fused item table: features reach the content


def features() -> ModelContext:
    """Items ``i0..i19``: category ``k % 3`` (internal item ``k + 1``)."""
    ids = [f"i{k}" for k in range(20)]
    table = FeatureTable.from_frame(
        pd.DataFrame({"item_id": ids, "category": [f"c{k % 3}" for k in range(20)]}),
        "item_id",
        {"category": "categorical"},
    )
    return ModelContext(ItemFeatures.from_table(table, IdMap(np.array(ids, dtype=object), 1), ()))


@runtime_checkable
class EmbeddingModel(EmbeddingInputs, AttributableModel, Protocol):
    """What these tests use: the attribution interface's model with input embeddings."""


def embedding_model(case: str) -> EmbeddingModel:
    """An untrained, seeded model in eval mode; every all-zero parameter (biases, BERT4Rec's output bias)
    is drawn at random, so a score path that leaves one out cannot agree with the model's own score."""
    name, _, fused = case.partition("+")
    spec = get_spec(name)
    torch.manual_seed(5)
    extra = {"item_features": "sum"} if fused else {}
    args = (features(),) if fused else ()
    model = spec.cls(spec.config_cls(**SMALL[name], **extra), 10, 20, *args)
    with torch.no_grad():
        for p in model.parameters():
            if not p.any():
                p.normal_(0.0, 0.3)
    assert isinstance(model, EmbeddingModel)
    model.eval()
    return model


def inputs(model: EmbeddingModel, histories: list[list[int]]) -> dict[str, torch.Tensor]:
    return model.score_inputs(np.arange(len(histories)), Sequences.from_lists(histories, 20))


@pytest.mark.parametrize("case", CASES)
def test_score_embedded_of_the_models_own_embeddings_is_its_score(case: str) -> None:
    model = embedding_model(case)
    batch = inputs(model, [[3, 7, 12, 1, 19, 4, 9], [5]])  # one row longer than the window, one short
    if case == "hstu":  # the time bias must reach score_embedded as it reaches score
        batch["timestamps"] = torch.where(batch["seq"] > 0, torch.arange(batch["seq"].shape[1]) * 5000 + 1, 0)
    with torch.no_grad():
        own = model.score_embedded(batch, model.input_embeddings(batch))  # (B, I+1)
        assert torch.allclose(own, model.score(batch), atol=1e-6, rtol=0.0)
        other = model.score_embedded(batch, torch.zeros_like(model.input_embeddings(batch)))
        assert not torch.allclose(other[:, 1:], own[:, 1:], atol=1e-3), "score_embedded must read the content"


@pytest.mark.parametrize("case", CASES)
def test_content_is_the_items_own_row_before_positions(case: str) -> None:
    model = embedding_model(case)
    batch = inputs(model, [[4, 4, 4, 4]])
    with torch.no_grad():
        emb = model.input_embeddings(batch)[0]  # (T, D)
    items = (batch["seq"][0] == 4).nonzero()[:, 0]
    assert len(items) == 4 and emb[items].abs().sum() > 0
    assert torch.equal(emb[items], emb[items[:1]].expand(4, -1)), "one item, four positions: the same content"
    if case.startswith("bert4rec"):  # [mask] keeps its own, non-zero row (kept by the IG baseline)
        assert (
            batch["seq"][0, -1] == 21 and emb[-1].abs().sum() > 0 and not torch.equal(emb[-1], emb[items[0]])
        )


@pytest.mark.parametrize("case", CASES)
def test_integrated_gradients_are_complete_for_every_model(case: str) -> None:
    model = embedding_model(case)
    a = attribute(
        model,
        np.array([3, 7, 12, 1, 19]),
        np.array([2, 5, 11, 17]),
        n_items=20,
        method="integrated_gradients",
        steps=64,
    )
    assert a.baseline is not None and a.completeness_gap is not None
    moved = np.abs(a.scores - a.baseline)
    assert moved.min() > 1e-3, "the baseline must actually change the scores, or the check is empty"
    assert np.abs(a.completeness_gap).max() < 0.02 * max(1.0, float(moved.max()))


@pytest.mark.parametrize("case", CASES)
def test_occlusion_is_the_score_change_for_every_model(case: str) -> None:
    model = embedding_model(case)
    history, target = [3, 7, 7, 12, 1, 19, 4, 9], 11  # longer than every window: older events slide in
    a = attribute(model, np.array(history), np.array([target]), n_items=20, method="occlusion")
    full = rescore(model, history, target)
    assert a.scores[0] == pytest.approx(full, abs=1e-5)
    for j, pos in enumerate(a.events):
        assert a.values[0, j] == pytest.approx(
            full - rescore(model, history[:pos] + history[pos + 1 :], target), abs=1e-5
        )
