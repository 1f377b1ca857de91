"""One path for every input signal: a per-event field declared in one place flows end to end.

The test declares a categorical field ``device`` (its :class:`~attnrec.data.signals.Signal` is the only
thing it adds: categorical signals already have an encoder) and follows it from a CSV file and a DataFrame
into the data container, the sequences and the training batches, through a SASRec trained with it, into
``Recommender.recommend``, ``POST /v1/recommend`` and the explanations, through a saved model directory (which
declares it again where it loads), and through ``POST /v1/events``, the event store and a retrain.
A second test keeps the declaration the only place a per-event key set is written: a literal set, tuple or
list holding two built-in signals' names or keys anywhere else in ``src/`` is a failure.
"""

from __future__ import annotations

import ast
import copy
import json
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette asks for httpx2 instead of httpx
    from fastapi.testclient import TestClient

from attnrec.checkpoint import CheckpointError
from attnrec.cli.retrain import joined_log, retrain
from attnrec.data import load_dataset
from attnrec.data.schema import DataError, Interactions
from attnrec.data.signals import (
    UNKNOWN_CODE,
    Signal,
    find_signal,
    register_signal,
    signals,
    unregister_signal,
)
from attnrec.data.stream import read_parquet_stream
from attnrec.recommend import Recommender
from attnrec.recommend.explain_rec import explain_recommendation
from attnrec.serving.app import ServingConfig, create_app
from attnrec.store import Event, SqliteStore, open_store

SRC = Path(__file__).resolve().parents[1] / "src" / "attnrec"
DEVICES = ("phone", "tv")
HISTORY = ["i1", "i2", "i3", "i4"]
TRAIN = {"max_epochs": 2, "batch_size": 32, "seed": 0}
MODEL = {"hidden": 16, "max_len": 10, "n_layers": 1, "loss": "ce", "dropout": 0.0, "signals": "device"}


def _frame(n_users: int = 40, length: int = 8) -> pd.DataFrame:
    """Users who walk the catalog forward on a phone and backward on a TV, one event an hour."""
    rows = []
    for u in range(n_users):
        device = DEVICES[u % 2]
        step = 1 if device == "phone" else -1
        for t in range(length):
            item = (u // 2 + step * t) % 12 + 1
            rows.append((f"u{u}", f"i{item}", 1_700_000_000 + 3600 * (u * length + t), device))
    return pd.DataFrame(rows, columns=["user_id", "item_id", "timestamp", "device"])


@pytest.fixture(scope="module")
def device() -> Iterator[Signal]:
    declared = register_signal(
        Signal("device", "categorical", aliases=("device_type",), help="The device the event came from.")
    )
    yield declared
    unregister_signal("device")


@pytest.fixture(scope="module")
def csv_log(device: Signal, tmp_path_factory: pytest.TempPathFactory) -> Interactions:
    path = tmp_path_factory.mktemp("signal") / "log.csv"
    _frame().to_csv(path, index=False)
    return load_dataset(str(path))


def _log() -> Interactions:
    return Interactions.from_frame(_frame())


@pytest.fixture(scope="module")
def rec(csv_log: Interactions) -> Recommender:
    return Recommender("sasrec", MODEL, TRAIN).fit(csv_log, progress=False)


@pytest.fixture(scope="module")
def client(rec: Recommender) -> Iterator[TestClient]:
    app = create_app({"dev": rec}, ServingConfig(gc_freeze=False, max_history=50))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_the_csv_column_is_in_the_container_the_sequences_and_the_batches(
    csv_log: Interactions, rec: Recommender
) -> None:
    assert list(csv_log.signals) == ["device"]
    assert csv_log.vocabularies["device"].to_list() == sorted(DEVICES)
    codes = csv_log.sequences().column("device")
    assert codes.dtype == np.int64 and set(codes.tolist()) == {UNKNOWN_CODE + 1, UNKNOWN_CODE + 2}
    assert list(csv_log.to_frame()["device"][:1]) == ["phone"]
    batch = next(iter(rec.core.train_batches(csv_log.sequences(), 8, np.random.default_rng(0))))
    assert batch["device"].shape == batch["seq"].shape
    assert ((batch["device"] > 0) == (batch["seq"] > 0)).all()  # aligned with the items, padding 0


def test_a_dataframe_carries_it_too(device: Signal) -> None:
    frame = _frame().rename(columns={"device": "device_type"})  # found by its declared alias
    data = Interactions.from_frame(frame)
    assert data.vocabularies["device"].to_list() == sorted(DEVICES)
    named = Interactions.from_frame(frame.rename(columns={"device_type": "via"}), signals={"device": "via"})
    assert (named.sequences().column("device") == data.sequences().column("device")).all()


def test_the_device_changes_the_python_recommendations(rec: Recommender) -> None:
    def scores(values: list[str]) -> list[float]:
        answer = rec.recommend(history=HISTORY, device=values, k=12, exclude_seen=False)
        assert answer.ignored_inputs == []
        return list(answer.scores)

    phone, tv = scores(["phone"] * 4), scores(["tv"] * 4)
    assert phone != tv
    assert scores(["watch"] * 4) not in (phone, tv)  # a value never seen: the reserved unknown code
    unsent = rec.recommend(history=HISTORY, k=12, exclude_seen=False)  # not sent: "not known" (code 0)
    assert list(unsent.scores) not in (phone, tv) and unsent.ignored_inputs == []
    plain = Recommender("sasrec", MODEL | {"signals": ""}, TRAIN).fit(_frame(), progress=False)
    assert plain.recommend(history=HISTORY, device=["tv"] * 4).ignored_inputs == ["device"]


def test_a_saved_model_maps_request_values_as_trained(rec: Recommender, tmp_path: Path) -> None:
    loaded = Recommender.load(rec.save(tmp_path / "model"), device="cpu")
    assert (tmp_path / "model" / "signals.json").exists()
    for values in (["tv"] * 4, ["phone", "tv", "x", "phone"]):
        want = rec.recommend(history=HISTORY, device=values, k=5)
        got = loaded.recommend(history=HISTORY, device=values, k=5)
        assert got.items == want.items and np.allclose(got.scores, want.scores)


def test_a_users_live_history_reads_the_field_from_the_store(rec: Recommender, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "events.sqlite"))
    try:
        rec.use_store(store)
        store.append(
            [
                Event("u0", "i5", 1_800_000_000),  # none: not known
                Event("u0", "i6", 1_800_000_100, signals={"device": "tv"}),
                Event("u0", "i7", 1_800_000_200, signals={"device": "watch"}),  # never trained: unknown
            ]
        )
        row = rec.live_histories(["u0"])["u0"]
        tv = rec.vocabularies_["device"].get("tv")
        assert row.columns["device"].tolist()[-4:] == [UNKNOWN_CODE + 1, 0, tv, UNKNOWN_CODE]  # phone first
        assert rec.recommend(user="u0", k=3).ignored_inputs == []
    finally:
        rec.use_store(None)
        store.close()


def test_post_events_stores_the_field_and_a_retrain_trains_on_it(rec: Recommender, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "events.db")
    served = copy.deepcopy(rec)  # serving attaches the store to it
    config = ServingConfig(gc_freeze=False, store=store, unauthenticated_admin=True)
    events = [
        {"user": "u0", "item": "i5", "timestamp": 1_800_000_000, "device": "tv"},
        {"user": "u0", "item": "i6", "timestamp": 1_800_000_100, "device": "watch"},
        {"user": "u0", "item": "i7", "device": 3},  # not text
        {"user": "u0", "item": "i7", "devise": "tv"},  # not declared: an unknown field
    ]
    try:
        with TestClient(create_app({"dev": served}, config), raise_server_exceptions=False) as c:
            r = c.post("/v1/events", json={"events": events})
            assert r.status_code == 200, r.text
            assert r.json()["accepted"] == 2 and [e["index"] for e in r.json()["errors"]] == [2, 3]
            assert "device must be text" in r.json()["errors"][0]["message"]
            row = served.live_histories(["u0"])["u0"]
            tv = rec.vocabularies_["device"].get("tv")
            assert row.columns["device"].tolist()[-2:] == [tv, UNKNOWN_CODE]  # read back, not "not known"
            schemas = c.get("/openapi.json").json()["components"]["schemas"]
            event = schemas["EventsRequest"]["properties"]["events"]["items"]["properties"]
            assert event["device"]["description"] == "The device the event came from."
        done = retrain(rec.save(tmp_path / "v1"), store, _log(), tmp_path / "v2", train={"max_epochs": 1})
        assert done.exported == 2 and store.count() == 0
        joined = done.log.to_frame()
        assert joined[joined["user"] == "u0"]["device"].tolist()[-2:] == ["tv", "watch"]
        assert done.model.vocabularies_["device"].to_list() == sorted(DEVICES)  # warm: "watch" is unknown
        store.append([Event("u0", "i5", 1_900_000_000)])  # no device, which the model reads
        with pytest.raises(DataError, match="1 store events have no device, which the model reads"):
            joined_log(_log(), store.export(), [], ["device"])
    finally:
        store.close()


def test_a_warm_start_keeps_the_trained_vocabulary(rec: Recommender, device: Signal) -> None:
    newer = _frame().assign(device=lambda f: np.where(f.index % 3 == 0, "watch", f["device"]))
    warm = Recommender("sasrec", MODEL, TRAIN | {"max_epochs": 1})
    warm.fit(Interactions.from_frame(newer), init_from=rec, split="leave-one-out", progress=False)
    assert warm.vocabularies_["device"].to_list() == sorted(DEVICES)  # "watch" trained as unknown
    assert warm.recommend(history=HISTORY, device=["watch"] * 4, k=3).ignored_inputs == []


def test_post_recommend_reads_the_field(client: TestClient, rec: Recommender) -> None:
    body = {"model": "dev", "history": HISTORY, "k": 5, "exclude_seen": False}
    for value in DEVICES:
        r = client.post("/v1/recommend", json=body | {"device": [value] * 4})
        assert r.status_code == 200, r.text
        want = rec.recommend(history=HISTORY, device=[value] * 4, k=5, exclude_seen=False)
        assert [x["item"] for x in r.json()["items"]] == want.items
    bad = {
        "device": [1, 2, 3, 4],  # not text
        "devise": ["tv"] * 4,  # not declared: an unknown field
    }
    for key, values in bad.items():
        r = client.post("/v1/recommend", json=body | {key: values})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", r.text
    short = client.post("/v1/recommend", json=body | {"device": ["tv"]})
    assert short.status_code == 422 and "history of 4 items" in short.json()["error"]["message"]
    props = client.get("/openapi.json").json()["components"]["schemas"]["RecommendRequest"]["properties"]
    assert "The device the event came from." in props["device"]["description"]
    assert all(s.help in props[s.batch_key]["description"] for s in signals() if s.builtin)  # one help each


def test_the_explanation_names_each_events_device(client: TestClient, rec: Recommender) -> None:
    values = ["phone", "tv", "phone", "tv"]
    want = rec.recommend(history=HISTORY, device=values, k=3, explain="occlusion")
    assert want.explanations is not None and want.explanations[0] is not None
    said = dict(zip(HISTORY, values, strict=True))
    assert all(e.signals == {"device": said[e.item]} for e in want.explanations[0].events)
    body = {"model": "dev", "history": HISTORY, "device": values, "k": 3}
    r = client.post("/v1/recommend", json=body | {"explain": {"method": "occlusion", "top": 4}})
    assert r.status_code == 200, r.text
    because = r.json()["items"][0]["explanation"]["because"]
    assert because and all(b["signals"] == {"device": said[b["item"]]} for b in because)


def test_the_recommendation_explained_names_a_known_users_stored_devices(rec: Recommender) -> None:
    """``explain_recommendation`` reads a known user's stored history with its device column, as
    ``recommend(explain=...)`` does, and names each event's device (u0 is a phone user)."""
    found = explain_recommendation(rec, user="u0", k=2, method="occlusion", top=4)
    events = [e for x in found.explanations for e in x.events]
    assert events and all(e.signals == {"device": "phone"} for e in events)


def test_the_history_view_shows_each_events_device(client: TestClient) -> None:
    for user, device in (("u0", "phone"), ("u1", "tv")):
        r = client.get(f"/v1/users/{user}/history", params={"limit": 3})
        assert r.status_code == 200, r.text
        assert [x["signals"] for x in r.json()["items"]] == [{"device": device}] * 3
    history = client.get("/openapi.json").json()["components"]["schemas"]["HistoryItem"]["properties"]
    assert "declared signals the model reads" in history["signals"]["description"]


def test_a_numeric_signal_a_parquet_stream_and_bert4rec(device: Signal, tmp_path: Path) -> None:
    register_signal(Signal("price", "numeric", minimum=0.0))
    try:
        frame = _frame().assign(price=lambda f: (f.index % 5).astype(float))
        frame.to_parquet(tmp_path / "log.parquet")
        data = read_parquet_stream(tmp_path / "log.parquet")
        assert data.sequences().column("price").dtype == np.float32
        assert (data.to_frame()["device"] == Interactions.from_frame(frame).to_frame()["device"]).all()
        model = MODEL | {"signals": "device,price"}
        rec = Recommender("bert4rec", model, TRAIN | {"max_epochs": 1}).fit(data, progress=False)
        cheap = rec.recommend(history=HISTORY, device=["tv"] * 4, price=[0.0] * 4, k=5, exclude_seen=False)
        dear = rec.recommend(history=HISTORY, device=["tv"] * 4, price=[4.0] * 4, k=5, exclude_seen=False)
        assert cheap.scores != dear.scores and cheap.ignored_inputs == []
        with pytest.raises(ValueError, match="price must be at least 0"):
            rec.recommend(history=HISTORY, price=[-1.0] * 4)
        saved = rec.save(tmp_path / "model")
    finally:
        unregister_signal("price")
    declared = json.loads((saved / "signals.json").read_text())
    assert declared["price"] == {"kind": "numeric", "key": "", "aliases": ["price"], "minimum": 0.0} | {
        "help": "",
        "encoder": "",
    }
    assert (
        declared["device"]["values"] == sorted(DEVICES) and declared["device"]["aliases"][1] == "device_type"
    )
    try:  # the saved declaration declares it again (a CLI user has no Python to run first)
        loaded = Recommender.load(saved, device="cpu")
        assert find_signal("price") == Signal("price", "numeric", minimum=0.0)
        again = loaded.recommend(history=HISTORY, device=["tv"] * 4, price=[4.0] * 4, k=5, exclude_seen=False)
        assert again.items == dear.items and np.allclose(again.scores, dear.scores)
        Recommender.load(saved, device="cpu")  # the same declaration: nothing to do
    finally:
        unregister_signal("price")
    register_signal(Signal("price", "categorical"))
    try:  # a different declaration of the name in this process is refused, in one line
        with pytest.raises(
            CheckpointError,
            match=r"signals.json: signal 'price' is already declared with another kind, minimum",
        ):
            Recommender.load(saved, device="cpu")
    finally:
        unregister_signal("price")


def test_an_edited_or_malformed_declaration_is_refused(rec: Recommender, tmp_path: Path) -> None:
    saved = rec.save(tmp_path / "model")
    path = saved / "signals.json"
    device = json.loads(path.read_text())["device"]
    path.write_text(path.read_text().replace('"categorical"', '"numeric"    '))  # the same size
    with pytest.raises(CheckpointError, match="signals.json: checksum differs from manifest.json"):
        Recommender.load(saved, device="cpu")
    (saved / "manifest.json").unlink()  # unsigned: the structure checks still apply
    broken = {
        "kind must be one of categorical, numeric, time, not 'colour'": {"device": {"kind": "colour"}},
        "unknown declaration field 'shape'": {"device": {"kind": "categorical", "shape": 3}},
        "not a map": [],
        "values is not a list of text": {"device": device | {"values": [1]}},
        "already declared with another help": {"device": device | {"help": "Where it was."}},
    }
    for message, content in broken.items():
        path.write_text(json.dumps(content))
        with pytest.raises(CheckpointError, match=f"signals.json: .*{message}"):
            Recommender.load(saved, device="cpu", allow_unsigned=True)


def _key_sets(path: Path, names: set[str], root: Path = SRC) -> list[str]:
    """Literal sets, tuples and lists in ``path`` holding two or more of ``names`` (a file header's
    fingerprint compared with ``==`` is not a key set)."""
    tree = ast.parse(path.read_text())
    compared = {id(x) for node in ast.walk(tree) if isinstance(node, ast.Compare) for x in node.comparators}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Set | ast.Tuple | ast.List) and id(node) not in compared:
            text = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if len(text & names) >= 2:
                found.append(f"{path.relative_to(root)}:{node.lineno} {sorted(text & names)}")
    return found


def test_no_per_event_key_set_is_written_outside_the_declarations(tmp_path: Path) -> None:
    names = {s.name for s in signals()} | {s.batch_key for s in signals()}
    assert names >= {"event", "rating", "events", "ratings"}
    declaration = SRC / "data" / "signals.py"
    found = [hit for p in sorted(SRC.rglob("*.py")) if p != declaration for hit in _key_sets(p, names)]
    assert found == [], "derive these from attnrec.data.signals instead"
    # the scan itself: a new hard-coded set is caught, a header fingerprint compared with == is not
    (tmp_path / "new.py").write_text(
        'KEYS = frozenset({"events", "ratings"})\nOK = h == ["event", "rating"]\n'
    )
    assert _key_sets(tmp_path / "new.py", names, tmp_path) == ["new.py:1 ['events', 'ratings']"]


def test_a_filtered_log_keeps_its_declared_signals(csv_log: Interactions) -> None:
    from attnrec.data.filters import min_count_filter, rebuild

    keep = csv_log.timestamp < np.median(csv_log.timestamp)
    kept = rebuild(csv_log, keep)
    assert list(kept.signals) == ["device"]
    assert kept.to_frame()["device"].tolist() == csv_log.to_frame()["device"][keep].tolist()
    counts = np.bincount(csv_log.item)
    rarer = min_count_filter(csv_log, 0, int(counts[counts > 0].max()))  # keeps the most taken items only
    assert len(rarer) < len(csv_log) and list(rarer.signals) == ["device"]
