"""Cold-start items: a model trained with item features ranks items it never saw, from their features.

The synthetic log makes the category decide what comes next (a user stays in one category), so a
new item of the history's category must outrank every item of the other categories, and a new item
of another category must not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnrec.config import ConfigError
from attnrec.data.build import from_columns
from attnrec.data.features import FeatureTable
from attnrec.data.schema import DataError, DataSource, Interactions
from attnrec.recommend import Recommender

N_CAT, PER_CAT = 5, 8
TRAIN = {"max_epochs": 8, "lr": 5e-3, "batch_size": 64, "seed": 0}
HISTORY = ["c2i1", "c2i3", "c2i5"]
NEW = pd.DataFrame({"item_id": ["new2", "new4"], "category": ["cat2", "cat4"]})


def category_log(features: bool = True) -> Interactions:
    """300 users, each staying in one of 5 categories of 8 items; the category is the item feature."""
    rng = np.random.default_rng(0)
    users, items = [], []
    for u in range(300):
        c = int(rng.integers(N_CAT))
        for _ in range(int(rng.integers(5, 15))):
            users.append(f"u{u}")
            items.append(f"c{c}i{int(rng.integers(PER_CAT))}")
    feats = pd.DataFrame(
        {
            "item_id": [f"c{c}i{i}" for c in range(N_CAT) for i in range(PER_CAT)],
            "category": [f"cat{c}" for c in range(N_CAT) for _ in range(PER_CAT)],
        }
    )
    table = FeatureTable.from_frame(feats, "item_id", {"category": "categorical"}) if features else None
    return from_columns(users, items, source=DataSource("cats", sha256="0" * 64), item_features=table)


@pytest.fixture(scope="module")
def data() -> Interactions:
    return category_log()


def fitted(data: Interactions, model: str = "sasrec", **over: object) -> Recommender:
    config = {"hidden": 16, "max_len": 10, "n_layers": 1, "item_features": "sum", "id_dropout": 0.5} | over
    if model == "sasrec":
        config.setdefault("loss", "ce")
    return Recommender(model, config, TRAIN).fit(data, progress=False)


@pytest.mark.parametrize(
    "model, over", [("sasrec", {}), ("sasrec", {"item_features": "gate"}), ("bert4rec", {})]
)
def test_a_cold_item_of_the_right_category_is_recommended(
    data: Interactions, model: str, over: dict[str, object]
) -> None:
    rec = fitted(data, model, **over)
    assert rec.add_items(NEW) == ["new2", "new4"]
    assert rec.items_ is not None and len(rec.items_) == N_CAT * PER_CAT + 2
    answer = rec.recommend(history=HISTORY, k=N_CAT * PER_CAT)  # every unseen item, best first
    ranked = answer.items
    assert "new2" in ranked[:10]
    others = [i for i in ranked if not i.startswith(("c2", "new2"))]
    assert ranked.index("new2") < ranked.index(others[0])  # above every item of another category
    assert ranked.index("new4") > ranked.index("new2")
    s2, s4 = answer.scores[ranked.index("new2")], answer.scores[ranked.index("new4")]
    assert np.isfinite([s2, s4]).all() and s2 != s4
    assert all(
        i.startswith("c2") for i in rec.similar_items("new2", k=3).items
    )  # its vector is its category's


def test_save_and_load_keep_features_and_added_items(data: Interactions, tmp_path: Path) -> None:
    rec = fitted(data)
    before = rec.recommend(history=HISTORY, k=10)
    rec.save(tmp_path / "plain")
    again = Recommender.load(tmp_path / "plain")  # no data needed: codes in the weights, vocab in JSON
    assert again.recommend(history=HISTORY, k=10).items == before.items
    rec.add_items(NEW)
    after = rec.recommend(history=HISTORY, k=10)
    rec.save(tmp_path / "grown")
    loaded = Recommender.load(tmp_path / "grown")
    got = loaded.recommend(history=HISTORY, k=10)
    assert got.items == after.items and np.allclose(got.scores, after.scores)
    assert "new2" in got.items
    loaded.add_items(pd.DataFrame({"item_id": ["new0"], "category": ["cat0"]}))  # a loaded model grows too
    assert loaded.items_ is not None and loaded.items_.get("new0") == N_CAT * PER_CAT + 3


def test_adding_items_is_refused_clearly(data: Interactions) -> None:
    plain = Recommender(
        "sasrec", {"hidden": 16, "max_len": 10, "n_layers": 1, "loss": "ce"}, TRAIN | {"max_epochs": 1}
    )
    plain.fit(data, progress=False)
    with pytest.raises(ConfigError, match="needs a model trained with item features"):
        plain.add_items(NEW)
    rec = fitted(data, id_dropout=0.0, **{"n_layers": 1})
    with pytest.raises(DataError, match="already in the catalog"):
        rec.add_items(pd.DataFrame({"item_id": ["c0i1"], "category": ["cat0"]}))
    with pytest.raises(DataError, match="none of the model's fields"):
        rec.add_items(pd.DataFrame({"item_id": ["x"], "colour": ["red"]}))
    with pytest.raises(DataError, match="no ID column"):
        rec.add_items(pd.DataFrame({"sku": ["x"], "category": ["cat0"]}))
    assert rec.items_ is not None and len(rec.items_) == N_CAT * PER_CAT  # nothing was added


def test_features_asked_for_on_a_log_without_them_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="needs item features, but the data has none"):
        Recommender("sasrec", {"item_features": "sum"}, TRAIN).fit(
            category_log(features=False), progress=False
        )
    with pytest.raises(ConfigError, match="unknown field"):
        Recommender("bert4rec", {"item_features": "sum", "feature_fields": "genres,brand"}, TRAIN).fit(
            category_log(), progress=False
        )


def test_items_added_over_http_are_recommended_at_once(data: Interactions) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
        from fastapi.testclient import TestClient

    from attnrec.serving.app import ServingConfig, create_app

    rec = fitted(data)
    key = {"Authorization": "Bearer cold-items-key-0123456789"}
    body = {
        "model": "m",
        "items": [{"item_id": "new2", "category": "cat2"}, {"item_id": "new4", "category": "cat4"}],
    }
    with TestClient(
        create_app({"m": rec}, ServingConfig(admin_keys=frozenset({key["Authorization"][7:]})))
    ) as c:
        assert (
            c.post("/v1/admin/items", json=body).status_code == 401
        )  # guarded like the other admin endpoints
        r = c.post("/v1/admin/items", json=body, headers=key)
        assert r.status_code == 200, r.text
        assert r.json() == {"name": "m", "added": ["new2", "new4"], "n_items": N_CAT * PER_CAT + 2}
        got = c.post("/v1/recommend", json={"history": HISTORY, "k": 10}, headers=key).json()
        assert "new2" in [x["item"] for x in got["items"]]
        again = c.post("/v1/admin/items", json=body, headers=key)
        assert again.status_code == 422 and "already in the catalog" in again.json()["error"]["message"]
    assert (
        rec.items_ is not None and "new2" not in rec.items_
    )  # copy-on-write: the object passed in is untouched
