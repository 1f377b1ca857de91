"""Warm starts (fit(init_from=...)) and the final fit (split="none")."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from attnrec import Recommender
from attnrec.config import ConfigError
from attnrec.data.features import FeatureTable
from attnrec.data.schema import Interactions, Sequences
from attnrec.data.split import FINAL, leave_one_out
from attnrec.recommend import cold_items, warm
from attnrec.recommend.model_core import build_core

TINY = {"hidden": 16, "n_layers": 1, "n_heads": 1, "max_len": 12}
FAST = {"max_epochs": 2, "batch_size": 64, "seed": 3}


def ring_frame(n_users: int = 60, n_items: int = 30, seed: int = 0) -> pd.DataFrame:
    """Users walk a ring of items, one event per minute, their starts spread over a day."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        start, t0 = int(rng.integers(n_items)), float(rng.integers(0, 86_400))
        for t in range(int(rng.integers(6, 16))):
            rows.append((f"u{u}", f"i{(start + t) % n_items}", t0 + 60 * t))
    return pd.DataFrame(rows, columns=["user", "item", "timestamp"])


def first_and_all(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The first 80% of the log by time, and all of it plus new users walking new items."""
    cut = frame["timestamp"].quantile(0.8)
    new = pd.DataFrame(
        [(f"n{u}", f"new{(u + t) % 5}", 90_000.0 + 60 * t) for u in range(6) for t in range(8)],
        columns=["user", "item", "timestamp"],
    )
    return frame[frame["timestamp"] <= cut], pd.concat([frame, new], ignore_index=True)


@pytest.fixture(scope="module")
def old_and_new(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recommender, Recommender, Path]:
    first, everything = first_and_all(ring_frame())
    old = Recommender("sasrec", TINY, FAST).fit(first, progress=False)
    where = tmp_path_factory.mktemp("warm") / "old"
    old.save(where)
    new = Recommender("sasrec", train=FAST).fit(everything, "leave-one-out", init_from=where, progress=False)
    return old, new, where


def test_warm_start_keeps_every_old_index_and_appends_new_ids(
    old_and_new: tuple[Recommender, Recommender, Path],
) -> None:
    old, new, _ = old_and_new
    assert (
        old.items_ is not None
        and new.items_ is not None
        and old.users_ is not None
        and new.users_ is not None
    )
    n_items, n_users = len(old.items_), len(old.users_)
    assert new.items_.to_list()[:n_items] == old.items_.to_list()
    assert new.users_.to_list()[:n_users] == old.users_.to_list()
    assert {f"new{i}" for i in range(5)} <= set(new.items_.to_list()[n_items:])
    assert {f"n{u}" for u in range(6)} <= set(new.users_.to_list()[n_users:])
    assert new.config == old.config  # the old model's settings, not chosen again from the data


def test_warm_start_copies_every_weight_and_grows_the_item_table() -> None:
    first, everything = first_and_all(ring_frame())
    old = Recommender("sasrec", TINY, FAST).fit(first, progress=False)
    assert old.items_ is not None and old.users_ is not None
    source = Recommender("sasrec").warm_source(old)
    data = warm.extend_log(Interactions.from_frame(everything), source)
    core, _ = warm.grown_core(old.spec, old.config, source, data, seed=3, context=None)
    fresh = build_core(old.spec, old.config, data.n_users, data.n_items, seed=3)
    before, after = old.core.state_dict(), core.state_dict()
    for key, value in before.items():  # old rows at their old indices, every other weight as it was
        torch.testing.assert_close(after[key][: value.shape[0]], value, msg=key)
    n = len(old.items_) + 1
    grown = after["item_emb.weight"]
    assert grown.shape[0] == data.n_items + 1 > n
    torch.testing.assert_close(
        grown[n:], fresh.state_dict()["item_emb.weight"][n:]
    )  # the seeded initialisation


def test_warm_started_model_loads_and_serves_new_items_and_users(
    old_and_new: tuple[Recommender, Recommender, Path], tmp_path: Path
) -> None:
    _, new, _ = old_and_new
    new.save(tmp_path / "new")
    back = Recommender.load(tmp_path / "new")
    assert back.items_ is not None and back.users_ is not None and new.items_ is not None
    assert back.items_.to_list() == new.items_.to_list() and back.users_.to_list() == new.users_.to_list()
    answer = back.recommend(user="n0", k=len(back.items_), exclude_seen=False)
    assert answer.fallback is None or answer.fallback == ""
    assert {f"new{i}" for i in range(5)} <= set(answer.items)  # the new items are in the catalog it scores


def test_warm_start_refuses_another_model_or_another_hidden_size(
    old_and_new: tuple[Recommender, Recommender, Path],
) -> None:
    _, _, where = old_and_new
    _, everything = first_and_all(ring_frame())
    with pytest.raises(ConfigError, match="a sasrec model; a bert4rec model cannot start from it"):
        Recommender("bert4rec", train=FAST).fit(everything, "leave-one-out", init_from=where, progress=False)
    with pytest.raises(ConfigError, match=r"hidden=32 \(the old model has 16\)"):
        Recommender("sasrec", {"hidden": 32}, FAST).fit(
            everything, "leave-one-out", init_from=where, progress=False
        )


def test_final_fit_trains_every_event_for_a_fixed_number_of_epochs() -> None:
    frame = ring_frame()
    rec = Recommender("sasrec", TINY, FAST | {"max_epochs": 3, "patience": 1}).fit(
        frame, FINAL, progress=False
    )
    tr = rec.train_result_
    assert tr is not None and tr.epochs == 3 and tr.best_epoch == 3
    assert all("valid" not in record for record in tr.history)
    assert rec.histories_ is not None and int(rec.histories_.lengths().sum()) == len(frame)


def test_bert4rec_mask_row_stays_last_when_the_catalog_grows() -> None:
    first, everything = first_and_all(ring_frame())
    old = Recommender("bert4rec", TINY, FAST | {"max_epochs": 1}).fit(first, progress=False)
    source = old.warm_source(old)
    data = warm.extend_log(Interactions.from_frame(everything), source)
    core, _ = warm.grown_core(old.spec, old.config, source, data, seed=3, context=None)
    before, after = old.core.state_dict()["item_emb.weight"], core.state_dict()["item_emb.weight"]
    assert after.shape[0] == data.n_items + 2  # items, padding and [mask]
    torch.testing.assert_close(after[-1], before[-1])  # [mask] is still the last row
    torch.testing.assert_close(after[: before.shape[0] - 1], before[:-1])


def test_a_split_of_the_old_numbering_is_refused_and_one_of_the_extended_log_taken(
    old_and_new: tuple[Recommender, Recommender, Path],
) -> None:
    old, _, _ = old_and_new
    _, everything = first_and_all(ring_frame())
    log = Interactions.from_frame(everything)
    rec = Recommender("sasrec", train=FAST | {"max_epochs": 1})
    with pytest.raises(ConfigError, match="extends the ID maps"):
        rec.fit(log, leave_one_out(log), init_from=old, progress=False)
    extended = warm.extend_log(log, rec.warm_source(old))
    rec.fit(extended, leave_one_out(extended), init_from=old, progress=False)
    assert rec.items_ is not None and rec.items_.to_list() == extended.items.to_list()


def test_a_feature_model_gives_new_items_their_feature_rows() -> None:
    """Two categories of items; the new items arrive with their category and are encoded with the old
    codes."""
    cats = pd.DataFrame(
        {"item_id": [f"c{c}i{i}" for c in range(2) for i in range(6)], "category": ["a"] * 6 + ["b"] * 6}
    )
    new_cats = pd.DataFrame({"item_id": ["c0new", "c1new"], "category": ["a", "b"]})
    rows = [(f"u{u}", f"c{u % 2}i{(u + t) % 6}") for u in range(40) for t in range(6)]
    first = pd.DataFrame(rows, columns=["user", "item"])
    extra = pd.DataFrame(
        [("w1", "c0new"), ("w1", "c0i1"), ("w1", "c0i2"), ("w2", "c1new"), ("w2", "c1i3")],
        columns=["user", "item"],
    )
    table = FeatureTable.from_frame(cats, "item_id", {"category": "categorical"})
    everything = FeatureTable.from_frame(pd.concat([cats, new_cats]), "item_id", {"category": "categorical"})
    config = TINY | {"item_features": "sum", "id_dropout": 0.5}
    old = Recommender("sasrec", config, FAST).fit(
        Interactions.from_frame(first, item_features=table), progress=False
    )
    log = Interactions.from_frame(pd.concat([first, extra]), item_features=everything)
    source = old.warm_source(old)
    data = warm.extend_log(log, source)
    core, _ = warm.grown_core(old.spec, old.config, source, data, seed=3, context=None)
    reference = copy.deepcopy(old.core)
    cold_items.extend_items(reference, old.context_, source.items, new_cats)  # what add_items gives them
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(core.state_dict()[key], value, msg=key)
    before = {k: v.clone() for k, v in old.core.state_dict().items()}
    new = Recommender("sasrec", train=FAST).fit(log, FINAL, init_from=old, progress=False)
    assert new.items_ is not None and {"c0new", "c1new"} <= set(new.items_.to_list())
    same = Interactions.from_frame(first, item_features=table)  # no new item: nothing to grow
    again = Recommender("sasrec", train=FAST).fit(same, FINAL, init_from=old, progress=False)
    assert new.core is not old.core and again.core is not old.core
    for key, value in before.items():  # fine-tuning the new models left the old one as it was
        torch.testing.assert_close(old.core.state_dict()[key], value, msg=key)


def followers_frame() -> tuple[pd.DataFrame, pd.DataFrame]:
    """A ring walk, then (after the cut) twelve users take a new item "fresh" right after "i5"."""
    frame = ring_frame()
    later = pd.DataFrame(
        [
            (f"u{u}", item, 100_000.0 + 60 * t)
            for u in range(12)
            for t, item in enumerate(["i3", "i4", "i5", "fresh"])
        ],
        columns=["user", "item", "timestamp"],
    )
    return frame, pd.concat([frame, later], ignore_index=True)


@pytest.fixture(scope="module")
def ring_model() -> Recommender:
    first, _ = followers_frame()
    return Recommender("sasrec", TINY, {"max_epochs": 30, "batch_size": 64, "seed": 3}).fit(
        first, "none", progress=False
    )


def test_new_item_rows_come_from_the_histories_they_followed(ring_model: Recommender) -> None:
    _, everything = followers_frame()
    source = Recommender("sasrec").warm_source(ring_model)
    data = warm.extend_log(Interactions.from_frame(everything), source)
    core, _ = warm.grown_core(ring_model.spec, ring_model.config, source, data, seed=3, context=None)
    before = {k: v.clone() for k, v in core.state_dict().items()}
    n_old = len(source.items)
    assert warm.seed_new_items(core, data.sequences(), n_old, max_len=12) == 1
    table = core.state_dict()["item_emb.weight"]
    fresh = data.items.get("fresh")
    assert fresh == n_old + 1
    torch.testing.assert_close(table[: n_old + 1], before["item_emb.weight"][: n_old + 1])  # old rows kept
    old_norm = table[1 : n_old + 1].norm(dim=1).mean()
    torch.testing.assert_close(table[fresh].norm(), old_norm)  # a trained row's size, not an initial one's
    # the row points where the model's query after ... i3 i4 i5 points: "fresh" now ranks near the top
    # of such a history (it followed it twelve times), where the initialised row left it far down
    history = Sequences.from_lists([[data.items.get(f"i{k}") for k in (3, 4, 5)]], data.n_items)

    def rank(state: dict[str, torch.Tensor]) -> int:
        core.load_state_dict(state)
        core.eval()
        with torch.no_grad():
            scores = core.score(core.score_inputs(np.zeros(1, dtype=np.int64), history, None))[0]
        return int((scores > scores[fresh]).sum())

    seeded = {k: v.clone() for k, v in core.state_dict().items()}
    assert rank(seeded) < 3 <= rank(before)


def test_a_warm_start_seeds_new_items_only_when_told_to(
    ring_model: Recommender, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, everything = followers_frame()
    calls: list[int] = []
    seed = warm.seed_new_items
    monkeypatch.setattr(warm, "seed_new_items", lambda core, *a, **k: calls.append(seed(core, *a, **k)) or 1)
    kw = {"init_from": ring_model, "new_since": 100_000.0, "progress": False}
    Recommender("sasrec", train={"max_epochs": 1}).fit(everything, "none", **kw)
    assert calls == []  # the default: the model's initialisation
    Recommender("sasrec", train={"max_epochs": 1}).fit(everything, "none", new_item_rows="histories", **kw)
    assert calls == [1]  # "fresh", the one new item, seeded before the fine-tune
    with pytest.raises(ConfigError, match="new_item_rows='zeros': use one of initial, histories"):
        Recommender("sasrec", train={"max_epochs": 1}).fit(everything, "none", new_item_rows="zeros", **kw)
    with pytest.raises(ConfigError, match="seeds the new items of a warm start: give init_from too"):
        Recommender("sasrec", train={"max_epochs": 1}).fit(everything, "none", new_item_rows="histories")


@pytest.mark.parametrize(("model", "seeded"), [("bert4rec", 1), ("gsasrec", 1), ("esasrec", 1), ("hstu", 0)])
def test_every_transformer_seeds_its_item_table_or_says_it_has_none(model: str, seeded: int) -> None:
    first, everything = followers_frame()
    old = Recommender(model, {"hidden": 16, "n_layers": 1, "n_heads": 1, "max_len": 12}, FAST).fit(
        first, "none", progress=False
    )
    source = Recommender(model).warm_source(old)
    data = warm.extend_log(Interactions.from_frame(everything), source)
    core, _ = warm.grown_core(old.spec, old.config, source, data, seed=3, context=None)
    before = {k: v.clone() for k, v in core.state_dict().items()}
    assert warm.seed_new_items(core, data.sequences(), len(source.items), max_len=12) == seeded
    after = core.state_dict()
    changed = [k for k in after if not torch.equal(after[k], before[k])]
    assert len(changed) == seeded  # the item table only (HSTU's normalised one is left as initialised)
    n_old = len(source.items)
    for key in changed:
        torch.testing.assert_close(after[key][: n_old + 1], before[key][: n_old + 1])
