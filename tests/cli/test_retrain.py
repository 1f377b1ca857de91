"""``attnrec retrain``: export the store, join, warm-start, save, reload, trim; events during it stay."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.cli.retrain import retrain
from attnrec.data.schema import DataError, Interactions
from attnrec.recommend import Recommender
from attnrec.store import Event, SqliteStore

runner = CliRunner()
TINY = {"hidden": 8, "n_layers": 1, "n_heads": 1, "max_len": 10}
FAST = {"max_epochs": 1, "batch_size": 64, "seed": 1, "threads": 1}


def base_frame() -> pd.DataFrame:
    rows = [(f"u{u}", f"i{(u + t) % 20}", 1000 * u + t) for u in range(40) for t in range(5 + u % 6)]
    return pd.DataFrame(rows, columns=["user", "item", "timestamp"])


def store_events() -> list[Event]:
    """A known user's new clicks, a new user, and new items."""
    return [
        Event("u1", "i7", 90_000),
        Event("u1", "fresh1", 90_001),
        *(Event("newbie", f"fresh{t % 3}", 90_000 + t) for t in range(5)),
    ]


def retrain_args(old: Path, db: Path, base: Path, out: Path) -> list[str]:
    """``attnrec retrain`` of the model ``old`` with the store ``db`` and the log ``base`` into ``out``."""
    return ["retrain", "--model", str(old), "--store", str(db), "--data", str(base), "--out", str(out)]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    base = tmp_path / "base.csv"
    base_frame().to_csv(base, index=False)
    old = Recommender("sasrec", TINY, FAST).fit(base_frame(), progress=False).save(tmp_path / "old")
    store = SqliteStore(tmp_path / "events.db")
    store.append(store_events())
    store.close()
    return base, old, tmp_path / "events.db"


def test_retrain_end_to_end_on_a_sqlite_store(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, old, db = setup
    out, next_log = tmp_path / "new", tmp_path / "logs" / "next.parquet"
    result = runner.invoke(
        app,
        [
            *retrain_args(old, db, base, out),
            "--log-out",
            str(next_log),
            "--max-epochs",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "7 from the store" in " ".join(result.output.split())
    before, after = Recommender.load(old), Recommender.load(out)
    assert before.items_ is not None and after.items_ is not None and before.users_ is not None
    assert after.users_ is not None
    assert after.items_.to_list()[: len(before.items_)] == before.items_.to_list()
    assert after.users_.to_list()[: len(before.users_)] == before.users_.to_list()
    assert {"fresh0", "fresh1", "fresh2"} <= set(after.items_.to_list()) and "newbie" in after.users_
    answer = after.recommend(user="newbie", k=5)
    assert answer.fallback is None and not {"fresh0", "fresh1", "fresh2"} & set(
        answer.items
    )  # seen: excluded
    store = SqliteStore(db)
    assert store.count() == 0  # moved into the new model's log, not counted twice
    store.close()
    joined = pd.read_parquet(next_log)
    assert len(joined) == len(base_frame()) + len(store_events())


def test_events_arriving_during_the_retrain_stay_and_are_live_after_the_reload(
    setup: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from attnrec.serving.app import ServingConfig, create_app

    base, old, db = setup
    store = SqliteStore(db)
    client_app = create_app({"m": old}, ServingConfig(unauthenticated_admin=True, store=store))
    with TestClient(client_app) as client:
        deadline = time.monotonic() + 60
        while (ready := client.get("/readyz").status_code) != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready == 200  # the directory loads in the background: a reload before that is a 409

        def reload(path: Path) -> None:
            store.append([Event("u1", "i3", 95_000)])  # arrives while the retrain runs, before the switch
            answer = client.post("/v1/admin/reload", json={"model": "m", "path": str(path)})
            assert answer.status_code == 200, answer.text

        done = retrain(
            old, store, Interactions.from_frame(base_frame()), tmp_path / "new", reload=reload, train=FAST
        )
        assert done.exported == len(store_events()) and done.trimmed == len(store_events()) and done.reloaded
        assert store.export()[["user", "item"]].values.tolist() == [["u1", "i3"]]
        history = client.get("/v1/users/u1/history", params={"limit": 3}).json()
        assert [i["item"] for i in history["items"]] == [
            "i7",
            "fresh1",
            "i3",
        ]  # trained events once, then live
        assert history["length"] == len(base_frame().query("user == 'u1'")) + 3
    store.close()


def test_retrain_refuses_to_overwrite_its_own_model(setup: tuple[Path, Path, Path]) -> None:
    base, old, db = setup
    result = runner.invoke(app, retrain_args(old, db, base, old))
    assert result.exit_code == 2 and "must not overwrite" in result.output, result.output


@pytest.mark.parametrize("reads_ratings", [False, True])
def test_store_events_without_a_rating_join_a_rated_log_unless_the_model_reads_ratings(
    tmp_path: Path, reads_ratings: bool
) -> None:
    """``rating`` is optional in ``POST /v1/events``: a log with ratings and events without them retrain a
    model that never reads ratings; a model that does is told which column the events lack."""
    rated = base_frame().assign(rating=4.0)
    model = TINY | ({"rating_input": True} if reads_ratings else {})
    old = Recommender("sasrec", model, FAST).fit(rated, progress=False).save(tmp_path / "old")
    store = SqliteStore(tmp_path / "events.db")
    store.append(store_events())  # no ratings
    base = Interactions.from_frame(rated, rating="rating")
    try:
        if reads_ratings:
            with pytest.raises(DataError, match="7 store events have no rating, which the model reads"):
                retrain(old, store, base, tmp_path / "new", train=FAST)
            assert store.count() == len(store_events())  # nothing trimmed
        else:
            done = retrain(old, store, base, tmp_path / "new", train=FAST)
            assert done.exported == len(store_events()) and done.log.rating is None
            assert "newbie" in Recommender.load(tmp_path / "new").users_  # type: ignore[operator]
    finally:
        store.close()


def test_retrain_new_only_fine_tunes_on_the_store_events(
    setup: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, old, db = setup
    seen: list[float | None] = []
    fit = Recommender.fit

    def recording(self: Recommender, *args: object, **kwargs: object) -> Recommender:
        seen.append(kwargs.get("new_since"))  # type: ignore[arg-type]
        return fit(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Recommender, "fit", recording)
    args = retrain_args(old, db, base, tmp_path / "n")
    result = runner.invoke(app, [*args, "--new-only"])
    assert result.exit_code == 0, result.output
    assert seen == [90_000.0]  # the oldest store event's time
    assert "for 1 epoch(s)" in " ".join(result.output.split())  # one pass over the new events by default
    assert "newbie" in (Recommender.load(tmp_path / "n").users_ or [])


def test_train_new_since_takes_a_date_and_refuses_a_bad_one(tmp_path: Path) -> None:
    data, old = tmp_path / "log.csv", tmp_path / "old"
    frame = base_frame()
    frame.to_csv(data, index=False)
    Recommender("sasrec", TINY, FAST).fit(frame[frame["timestamp"] < 20_000], "none", progress=False).save(
        old
    )
    common = ["train", "--model", "sasrec", "--data", str(data), "--init-from", str(old), "--split", "none"]
    common += ["--quiet", "--no-baseline", "--max-epochs", "1", "--out", str(tmp_path / "new")]
    ok = runner.invoke(app, [*common, "--new-since", "1970-01-01T05:33:20Z"])  # 20,000 s
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, [*common, "--new-since", "last tuesday"])
    assert bad.exit_code != 0 and "neither Unix seconds nor an ISO date/time" in bad.output
    late = runner.invoke(app, [*common, "--new-since", "99999999"])
    assert late.exit_code != 0 and "no event at or after it" in " ".join(late.output.split())


def test_train_new_since_with_leave_one_out_validates_the_new_users_then_a_final_fit_takes_its_epoch(
    tmp_path: Path,
) -> None:
    data, old = tmp_path / "log.csv", tmp_path / "old"
    frame = base_frame()
    frame.to_csv(data, index=False)
    Recommender("sasrec", TINY, FAST).fit(frame[frame["timestamp"] < 20_000], "none", progress=False).save(
        old
    )
    common = ["train", "--model", "sasrec", "--data", str(data), "--init-from", str(old), "--quiet"]
    common += ["--new-since", "20000"]
    validated = tmp_path / "validated"
    first = runner.invoke(
        app, [*common, "--split", "leave-one-out", "--max-epochs", "4", "--out", str(validated)]
    )
    assert first.exit_code == 0, first.output
    text = " ".join(first.output.split())
    n_new = frame[frame["timestamp"] >= 20_000]["user"].nunique()  # users u20 ... u39
    assert f"{n_new:,} validation / 0 test users" in text  # only the users with new events, nothing tested
    record = Recommender.load(validated).train_result_
    assert record is not None and 1 <= record.best_epoch <= record.epochs <= 4
    final = runner.invoke(
        app, [*common, "--split", "none", "--epochs-from", str(validated), "--out", str(tmp_path / "final")]
    )
    assert final.exit_code == 0, final.output
    assert f"trained {record.best_epoch} epoch(s) on every event" in " ".join(final.output.split())


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--split", "temporal", "--init-from", "OLD"], "not --split temporal"),
        (["--split", "leave-one-out"], "give --init-from too"),
        (["--split", "leave-one-out", "--init-from", "OLD", "--valid-users", "5"], "drop --valid-users"),
        (
            ["--split", "leave-one-out", "--init-from", "OLD", "--protocol", "sampled-popularity"],
            "drop --protocol",
        ),
    ],
)
def test_train_new_since_refuses_what_it_cannot_use_in_one_line(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    extra = [str(tmp_path / "old") if x == "OLD" else x for x in extra]
    args = ["train", "--model", "sasrec", "--data", str(tmp_path / "absent.csv"), "--new-since", "20000"]
    result = runner.invoke(app, [*args, *extra])
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())  # before any data is read: the log does not exist


def test_retrain_validate_epochs_chooses_them_on_the_store_users_last_events(
    setup: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, old, db = setup
    fits: list[tuple[object, object]] = []
    fit = Recommender.fit

    def recording(self: Recommender, data: object, split: object = None, **kwargs: object) -> Recommender:
        fits.append((split, kwargs.get("new_since")))
        return fit(self, data, split, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Recommender, "fit", recording)
    args = retrain_args(old, db, base, tmp_path / "n")
    result = runner.invoke(app, [*args, "--new-only", "--validate-epochs", "--max-epochs", "3"])
    assert result.exit_code == 0, result.output
    assert fits == [("leave-one-out", 90_000.0), ("none", 90_000.0)]  # validated, then the final fine-tune
    text = " ".join(result.output.split())
    best = int(text.split("validated fine-tune: best epoch ")[1].split()[0])
    assert 1 <= best <= 3 and f"for {best} epoch(s)" in text


def test_retrain_validate_epochs_needs_new_only(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, old, db = setup
    args = retrain_args(old, db, base, tmp_path / "n")
    result = runner.invoke(app, [*args, "--validate-epochs"])
    assert result.exit_code != 0 and "add --new-only" in " ".join(result.output.split())
    assert len(SqliteStore(db).export()) == len(store_events())  # the store is left as it was


@pytest.mark.parametrize("rows", ["initial", "histories"])
def test_retrain_passes_new_item_rows_to_both_fine_tunes(
    setup: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: str
) -> None:
    base, old, db = setup
    seen: list[object] = []
    fit = Recommender.fit

    def recording(self: Recommender, *args: object, **kwargs: object) -> Recommender:
        seen.append(kwargs.get("new_item_rows"))
        return fit(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Recommender, "fit", recording)
    args = [*retrain_args(old, db, base, tmp_path / "n"), "--new-only", "--validate-epochs"]
    result = runner.invoke(app, [*args, "--new-item-rows", rows])
    assert result.exit_code == 0, result.output
    assert seen == [rows, rows]  # the validated fine-tune and the final one
