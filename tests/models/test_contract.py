"""Contract tests run for every registered model (discovered from the registry), and what each declares it can
do."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnrec import Recommender, list_models
from attnrec.config import config_from_dict, config_to_dict
from attnrec.data.feature_files import with_features
from attnrec.data.features import FeatureTable
from attnrec.data.schema import Interactions
from attnrec.data.split import leave_one_out
from attnrec.models.contracts import WeightedLoss, capabilities
from attnrec.models.item_context import ItemFeatures, ModelContext
from attnrec.models.registry import get_spec
from synthetic_logs import ring_log

FAST_TRAIN = {"max_epochs": 2, "batch_size": 64, "patience": 5}


# Models that read nothing but item features get a feature table on the ring (tags by item number).
NEEDS_ITEM_FEATURES = {n for n in list_models("sequential") if get_spec(n).needs_item_features}


def _with_tags(data: Interactions) -> Interactions:
    ids = data.items.to_list()
    table = FeatureTable.from_frame(
        pd.DataFrame({"item_id": ids, "tags": [[f"t{int(i[1:]) % 5}"] for i in ids]}),
        "item_id",
        {"tags": "multi"},
    )
    return with_features(data, item=table)


def _fit(name: str, data: Interactions, seed: int = 0) -> Recommender:
    spec = Recommender(name).spec
    data = _with_tags(data) if name in NEEDS_ITEM_FEATURES else data
    preset = "demo" if "demo" in spec.presets else None
    train = FAST_TRAIN | {"seed": seed, "time_budget": 0.0}
    return Recommender(name, None, train, preset=preset).fit(data, leave_one_out(data), progress=False)


@pytest.fixture(scope="module", params=list_models("sequential"))
def fitted(request: pytest.FixtureRequest, ring: Interactions) -> Recommender:
    return _fit(request.param, ring)


def test_recommend_returns_k_unique_unseen_external_ids(fitted: Recommender, ring: Interactions) -> None:
    seen = set(ring.items.to_external(ring.sequences()[3]))
    rec = fitted.recommend(user=ring.users.to_external([3])[0], k=10)
    assert len(rec.items) == 10 == len(set(rec.items))
    assert not set(rec.items) & seen
    assert all(i in ring.items for i in rec.items)
    assert rec.scores == sorted(rec.scores, reverse=True)
    with_seen = fitted.recommend(user=ring.users.to_external([3])[0], k=ring.n_items, exclude_seen=False)
    assert set(with_seen.items) & seen


def test_ad_hoc_history_with_unknown_items(fitted: Recommender) -> None:
    rec = fitted.recommend(history=["i1", "i2", "nope"], k=5)
    assert rec.unknown_items == ["nope"] and len(rec.items) == 5 and not {"i1", "i2"} & set(rec.items)


def test_save_load_identical_scores(fitted: Recommender, ring: Interactions, tmp_path: Path) -> None:
    split = leave_one_out(ring)
    loaded = Recommender.load(fitted.save(tmp_path / fitted.name))
    rows = np.arange(10)
    a = fitted.score_histories(split.test.users[rows], split.test.histories.take(rows))
    b = loaded.score_histories(split.test.users[rows], split.test.histories.take(rows))
    assert torch.allclose(a, b, atol=1e-6, equal_nan=True)


def test_same_seed_same_scores_other_seed_other_scores(fitted: Recommender, ring: Interactions) -> None:
    if not capabilities(fitted.core).trainable:
        pytest.skip("a closed-form fit (counting) uses no seed: nothing here could fail")
    split = leave_one_out(ring)
    rows = np.arange(10)
    users, hist = split.test.users[rows], split.test.histories.take(rows)
    a = fitted.score_histories(users, hist)
    b = _fit(fitted.name, ring).score_histories(users, hist)
    c = _fit(fitted.name, ring, seed=1).score_histories(users, hist)
    assert torch.allclose(a, b, atol=1e-6, equal_nan=True)
    assert not torch.allclose(a, c, atol=1e-6, equal_nan=True), (
        "the seed must reach initialisation and sampling"
    )


def test_config_round_trip(fitted: Recommender) -> None:
    assert config_from_dict(type(fitted.config), config_to_dict(fitted.config)) == fitted.config


def test_candidate_scores_are_the_matching_columns_of_the_full_scores(
    fitted: Recommender, ring: Interactions
) -> None:
    from attnrec.evaluation.protocol import Protocol, evaluate

    split = leave_one_out(ring)
    rows = np.arange(12)
    users, hist = split.test.users[rows], split.test.histories.take(rows)
    items = torch.as_tensor(np.random.default_rng(0).integers(1, ring.n_items + 1, size=(12, 9)))  # (B, C)
    full = fitted.score_histories(users, hist).float()
    got = fitted.score_candidates(users, hist, items).float()
    assert got.shape == (12, 9)
    assert torch.allclose(got, full.gather(1, items), atol=1e-5, rtol=1e-5)
    # Evaluation under sampled negatives takes this path and ranks as the full scores do (up to
    # float rounding between a matrix product and per-candidate dot products).
    proto = Protocol(candidates="sampled", n_negatives=20)
    fast = fitted.evaluate(split.test, proto).metrics
    slow = evaluate(fitted.score_histories, split.test, proto).metrics
    assert fast == pytest.approx(slow, abs=0.01) and 0 < fast["NDCG@10"] <= 1


# What each model declares it can do (the protocols its class line subclasses). A model that loses or
# gains a capability changes what serving, evaluation and attention insight do with it: update here.
SEQUENTIAL = {"trainable", "scores_catalog"}
FACTORISED = SEQUENTIAL | {"factorised"}
TRANSFORMER = {"attention", "weighted_loss", "shared_batch"}
EXPECTED_CAPABILITIES = {
    "sasrec": FACTORISED | TRANSFORMER | {"embedding_inputs"},
    "bert4rec": FACTORISED | {"item_bias"} | TRANSFORMER | {"embedding_inputs"},
    "hstu": FACTORISED
    | TRANSFORMER
    | {"embedding_inputs"},  # attention: unnormalised SiLU weights, not probabilities
    "esasrec": FACTORISED | TRANSFORMER | {"embedding_inputs"},
    # negatives drawn per sequence (B, k): split with the rows under DDP, nothing shared by the batch
    "gsasrec": FACTORISED | {"attention", "embedding_inputs", "weighted_loss", "shared_batch"},
    "gru4rec": FACTORISED | {"item_bias"},
    "gru4rec-plus": FACTORISED | {"item_bias"},
    "caser": FACTORISED | {"item_bias"},
    "bprmf": FACTORISED | {"item_bias"},
    "fpmc": FACTORISED,
    "fmc": FACTORISED,
    "ncf": SEQUENTIAL | {"candidate_scoring"},
    "transrec": SEQUENTIAL | {"candidate_scoring"},
    "peter": {"trainable"},  # the explain task: Trainable[EncodedReviews], no catalog scores
    "pop": {"closed_form", "scores_catalog"},  # fitted by counting, not by the training loop
    "recent": {"closed_form", "scores_catalog"},  # counting, and the history at scoring time
    "content": {"closed_form", "scores_catalog", "factorised"},  # attribute cosine: profile @ item vectors
}
SMALL_CONFIG = {"peter": {"emsize": 16, "n_heads": 2, "ffn": 16}}


def test_every_registered_model_has_a_capability_row() -> None:
    assert set(EXPECTED_CAPABILITIES) == set(list_models())


@pytest.mark.parametrize("name", sorted(EXPECTED_CAPABILITIES))
def test_capabilities_match_the_table(name: str) -> None:
    spec = get_spec(name)
    args = (_context(),) if name in NEEDS_ITEM_FEATURES else ()
    model = spec.cls(spec.config_cls(**SMALL_CONFIG.get(name, {})), 3, 10, *args)
    assert set(capabilities(model).names()) == EXPECTED_CAPABILITIES[name]


def _context() -> ModelContext:
    data = _with_tags(ring_log(n_users=20, n_items=10))
    assert data.item_features is not None
    return ModelContext(ItemFeatures.from_table(data.item_features, data.items))


# The shifted next-item models: inputs "seq" and targets "target" of one shape, target t the item after input
# t.
SHIFTED = ["sasrec", "esasrec", "gsasrec", "hstu", "gru4rec"]


@pytest.mark.parametrize("name", SHIFTED)
def test_a_first_item_is_never_a_target(name: str) -> None:
    """Inputs ``[0, 0, a, b]`` and targets ``[0, a, b, c]`` would ask the model for ``a`` after nothing but
    padding: no next-item case (SASRec's o_t is padding where s_t is; the authors' code never trains it)."""
    from attnrec.data.schema import Sequences

    spec = get_spec(name)
    model = spec.cls(config_from_dict(spec.config_cls, {"max_len": 6}), 3, 20)
    train = Sequences.from_lists(
        [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], [12, 13]], 20
    )  # short, longer than 7, two
    batch = next(iter(model.train_batches(train, 8, np.random.default_rng(0))))
    seq, target = batch["seq"], batch["target"]  # (B, T)
    assert seq.shape == target.shape
    assert not ((seq == 0) & (target > 0)).any()  # a target only after a real input
    firsts = {1, 4, 12}  # each history's first item: in a window only where its history fits
    assert not firsts & set(target.flatten().tolist())
    assert int((target > 0).sum()) == 2 + 6 + 1  # 2 of [1, 2, 3]; 6 of the longer one's last 7; 1 of [12, 13]
    if isinstance(model, WeightedLoss):  # the loss averages over exactly these
        assert model.loss_terms(batch) == 9
