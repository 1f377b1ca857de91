"""``attnrec serve`` of a model that reads a declared signal, in a process with no Python of the user's:
the model directory declares the signal, so requests and events may send it."""

from __future__ import annotations

from pathlib import Path

import httpx
from real_server import running_server

from attnrec.data.signals import Signal, find_signal, register_signal, unregister_signal
from attnrec.recommend import Recommender
from synthetic_logs import device_frame

HISTORY = ["i1", "i2", "i3"]


def test_a_served_model_declares_its_signal_in_a_fresh_process(tmp_path: Path) -> None:
    frame = device_frame("device")
    register_signal(Signal("device", "categorical", help="The device the event came from."))
    try:
        model = {"hidden": 8, "max_len": 8, "n_layers": 1, "loss": "ce", "signals": "device"}
        rec = Recommender("sasrec", model, {"max_epochs": 1, "seed": 0}).fit(frame, progress=False)
        rec.save(tmp_path / "model")
        want = rec.recommend(history=HISTORY, device=["tv"] * 3, k=5, exclude_seen=False).items
    finally:
        unregister_signal("device")
    assert find_signal("device") is None
    args = ["--model", f"dev={tmp_path / 'model'}", "--store", str(tmp_path / "events.db")]
    with running_server(args) as (url, _):
        body = {"history": HISTORY, "device": ["tv"] * 3, "k": 5, "exclude_seen": False}
        r = httpx.post(f"{url}/v1/recommend", json=body)
        assert r.status_code == 200, r.text
        assert [x["item"] for x in r.json()["items"]] == want and r.json()["ignored_inputs"] == []
        event = {"user": "u0", "item": "i4", "timestamp": 1_800_000_000, "device": "tv"}
        r = httpx.post(f"{url}/v1/events", json={"events": [event, event | {"device": 1}]})
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
        assert r.json()["errors"][0]["message"] == "device must be text values"
        spec = httpx.get(f"{url}/openapi.json").json()["components"]["schemas"]["RecommendRequest"]
        assert spec["properties"]["device"]["description"].startswith("Per history item: The device")
