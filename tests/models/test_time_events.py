"""Time, event types and ratings inside SASRec and BERT4Rec (attnrec.models.event_context).

Off by default nothing is created; on, the options change scores only through their own
embeddings and biases (zeroed, the ID-only scores come back), SASRec stays causal, targets are only
events of the wanted types and ratings, and a missing column is a one-line error naming it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnrec.data.schema import DataError, IdMap, Sequences
from attnrec.models.bert4rec import BERT4Rec, BERT4RecConfig
from attnrec.models.event_context import EXPLICIT_NEGATIVE, REQUEST_TIME, interval_buckets
from attnrec.models.item_context import ModelContext
from attnrec.models.sasrec import SASRec, SASRecConfig
from synthetic_logs import HOURLY_VARIANTS, hourly_sequences, train_hourly_sasrec

N_ITEMS = 20
EVENTS = IdMap(np.array(["buy", "cart", "view"], dtype=object), offset=1)  # codes: buy 1, cart 2, view 3
CONTEXT = ModelContext(events=EVENTS)
ALL_INPUTS = {"time_intervals": 8, "time_features": "periodic", "event_input": True, "rating_input": True}


def log(n_users: int = 12, seed: int = 0, length: int = 14) -> Sequences:
    """Users with ``length`` events each: random items, irregular times (minutes to days), events and
    ratings."""
    rng = np.random.default_rng(seed)
    n = n_users * length
    gaps = rng.choice([60, 600, 3600, 7200, 86400, 3 * 86400], size=(n_users, length))
    ts = 1_700_000_000 + np.cumsum(gaps, axis=1).ravel()
    return Sequences(
        np.arange(0, n + 1, length),
        rng.integers(1, N_ITEMS + 1, n),
        N_ITEMS,
        {"timestamp": ts, "event": rng.integers(1, 4, n), "rating": rng.integers(1, 11, n) / 2.0},
    )


def sasrec(**over: object) -> SASRec:
    torch.manual_seed(0)
    cfg = SASRecConfig(hidden=16, max_len=10, n_heads=2, dropout=0.0, loss="ce", **over)  # type: ignore[arg-type]
    return SASRec(cfg, 5, N_ITEMS, CONTEXT).eval()


def bert4rec(**over: object) -> BERT4Rec:
    torch.manual_seed(0)
    cfg = BERT4RecConfig(hidden=16, max_len=10, n_heads=2, dropout=0.0, attn_dropout=0.0, **over)  # type: ignore[arg-type]
    return BERT4Rec(cfg, 5, N_ITEMS, CONTEXT).eval()


def visible_intervals(model: SASRec | BERT4Rec) -> None:
    """Random interval biases (they start at zero, where they change nothing)."""
    assert model.event_ctx is not None and model.event_ctx.intervals is not None
    with torch.no_grad():
        model.event_ctx.intervals.normal_(0.0, 1.0)


def zero_event_params(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("event_ctx."):
                p.zero_()


def test_options_off_create_nothing_and_keep_the_parameters() -> None:
    plain = SASRec(SASRecConfig(hidden=16, max_len=10), 5, N_ITEMS)
    assert plain.event_ctx is None and plain.targets is None
    names = [n for n, _ in sasrec(**ALL_INPUTS, request_time=True).named_parameters()]
    # the options add only their own module, after every ID-only parameter, in the same order
    assert [n for n in names if not n.startswith("event_ctx.")] == [n for n, _ in sasrec().named_parameters()]
    assert names[-1].startswith("event_ctx.")
    b = BERT4Rec(BERT4RecConfig(hidden=16, max_len=10), 5, N_ITEMS)
    assert b.event_ctx is None and b.targets is None


@pytest.mark.parametrize("make", [sasrec, bert4rec])
def test_zeroed_event_embeddings_give_the_id_only_scores(make: object) -> None:
    seqs = log()
    users = np.arange(4)
    plain = make()  # type: ignore[operator]
    with_time = make(**ALL_INPUTS)  # type: ignore[operator]
    visible_intervals(with_time)
    base = plain.score(plain.score_inputs(users, seqs.take(users)))
    batch = with_time.score_inputs(users, seqs.take(users))
    assert {"timestamps", "events", "ratings"} <= set(batch)
    assert not torch.allclose(with_time.score(batch), base, atol=1e-4)  # the inputs do change the scores
    zero_event_params(with_time)
    assert torch.allclose(with_time.score(batch), base, atol=1e-5)  # ... only through their own parameters


def _states(model: SASRec, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model.forward(batch)[0]  # (B, T, D)


@pytest.mark.parametrize("request_time", [False, True])
@pytest.mark.parametrize("key", ["timestamps", "events", "ratings"])
def test_sasrec_stays_causal_with_time_event_and_rating_inputs(key: str, request_time: bool) -> None:
    model = sasrec(**(ALL_INPUTS | {"time_intervals": 64}), request_time=request_time)
    visible_intervals(model)
    seqs = log()
    batch = model.score_inputs(np.arange(3), seqs.take(np.arange(3)))
    batch[REQUEST_TIME] = batch["timestamps"][:, -1] + 3600
    before = _states(model, batch)
    # change event j: positions before it (before j - 1 with request_time, whose request is t_j) keep their
    # states
    j = 6
    changed = dict(batch)
    changed[key] = batch[key].clone()
    # a time 1 s after the previous event: the smallest gap of the window, which must not rescale earlier
    # intervals
    changed[key][:, j] = {
        "timestamps": changed[key][:, j - 1] + 1,
        "events": 1 + changed[key][:, j] % 3,
        "ratings": 5.5 - changed[key][:, j],
    }[key]
    after = _states(model, changed)
    first_seen = j - 1 if request_time and key == "timestamps" else j
    assert torch.equal(before[:, :first_seen], after[:, :first_seen])
    assert not torch.allclose(before[:, first_seen:], after[:, first_seen:])
    # the request time reaches the newest position only, and only with request_time
    later = dict(batch)
    later[REQUEST_TIME] = batch[REQUEST_TIME] + 5 * 3600
    moved = _states(model, later)
    assert torch.equal(moved[:, :-1], before[:, :-1])
    assert torch.equal(moved[:, -1], before[:, -1]) != request_time


def test_time_intervals_are_scaled_by_the_smallest_gap_so_far_and_clipped() -> None:
    ts = torch.tensor([[0, 100, 200, 210, 1000]])
    real = torch.tensor([[False, True, True, True, True]])
    causal = interval_buckets(ts, real, 50, causal=True)[0]
    assert causal[2, 1] == 1  # gap 100 / smallest gap so far 100
    assert causal[4, 1] == 50 and causal[3, 1] == 11  # 900 / 10 clipped at 50; 110 / 10
    whole = interval_buckets(ts, real, 50, causal=False)[0]
    assert whole[2, 1] == 10  # the whole window's smallest gap (10) would be a later event's time


def test_missing_column_is_a_one_line_error_naming_it() -> None:
    plain = Sequences.from_lists([[1, 2, 3], [4, 5]], N_ITEMS)
    with pytest.raises(DataError, match="'timestamp'") as e:
        sasrec(time_features="periodic").score_inputs(np.arange(2), plain)
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match="'event'"):
        next(sasrec(event_input=True).train_batches(plain, 4, np.random.default_rng(0)))
    with pytest.raises(DataError, match="'rating'"):
        next(bert4rec(rating_input=True).train_batches(plain, 4, np.random.default_rng(0)))
    with pytest.raises(ValueError, match="event vocabulary"):
        SASRec(SASRecConfig(event_input=True), 5, N_ITEMS)


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"time_features": "cyclic"}, "time_features must be one of"),
        ({"explicit_negatives": True}, "needs min_target_rating"),
        ({"time_intervals": -1}, ">= 0"),
    ],
)
def test_inconsistent_event_settings_are_refused(bad: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SASRecConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=match):
        BERT4RecConfig(**bad)  # type: ignore[arg-type]


def test_sasrec_targets_only_at_qualifying_events_and_low_ratings_as_negatives() -> None:
    seqs = log(n_users=30)
    model = sasrec(target_events="buy,cart", min_target_rating=3.0, explicit_negatives=True)
    n_batches = 0
    for batch in model.train_batches(seqs, 8, np.random.default_rng(0)):
        n_batches += 1
        target, neg = batch["target"], batch[EXPLICIT_NEGATIVE]
        assert bool((target > 0).any(1).all())  # every row has a target of the wanted kind
        assert not bool(((target > 0) & (neg > 0)).any())  # a low-rated event is never a positive
        assert bool((neg > 0).any())
    assert n_batches == -(-model.train_rows(seqs) // 8)
    # check every target against the log: find each (user window) by matching the input rows
    windows = seqs.padded(11)
    cols = {k: seqs.padded_column(k, 11) for k in ("event", "rating")}
    batch = next(model.train_batches(seqs, 64, np.random.default_rng(1)))
    for r in range(len(batch["seq"])):
        u = int(np.flatnonzero((windows[:, :-1] == batch["seq"][r].numpy()).all(1))[0])
        ev, rt = cols["event"][u, 1:], cols["rating"][u, 1:]
        ok = np.isin(ev, [1, 2]) & (rt >= 3.0)
        assert np.array_equal(batch["target"][r].numpy(), np.where(ok, windows[u, 1:], 0))
        assert np.array_equal(
            batch[EXPLICIT_NEGATIVE][r].numpy(), np.where(np.isin(ev, [1, 2]) & (rt < 3.0), windows[u, 1:], 0)
        )
    loss = model.loss(batch)
    assert torch.isfinite(loss)
    # the explicit negatives are in the loss: it grows with their scores
    without = sasrec(target_events="buy,cart", min_target_rating=3.0).loss(batch)
    assert loss > without


def test_bert4rec_masks_only_qualifying_targets_and_hides_their_event_and_rating() -> None:
    seqs = log(n_users=30)
    model = bert4rec(
        **ALL_INPUTS,
        target_events="buy",
        min_target_rating=2.0,
        explicit_negatives=True,
        mask_prob=0.5,
        mask_last_prob=0.3,
    )
    windows = seqs.padded(10)
    ev, rt = seqs.padded_column("event", 10), seqs.padded_column("rating", 10)
    batch = next(model.train_batches(seqs, 64, np.random.default_rng(0)))
    labels, neg = batch["labels"].numpy(), batch[EXPLICIT_NEGATIVE].numpy()
    assert (labels > 0).any(1).all() and (neg > 0).any()
    for r in range(len(labels)):
        u = int(
            np.flatnonzero((batch["timestamps"][r].numpy() == seqs.padded_column("timestamp", 10)).all(1))[0]
        )
        target, low = labels[r] > 0, neg[r] > 0
        assert (ev[u][target] == 1).all() and (rt[u][target] >= 2.0).all()  # only buys rated >= 2 are targets
        assert (ev[u][low] == 1).all() and (rt[u][low] < 2.0).all()  # low-rated buys only as negatives
        assert (labels[r][target] == windows[u][target]).all() and (neg[r][low] == windows[u][low]).all()
        hidden = target | low
        assert (batch["events"][r].numpy()[hidden] == 0).all() and batch["ratings"][r][hidden].isnan().all()
        assert (batch["events"][r].numpy()[~hidden] == ev[u][~hidden]).all()
    assert torch.isfinite(model.loss(batch))
    # sliding_step 0: one window per user, the newest 10 events; only those holding a buy rated >= 2 train
    assert model.train_rows(seqs) == int(((ev == 1) & (rt >= 2.0)).any(1).sum()) < seqs.n_users


def test_bert4rec_mask_stands_at_the_request_time_and_chunks_keep_the_columns() -> None:
    seqs = log()
    model = bert4rec(**ALL_INPUTS)
    batch = model.score_inputs(np.arange(4), seqs.take(np.arange(4)))
    assert torch.equal(
        batch["timestamps"][:, -1], batch["timestamps"][:, -2]
    )  # no request time: the newest event's
    assert (batch["events"][:, -1] == 0).all() and batch["ratings"][:, -1].isnan().all()
    base = model.score(batch)
    later = batch | {REQUEST_TIME: batch["timestamps"][:, -1] + 7 * 3600}
    assert not torch.allclose(model.score(later), base)
    same = batch | {REQUEST_TIME: batch["timestamps"][:, -1]}
    assert torch.equal(model.score(same), base)
    chunked = bert4rec(**ALL_INPUTS, length_chunks=3)
    short = Sequences(seqs.offsets, seqs.items, N_ITEMS, seqs.columns).truncate_end(0)
    train = next(chunked.train_batches(short, 12, np.random.default_rng(0)))
    sel = train["labels"] > 0
    with torch.no_grad():
        assert torch.allclose(
            chunked.encode_at(train["seq"], sel, train),
            model.forward(train)[0][sel],
            atol=1e-5,
        )


def test_hstu_reads_the_timestamp_column_for_its_time_bias() -> None:
    from attnrec.models.hstu import HSTU, HSTUConfig

    torch.manual_seed(0)
    model = HSTU(HSTUConfig(hidden=16, dqk=8, dv=8, max_len=10, dropout=0.0), 5, N_ITEMS).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.rab.time_w.normal_(0.0, 1.0)  # a visible time bias
    seqs = log()
    batch = model.score_inputs(np.arange(3), seqs.take(np.arange(3)))
    assert torch.equal(
        batch["timestamps"], torch.from_numpy(seqs.take(np.arange(3)).padded_column("timestamp", 10))
    )
    plain = Sequences(seqs.offsets, seqs.items, N_ITEMS)  # the same log without its columns
    without = model.score_inputs(np.arange(3), plain.take(np.arange(3)))
    assert "timestamps" not in without and not torch.allclose(model.score(batch), model.score(without))
    train = next(model.train_batches(seqs, 4, np.random.default_rng(0)))
    first = int(np.flatnonzero((seqs.padded(11)[:, :-1] == train["seq"][0].numpy()).all(1))[0])
    assert torch.equal(
        train["timestamps"][0], torch.from_numpy(seqs.padded_column("timestamp", 11)[first, :-1])
    )


def hourly_log(n_users: int, seed: int, length: int = 12) -> Sequences:
    """The next item depends on the hour of day only (:func:`synthetic_logs.hourly_sequences`)."""
    items, ts = hourly_sequences(n_users, seed, length)
    return Sequences(np.arange(0, n_users * length + 1, length), items.ravel(), 24, {"timestamp": ts.ravel()})


def test_time_aware_sasrec_learns_an_hour_of_day_pattern_the_id_only_one_cannot() -> None:
    train, test = hourly_log(300, seed=0), hourly_log(200, seed=1)
    history, last = test.truncate_end(1), test.offsets[1:] - 1
    hits = {}
    for name, over in HOURLY_VARIANTS.items():
        model = train_hourly_sasrec(train, over)
        batch = model.score_inputs(np.arange(200), history)
        batch[REQUEST_TIME] = torch.from_numpy(test.column("timestamp")[last])  # when the user comes back
        with torch.no_grad():
            top = model.score(batch).topk(6, dim=1).indices.numpy()
        hits[name] = float((top == test.items[last][:, None]).any(1).mean())
    # ID-only: the next group is a guess (~ 6 of 24 items); with the request's hour it is known
    assert hits["id-only"] < 0.45 and hits["time"] > 0.9, hits
