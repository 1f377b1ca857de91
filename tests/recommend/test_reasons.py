"""Per-item explanations at the user level: ``recommend(explain=...)`` and ``explain_recommendation``.

A tiny SASRec on the titled ring log (a couple of seconds). Occlusion values are checked against
re-scoring through the Recommender itself, so a wrong mapping of events to IDs or ``back`` fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from attnrec.data.schema import DataSource, Interactions
from attnrec.evaluation.attribution import AttributionError, attribute
from attnrec.recommend import Recommender
from attnrec.recommend.explain_rec import explain_recommendation
from attnrec.recommend.reasons import GREEDY_DEPTH, ExplainedEvent, reason
from synthetic_logs import ring_log

FIT = {"max_epochs": 2, "batch_size": 64, "lr": 5e-3, "device": "cpu"}


@pytest.fixture(scope="module")
def log() -> Interactions:
    titles = {f"i{i}": f"Item number {i}" for i in range(0, 40, 2)}  # odd items untitled
    return ring_log(80, 40, 0, min_len=5, follow=0.8, source=DataSource("ring"), item_titles=titles)


@pytest.fixture(scope="module")
def sasrec(log: Interactions) -> Recommender:
    return Recommender("sasrec", {"hidden": 16, "n_layers": 1, "max_len": 8, "dropout": 0.1}, FIT).fit(
        log, progress=False
    )


def _score(rec: Recommender, history: list[str], item: str) -> float:
    """``item``'s score for ``history`` through the public API (include: only that candidate)."""
    r = rec.recommend(history=history, k=1, include=[item], exclude_seen=False)
    return r.scores[0]


def test_explanations_align_with_items_and_stop_at_explain_k(sasrec: Recommender) -> None:
    r = sasrec.recommend(user="u3", k=6, explain=True, explain_k=4)
    assert r.explanations is not None and len(r.explanations) == 6
    assert [e.item if e else None for e in r.explanations] == [*r.items[:4], None, None]
    first = r.explanations[0]
    assert first is not None and first.method == "greedy" and not first.shared  # the default method
    assert sasrec.recommend(user="u3", k=6).explanations is None  # not asked: nothing computed


def test_occlusion_values_equal_rescoring_through_the_recommender(sasrec: Recommender) -> None:
    history = ["i1", "i2", "i3", "i4", "i9", "i10", "i11"]
    r = sasrec.recommend(history=history, k=3, explain="occlusion")
    assert r.explanations is not None
    for item, score, ex in zip(r.items, r.scores, r.explanations, strict=True):
        assert ex is not None and len(ex.events) == len(history)
        for e in ex.events:
            pos = len(history) - 1 - e.back
            assert history[pos] == e.item  # back counts from the most recent event
            without = history[:pos] + history[pos + 1 :]
            assert e.value == pytest.approx(score - _score(sasrec, without, item), abs=1e-4)
        values = [e.value for e in ex.events]
        assert values == sorted(values, reverse=True)  # strongest first


def test_served_greedy_names_the_benchmarked_ranking_first_events(sasrec: Recommender) -> None:
    """Served explanations stop greedy after GREEDY_DEPTH events; those are the full ranking's first ones."""
    history = ["i1", "i2", "i3", "i4", "i9", "i10", "i11", "i12"]
    r = sasrec.recommend(history=history, k=3, explain=True)
    assert r.explanations is not None and sasrec.items_ is not None
    hist = sasrec.items_.to_internal(history)
    for item, ex in zip(r.items, r.explanations, strict=True):
        assert ex is not None and ex.method == "greedy"
        full = attribute(
            sasrec.core, hist, sasrec.items_.to_internal([item]), n_items=len(sasrec.items_), method="greedy"
        )  # depth: half the window, as the faithfulness benchmark ranks
        first = [history[int(p)] for p in full.events[full.ranking(0)][:GREEDY_DEPTH]]
        assert [e.item for e in ex.events[:GREEDY_DEPTH]] == first


def test_the_reason_names_the_top_positive_titles_with_the_verb(sasrec: Recommender) -> None:
    r = sasrec.recommend(history=["i2", "i4", "i6", "i8"], k=3, explain=True, reason_verb="watched")
    assert r.explanations is not None
    for ex in r.explanations:
        assert ex is not None
        top = [e for e in ex.events if e.value > 0][:2]
        want = " and ".join(f"*{e.title}*" for e in top)
        assert ex.reason == (f"Because you watched {want}" if top else None)
    events = [
        ExplainedEvent("a", "Toy Story", 0, 0.9),
        ExplainedEvent("b", None, 1, 0.5),
        ExplainedEvent("c", "Heat", 2, 0.1),
        ExplainedEvent("d", "Up", 3, -0.2),
    ]
    assert reason(events) == "Because you interacted with *Toy Story* and item b"
    assert reason(events, "watched", n=5) == "Because you watched *Toy Story*, item b and *Heat*"
    assert reason(events[3:]) is None  # nothing raised the score: no reason is claimed


def test_an_item_outside_the_top_k_is_explained_with_its_own_score(sasrec: Recommender) -> None:
    history = ["i1", "i2", "i3", "i4", "i5"]
    top = sasrec.recommend(history=history, k=5).items
    outside = next(i for i in sasrec.recommend(history=history, k=30).items[::-1] if i not in top)
    ex = explain_recommendation(sasrec, history=history, method="occlusion", item=outside, top=2)
    assert ex.recommendation.items == [outside] and not ex.shared and len(ex.explanations) == 1
    assert ex.recommendation.scores[0] == pytest.approx(_score(sasrec, history, outside), abs=1e-4)
    assert len(ex.explanations[0].events) == 2 and ex.window == len(history)
    with pytest.raises(KeyError, match="unknown item 'nope'"):
        explain_recommendation(sasrec, history=history, method="occlusion", item="nope")


def test_per_item_methods_differ_between_items_and_attention_is_shared(sasrec: Recommender) -> None:
    ex = explain_recommendation(sasrec, user="u5", k=4, method="occlusion")
    assert [e.item for e in ex.explanations] == ex.recommendation.items and not ex.shared
    assert len({tuple(e.value for e in x.events) for x in ex.explanations}) > 1
    assert explain_recommendation(sasrec, user="u5", k=4).method == "greedy", "the default: the most faithful"
    att = explain_recommendation(sasrec, user="u5", k=4, method="attention")
    assert att.shared and att.method == "attention" and att.attended
    assert len({tuple(e.item for e in x.events) for x in att.explanations}) == 1
    assert att.to_dict()["explanations"][0]["method"] == "attention"


@pytest.mark.parametrize(
    "call",
    [
        lambda rec: rec.recommend(user="u1", explain="shapley"),
        lambda rec: explain_recommendation(rec, user="u1", method="shapley"),
    ],
)
def test_an_unknown_method_is_a_clear_error(sasrec: Recommender, call: Callable[[Recommender], Any]) -> None:
    with pytest.raises(
        AttributionError, match="unknown explanation method 'shapley'; choose one of attention"
    ):
        call(sasrec)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"explain_k": -1}, "explain_k must be a whole number of items, at least 0, not -1"),
        ({"explain_k": 2.5}, "explain_k must be a whole number of items, at least 0, not 2.5"),
        ({"reason_verb": None}, "reason verb must be printable words such as 'watched'"),
    ],
)
def test_explanation_options_of_the_wrong_kind_are_refused(
    sasrec: Recommender, arguments: dict[str, Any], message: str
) -> None:
    """``explain_k=-1`` once gave no explanation without a word, ``explain_k=2.5`` ended in Python's own
    TypeError, and ``reason_verb=None`` made reasons that said "Because you None ..."."""
    with pytest.raises(ValueError, match=message):
        sasrec.recommend(user="u1", k=3, explain=True, **arguments)


def test_short_histories_and_models_that_cannot_explain(sasrec: Recommender, log: Interactions) -> None:
    one = sasrec.recommend(history=["i3"], k=2, explain=True)
    assert one.explanations is not None
    assert all(e is not None and not e.events and "at least two" in (e.note or "") for e in one.explanations)
    popular = sasrec.recommend(history=["unknown"], k=2, explain=True)  # answered by popularity
    assert popular.explanations is not None and all(e and e.note for e in popular.explanations)
    pop = Recommender("pop").fit(log, progress=False)
    with pytest.raises(AttributionError, match="without reading the history"):
        pop.recommend(user="u1", k=2, explain=True)
    gru = Recommender("gru4rec", {"hidden": 8}, {**FIT, "max_epochs": 1}).fit(log, progress=False)
    with pytest.raises(AttributionError, match="no attention weights"):
        gru.recommend(user="u1", k=2, explain="attention")
    r = gru.recommend(user="u1", k=2, explain="occlusion")  # occlusion needs nothing but scores
    assert r.explanations is not None and r.explanations[0] is not None and r.explanations[0].events
    assert np.isfinite([e.value for e in r.explanations[0].events]).all()
