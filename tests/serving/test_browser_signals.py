"""The web page shows a history event's signal values (e.g. ``device: tv``) for a model that reads a
declared signal, in a real browser against a real ``attnrec serve`` (a fresh process: the model directory
declares the signal). The values come from the training data and are shown as text, never as HTML. Skips
without the browser as ``test_browser`` does (and fails under ``CI``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from real_server import running_server
from test_browser import Page, chrome, require_browser

from attnrec.data.signals import Signal, register_signal, unregister_signal
from attnrec.recommend import Recommender
from synthetic_logs import device_frame

MARKED = "<i>tv</i>"  # a device value that would be an element if the page parsed it as HTML


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    require_browser(os.environ)
    frame = device_frame("device").replace({"device": {"tv": MARKED}})
    register_signal(Signal("device", "categorical"))
    try:
        model = {"hidden": 8, "max_len": 8, "n_layers": 1, "loss": "ce", "signals": "device"}
        rec = Recommender("sasrec", model, {"max_epochs": 1, "seed": 0}).fit(frame, progress=False)
        saved = rec.save(Path(tmp_path_factory.mktemp("model")) / "dev")
    finally:
        unregister_signal("device")
    with running_server(["--model", f"dev={saved}"]) as (url, _):
        d = chrome()
        try:
            yield Page(d, url)
        finally:
            d.quit()


def test_the_history_shows_each_events_device_as_text(page: Page) -> None:
    page.open(key=None)
    page.wait.until(lambda _: page.options() == ["dev"])
    for user, device in (("u1", MARKED), ("u2", "phone")):
        page.type("#user", user)
        page.el("#load-user").click()
        page.wait.until(lambda _, u=user: f"User {u}:" in page.el("#history-note").text)
        tags = page.texts("#history li .event")
        assert tags == [f"device: {device}"] * 8, tags
    assert page.count("#history i") == 0  # the value is text: no element was made of it
