"""The table of served models: capabilities come from the served object's type, and each capability
decides which endpoint answers (a model without one is refused, never called)."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from attnrec.recommend import Recommender
from attnrec.serving.ann import ApproximateRecommender
from attnrec.serving.app import create_app
from attnrec.serving.batcher import MicroBatcher
from attnrec.serving.model_table import backend_of, served_capabilities


class OnlyExplains:
    def explain(self, user: object, item: object, feature: str | None = None) -> dict[str, Any]:
        return {"text": f"{user} likes {item}"}


def test_capabilities_follow_the_served_type(sasrec: Recommender) -> None:
    assert served_capabilities(sasrec) == ["recommend", "similar-items"]
    assert served_capabilities(ApproximateRecommender(sasrec, kind="torch", nlist=4)) == ["recommend"]
    assert served_capabilities(OnlyExplains()) == ["explain"]
    assert served_capabilities(object()) == []
    assert backend_of(sasrec) == "torch" and backend_of(OnlyExplains()) == "torch"


def test_approximate_recommender_serves_recommend_only(sasrec: Recommender) -> None:
    ann = ApproximateRecommender(sasrec, kind="torch", nlist=4, nprobe=4)
    with TestClient(create_app({"ann": ann, "why": OnlyExplains()})) as c:
        info = {m["name"]: m for m in c.get("/v1/models").json()["models"]}
        assert info["ann"]["capabilities"] == ["recommend"] and info["why"]["capabilities"] == ["explain"]
        body = c.post("/v1/recommend", json={"user": "u3", "k": 5}).json()
        assert body["model"] == "ann" and body["method"] == "model-ann"
        assert [x["item"] for x in body["items"]] == ann.recommend(user="u3", k=5).items
        r = c.post("/v1/similar-items", json={"item": "i1"})  # no model can: refused, not an AttributeError
        assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported"
        r = c.post("/v1/explain", json={"user": "u1", "item": "i2"})
        assert r.status_code == 200 and r.json()["explanation"] == {"text": "u1 likes i2"}


def test_batcher_retries_a_batch_answered_with_the_wrong_count() -> None:
    """A batch function that drops answers must not hang or mismatch the waiting requests."""

    def first_only(xs: list[int]) -> list[int]:
        return [xs[0] * 2]  # right for one item, short for more

    async def main() -> list[int]:
        b: MicroBatcher[int, int] = MicroBatcher(first_only, None, max_batch=8, max_wait=0.01)
        b.start()
        out = await asyncio.wait_for(asyncio.gather(*(b.submit(x) for x in range(6))), 10)
        await b.stop()
        assert b.batches < 6  # some items were gathered together, so the short answer was exercised
        return list(out)

    assert asyncio.run(main()) == [0, 2, 4, 6, 8, 10]


def test_batch_sizes_are_reported_once_per_gathered_batch_even_when_it_is_retried() -> None:
    def fails_together(xs: list[int]) -> list[int]:
        if len(xs) > 1:
            raise RuntimeError("one bad request in the batch")
        return xs

    sizes: list[int] = []

    async def main() -> list[int]:
        b: MicroBatcher[int, int] = MicroBatcher(
            fails_together, None, max_batch=8, max_wait=0.01, on_batch=sizes.append
        )
        b.start()
        out = await asyncio.wait_for(asyncio.gather(*(b.submit(x) for x in range(6))), 10)
        await b.stop()
        return list(out)

    assert asyncio.run(main()) == list(range(6))  # every item answered by its one-by-one retry
    assert sum(sizes) == 6 and len(sizes) < 6  # the gathered batches, not the retries' batches of 1


@pytest.mark.parametrize(
    "bad,match",
    [
        ({"max_k": 0}, "must be positive"),
        ({"max_wait_ms": -1}, "must be >= 0"),
        ({"max_wait_ms": float("nan")}, "both finite"),  # nan < 0 is false: a NaN wait was taken
        ({"body_timeout_s": float("inf")}, "both finite"),
        ({"backend": "tf"}, "backend must be one of 'torch', 'onnx'"),
        (
            {"device": "foo"},
            "device must be auto, cpu, cuda, cuda:N or mps, not 'foo'",
        ),  # before any model loads
    ],
)
def test_serving_config_rejects_bad_settings(bad: dict[str, Any], match: str) -> None:
    from attnrec.serving.serving_config import ServingConfig

    with pytest.raises(ValueError, match=match):
        ServingConfig(**bad)
