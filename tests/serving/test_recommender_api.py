"""The Python serving API of Recommender: recommend_many, chunked top-k, similar_items."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch

from attnrec.data.schema import Sequences
from attnrec.recommend import Recommender, topk_chunked


def test_recommend_many_equals_recommend_one_by_one(sasrec: Recommender) -> None:
    reqs: list[dict[str, Any]] = [
        {"user": "u1", "k": 5},
        {"history": ["i3", "i4", "nope"], "k": 7},
        {"user": "ghost", "k": 4},  # popularity fallback inside the same batch
        {"user": "u2", "k": 3, "include": ["i1", "i2", "i3", "i9", "zzz"]},
        {"user": "u5", "k": 6, "exclude": ["i10", "i11"], "exclude_seen": False},
        {"history": ["unknown-only"], "k": 2},
    ]
    many = sasrec.recommend_many(reqs)
    for req, got in zip(reqs, many, strict=True):
        one = sasrec.recommend(**req)
        assert got.items == one.items
        assert got.scores == pytest.approx(one.scores, rel=1e-5, abs=1e-5)
        assert (got.fallback, got.unknown_items, got.method) == (one.fallback, one.unknown_items, one.method)


def test_recommend_matches_full_scores(sasrec: Recommender) -> None:
    assert sasrec.histories_ is not None and sasrec.users_ is not None
    u = int(sasrec.users_.get("u7"))  # type: ignore[arg-type]
    full = sasrec.score_histories(np.array([u]), sasrec.histories_.take(np.array([u])))[0]
    full[torch.as_tensor(sasrec.histories_[u])] = -torch.inf
    want = torch.topk(full, 10)
    got = sasrec.recommend(user="u7", k=10)
    assert got.items == sasrec.items_.to_external(want.indices.numpy())  # type: ignore[union-attr]
    assert got.scores == pytest.approx(want.values.tolist(), rel=1e-5, abs=1e-5)
    assert got.method == "model" and got.fallback is None


def test_fallbacks_and_filters(sasrec: Recommender) -> None:
    r = sasrec.recommend(user="ghost", k=3)
    assert r.method == "popularity" and "unknown user" in (r.fallback or "")
    pop = np.asarray(sasrec.popularity_)
    assert r.scores == sorted(r.scores, reverse=True) and r.scores[0] == pop.max()
    r = sasrec.recommend(user="ghost", history=["i1", "i2"], k=3)
    assert r.method == "model" and "scored from the given history" in (r.fallback or "")
    assert not {"i1", "i2"} & set(r.items)
    r = sasrec.recommend(history=["bogus"], k=3)
    assert (
        r.method == "popularity" and r.unknown_items == ["bogus"] and "no known items" in (r.fallback or "")
    )
    r = sasrec.recommend(history=["i1"], include=["i1", "i2", "i3"], k=10)
    assert sorted(r.items) == ["i2", "i3"]  # i1 was seen
    r = sasrec.recommend(history=["i1"], include=["i1"], k=10)
    assert r.items == []
    r = sasrec.recommend(user="u1", k=10_000)
    seen = set(sasrec.items_.to_external(sasrec.histories_[sasrec.users_.get("u1")]))  # type: ignore[union-attr,index]
    assert len(r.items) == len(sasrec.items_) - len(seen) and not seen & set(r.items)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must"):
        sasrec.recommend(user="u1", k=0)
    with pytest.raises(ValueError, match="user or a history"):
        sasrec.recommend()
    with pytest.raises(TypeError, match="unknown recommend arguments"):
        sasrec.recommend_many([{"user": "u1", "top": 3}])


def test_topk_chunked_equals_dense() -> None:
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 1001, generator=g)
    banned_rows = torch.tensor([0, 0, 3, 4])
    banned_cols = torch.tensor([5, 999, 17, 1000])
    dense = scores.clone()
    dense[:, 0] = -torch.inf
    dense[banned_rows, banned_cols] = -torch.inf
    want = torch.topk(dense, 20, dim=1)
    for chunk in (7, 100, 10_000):
        v, i = topk_chunked(
            lambda lo, hi: scores[:, lo:hi].clone(),
            5,
            1001,
            20,
            banned_rows,
            banned_cols,
            chunk_elements=chunk * 5,
        )
        assert torch.equal(i, want.indices) and torch.equal(v, want.values)


def test_sasrec_short_padding_gives_the_same_scores(sasrec: Recommender) -> None:
    core = sasrec.core
    seqs = Sequences.from_lists([[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]], sasrec.core.n_items)
    short = core.score_inputs(np.zeros(2), seqs)["seq"]
    assert short.shape[1] == 7  # the batch's longest history, not max_len
    with torch.no_grad():
        a = core.score({"seq": short})
        b = core.score({"seq": torch.from_numpy(seqs.padded(core.config.max_len))})
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


class _NoVectors:
    """A scoring core without item vectors (forces the co-occurrence fallback)."""

    training = False  # the ModelCore contract: an inference-only stand-in

    def __init__(self, core: Any) -> None:
        self._core = core

    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        return self._core.score_inputs(users, histories, request_time)  # type: ignore[no-any-return]

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self._core.score(batch)  # type: ignore[no-any-return]

    def eval(self) -> None:
        self._core.eval()


def test_similar_items_embedding_and_cooccurrence(sasrec: Recommender) -> None:
    r = sasrec.similar_items("i4", k=5)
    assert r.method == "embedding-cosine" and len(r.items) == 5 and "i4" not in r.items
    v = torch.nn.functional.normalize(sasrec.core.item_vectors().detach(), dim=1)
    i4 = sasrec.items_.get("i4")  # type: ignore[union-attr]
    cos = v @ v[i4]
    cos[[0, i4]] = -torch.inf
    want = torch.topk(cos, 5)
    assert r.items == sasrec.items_.to_external(want.indices.numpy())  # type: ignore[union-attr]
    assert r.scores == pytest.approx(want.values.tolist(), abs=1e-5)
    with pytest.raises(KeyError, match="unknown item"):
        sasrec.similar_items("nope")

    plain = copy.copy(sasrec)
    plain._cache = {}
    plain.core = _NoVectors(sasrec.core)
    r = plain.similar_items("i4", k=5)
    assert r.method == "co-occurrence" and "i4" not in r.items and len(r.items) == 5
    # brute force: cosine of co-occurrence counts over the stored histories
    h = sasrec.histories_
    assert h is not None
    with_i4 = [u for u in range(h.n_users) if i4 in set(h[u].tolist())]
    co = np.bincount(np.concatenate([h[u] for u in with_i4]), minlength=len(sasrec.items_) + 1)  # type: ignore[arg-type]
    pop = np.maximum(np.asarray(sasrec.popularity_, dtype=np.float64), 1)
    s = co / np.sqrt(pop * pop[i4])
    s[co == 0] = -np.inf
    s[[0, i4]] = -np.inf
    assert r.scores == pytest.approx(np.sort(s)[::-1][:5].tolist(), rel=1e-5)
    # the recommendation path also works without factorised scoring (full score matrix)
    many = plain.recommend_many(
        [{"user": "u1", "k": 4}, {"history": ["i2"], "k": 4, "include": ["i3", "i5"]}]
    )
    assert many[0].items == sasrec.recommend(user="u1", k=4).items
    assert sorted(many[1].items) == ["i3", "i5"]


def test_similar_items_after_load(sasrec: Recommender, sasrec_dir: Any) -> None:
    loaded = Recommender.load(sasrec_dir, device="cpu")
    assert loaded.similar_items("i7", 4).items == sasrec.similar_items("i7", 4).items
    assert loaded.recommend(user="u3", k=5).items == sasrec.recommend(user="u3", k=5).items
