"""The cold-item protocol in a run: add the cold items to a fitted model, test with cold/warm metrics.

The split side (which items, what is removed) is :mod:`attnrec.data.cold`. A model is fitted on
:attr:`~attnrec.data.cold.ColdStart.warm` (its catalogue has no cold item); afterwards
:func:`add_cold_items` adds the cold items as production adds new ones (``Recommender.add_items``:
their features, all-zero ID vectors) when the model can take them. A model that cannot (ID-only models,
POP) has no score for them: they score ``-inf`` and a cold target ranks behind every other item, which
is what "cannot rank them at all" means. :func:`test_cold` reports every test case, and the cold and the
warm targets apart.
"""

from __future__ import annotations

from typing import Any

from attnrec.data.cold import ColdStart
from attnrec.evaluation.protocol import EvalResult, Protocol, evaluate, unscored_last
from attnrec.recommend import Recommender, cold_items


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


__all__ = ["add_cold_items", "cold_record", "test_cold"]
