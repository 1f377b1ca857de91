"""``attnrec explain-rec --method/--item/--reason-verb/--event-verb`` and ``attnrec recommend --explain``:
equal to the Python API; a model with event and time inputs shows each event's type and time."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data.schema import DataSource
from attnrec.recommend import Recommender
from attnrec.recommend.explain_rec import explain_recommendation
from synthetic_logs import hourly_shop_log, ring_log


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recommender, Path]:
    titles = {f"i{i}": f"Film {i}" for i in range(40)}
    log = ring_log(60, 40, 0, min_len=5, follow=0.8, source=DataSource("ring"), item_titles=titles)
    rec = Recommender(
        "sasrec",
        {"hidden": 16, "n_layers": 1, "max_len": 8},
        {"max_epochs": 1, "batch_size": 64, "device": "cpu"},
    ).fit(log, progress=False)
    path = rec.save(tmp_path_factory.mktemp("m") / "sasrec")
    return Recommender.load(path, device="cpu"), path


def _run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.output


def test_explain_rec_per_item_json_equals_the_python_api(model: tuple[Recommender, Path]) -> None:
    rec, path = model
    code, output = _run(
        "explain-rec",
        "--model",
        str(path),
        "--user",
        "u2",
        "-k",
        "3",
        "--method",
        "occlusion",
        "--top",
        "2",
        "--reason-verb",
        "watched",
        "--json",
    )
    assert code == 0, output
    got = json.loads(output)
    want = explain_recommendation(rec, user="u2", k=3, top=2, method="occlusion", reason_verb="watched")
    assert got["method"] == "occlusion" and got["shared"] is False
    assert [e["item"] for e in got["explanations"]] == want.recommendation.items
    for g, w in zip(got["explanations"], want.explanations, strict=True):
        assert g["reason"] == w.reason and g["reason"].startswith("Because you watched *Film ")
        assert [(e["item"], e["back"]) for e in g["events"]] == [(e.item, e.back) for e in w.events]
        assert [e["value"] for e in g["events"]] == pytest.approx([e.value for e in w.events])


def test_explain_rec_rich_view_and_one_item(model: tuple[Recommender, Path]) -> None:
    rec, path = model
    code, output = _run(
        "explain-rec",
        "--model",
        str(path),
        "--history",
        "i3,i4,i5,i6",
        "-k",
        "2",
        "--method",
        "occlusion",
        "--reason-verb",
        "watched",
    )
    assert code == 0, output
    ex = explain_recommendation(
        rec, history=["i3", "i4", "i5", "i6"], k=2, method="occlusion", reason_verb="watched"
    )
    for n, e in enumerate(ex.explanations, 1):
        assert f"#{n} {e.item}" in output and (e.reason or "") in output.replace("\n", " ")
    assert "per item, the history items behind it by occlusion" in output
    code, output = _run(
        "explain-rec",
        "--model",
        str(path),
        "--history",
        "i3,i4,i5,i6",
        "--method",
        "occlusion",
        "--item",
        "i30",
        "--json",
    )
    assert code == 0, output
    assert json.loads(output)["recommended"][0]["item"] == "i30"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "shapley"], "unknown explanation method 'shapley'"),
        (["--method", "occlusion", "--item", "nope"], "unknown item 'nope'"),
        (["--reason-verb", " "], "--reason-verb must be printable"),
        (["--event-verb", "cart"], "--event-verb 'cart': expected NAME=VERB"),
        (["--event-verb", "pv="], "--event-verb 'pv=': expected NAME=VERB"),
        (["--event-verb", "pv=saw {it}"], "--event-verb: event verb 'pv'='saw {it}'"),
    ],
)
def test_explain_rec_bad_input_is_one_line(
    model: tuple[Recommender, Path], args: list[str], message: str
) -> None:
    code, output = _run("explain-rec", "--model", str(model[1]), "--user", "u2", *args)
    assert code == 2 and message in output and "Traceback" not in output


def test_recommend_explain_adds_a_reason_per_item(model: tuple[Recommender, Path]) -> None:
    rec, path = model
    code, output = _run("recommend", "--model", str(path), "--user", "u4", "-k", "3", "--explain", "--json")
    assert code == 0, output
    got = json.loads(output)
    want = rec.recommend(user="u4", k=3, explain=True)
    assert want.explanations is not None
    assert [e["reason"] for e in got["explanations"]] == [e.reason if e else None for e in want.explanations]
    assert got["explanations"][0]["method"] == "greedy"
    code, output = _run(
        "recommend",
        "--model",
        str(path),
        "--user",
        "u4",
        "-k",
        "3",
        "--explain",
        "--explain-method",
        "rollout",
        "--reason-verb",
        "watched",
    )
    assert code == 0, output
    assert "why (rollout)" in output and "Because you watched" in output
    code, output = _run("recommend", "--model", str(path), "--user", "u4", "--explain-method", "magic")
    assert code == 2 and "unknown explanation method 'magic'" in output
    code, output = _run("recommend", "--model", str(path), "--user", "u4", "--json")
    assert code == 0 and json.loads(output)["explanations"] is None


@pytest.mark.parametrize("command", [["recommend", "--user", "u4", "--explain"], ["serve"]])
def test_a_malformed_event_verb_is_one_line_before_loading(
    model: tuple[Recommender, Path], command: list[str]
) -> None:
    code, output = _run(command[0], "--model", str(model[1]), *command[1:], "--event-verb", "=bought")
    assert code == 2 and "--event-verb '=bought': expected NAME=VERB" in output and "Traceback" not in output
    assert len(output.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def shop_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Recommender, Path]:
    config = {
        "hidden": 16,
        "max_len": 10,
        "n_layers": 1,
        "loss": "ce",
        "time_features": "periodic",
        "request_time": True,
        "event_input": True,
    }
    rec = Recommender("sasrec", config, {"max_epochs": 1, "batch_size": 64, "seed": 0, "threads": 1}).fit(
        hourly_shop_log(), progress=False
    )
    path = rec.save(tmp_path_factory.mktemp("m") / "shop")
    return Recommender.load(path, device="cpu"), path


def test_explain_rec_names_event_types_and_times(shop_model: tuple[Recommender, Path]) -> None:
    rec, path = shop_model
    args = (
        "explain-rec",
        "--model",
        str(path),
        "--user",
        "u3",
        "-k",
        "2",
        "--method",
        "occlusion",
        "--top",
        "3",
        "--event-verb",
        "view=looked at",
        "--event-verb",
        "buy=took {item} home",
    )
    want = explain_recommendation(
        rec,
        user="u3",
        k=2,
        top=3,
        method="occlusion",
        event_verbs={"view": "looked at", "buy": "took {item} home"},
    )
    code, output = _run(*args, "--json")
    assert code == 0, output
    for g, w in zip(json.loads(output)["explanations"], want.explanations, strict=True):
        assert g["reason"] == w.reason
        assert [(e["event"], e["timestamp"]) for e in g["events"]] == [
            (e.event, e.timestamp) for e in w.events
        ]
        assert {e["event"] for e in g["events"]} <= {"view", "buy"} and all(
            e["timestamp"] for e in g["events"]
        )
    code, output = _run(*args)
    assert code == 0, output
    flat = " ".join(output.split())
    assert "event" in output and "when (UTC)" in output
    for w in want.explanations:
        assert " ".join((w.reason or w.note or "").split()) in flat
        assert w.reason is None or w.reason.startswith(("Because you looked at ", "Because you took "))
    first = want.explanations[0].events[0]
    assert first.timestamp is not None
    assert datetime.fromtimestamp(first.timestamp, tz=UTC).strftime("%Y-%m-%d %H:%M") in output
