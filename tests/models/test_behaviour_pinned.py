"""Training behaviour pinned bit for bit: one epoch of each transformer (and each of its objectives) with a
fixed seed gives the weights and scores recorded in ``behaviour_pinned.json``.

What it guards: moving code between modules (objectives, batch builders, the shared wrapper, the
backbones) must not change what a model computes, the order it draws random numbers in, or the names
of its saved weights. The figures are float32 arithmetic of one CPU build of torch, so they are
compared only under the torch version that recorded them (elsewhere the test is skipped). After a
deliberate change of behaviour, re-record with ``ATTNREC_RECORD_BEHAVIOUR=1`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from attnrec.data.schema import IdMap, Sequences
from attnrec.models.item_context import ModelContext
from attnrec.models.registry import get_spec

PINNED = Path(__file__).with_name("behaviour_pinned.json")
RECORD = os.environ.get("ATTNREC_RECORD_BEHAVIOUR") == "1"
N_ITEMS = 30
EVENTS = IdMap(np.array(["buy", "cart", "view"], dtype=object), offset=1)

# (name, model, config overrides): every objective of every transformer, and the per-event options.
SMALL = {"hidden": 16, "n_layers": 2, "n_heads": 2, "max_len": 10, "dropout": 0.1}
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("sasrec-bce", "sasrec", {}),
    (
        "sasrec-ce",
        "sasrec",
        {"loss": "ce", "fast_ce": False, "fast_dropout": False},
    ),  # the kernels of old runs
    ("sasrec-ce-fast", "sasrec", {"loss": "ce", "fast_ce": True, "fast_dropout": True}),
    ("sasrec-sampled", "sasrec", {"loss": "sampled_ce", "n_negatives": 8}),
    (
        "sasrec-sampled-mixed",
        "sasrec",
        {"loss": "sampled_ce", "n_negatives": 8, "sampler": "mixed", "in_batch_negatives": 3},
    ),
    ("sasrec-sparse", "sasrec", {"loss": "sampled_ce", "n_negatives": 8, "sparse_embedding": True}),
    ("sasrec-authors", "sasrec", {"authors_attention": True, "attn_dropout": 0.0}),
    (
        "sasrec-events",
        "sasrec",
        {
            "loss": "sampled_ce",
            "sampler": "popularity",
            "n_negatives": 8,
            "time_intervals": 4,
            "event_input": True,
            "rating_input": True,
            "min_target_rating": 2.0,
            "explicit_negatives": True,
            "request_time": True,
        },
    ),
    ("sasrec-events-bce", "sasrec", {"target_events": "buy,cart", "time_features": "periodic"}),
    ("bert4rec-ce", "bert4rec", {}),
    ("bert4rec-sampled", "bert4rec", {"loss": "sampled_ce", "n_negatives": 8, "sampler": "mixed"}),
    ("bert4rec-chunks", "bert4rec", {"length_chunks": 3, "sliding_step": 3, "use_80_10_10": True}),
    (
        "bert4rec-events",
        "bert4rec",
        {"time_intervals": 4, "event_input": True, "min_target_rating": 2.0, "explicit_negatives": True},
    ),
    ("gsasrec", "gsasrec", {"n_negatives": 8}),
    ("gsasrec-reuse", "gsasrec", {"n_negatives": 8, "reuse_item_embeddings": True, "gbce_t": 0.5}),
    ("esasrec-sampled", "esasrec", {"n_negatives": 8}),
    ("esasrec-position", "esasrec", {"n_negatives": 8, "negatives": "position", "item_table_dropout": True}),
    ("esasrec-sequence", "esasrec", {"n_negatives": 8, "negatives": "sequence", "sampler": "mixed"}),
    ("esasrec-ce", "esasrec", {"loss": "ce"}),
    ("hstu-sampled", "hstu", {"n_negatives": 8, "dqk": 8, "dv": 8}),
    ("hstu-position", "hstu", {"n_negatives": 8, "dqk": 8, "dv": 8, "negatives": "position"}),
    ("hstu-ce", "hstu", {"loss": "ce", "dqk": 8, "dv": 8}),
    ("gru4rec-ce", "gru4rec", {}),
    ("gru4rec-plus-bpr-max", "gru4rec-plus", {}),
    ("gru4rec-plus-top1-max", "gru4rec-plus", {"loss": "top1-max"}),
    ("bprmf", "bprmf", {"dim": 8, "n_negatives": 2}),
    ("ncf", "ncf", {"gmf_dim": 4, "n_negatives": 2}),
]
GRU_SMALL = {"hidden": 16, "emb_dim": 8, "max_len": 10, "dropout": 0.1, "n_negatives": 16}
BASE = {"sasrec": SMALL, "bert4rec": SMALL, "gsasrec": SMALL, "esasrec": SMALL, "hstu": SMALL}


def _log(seed: int = 0) -> Sequences:
    """40 users with 3-16 events each: items, irregular times, event types and ratings."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 17, 40)
    n = int(lengths.sum())
    ts = 1_700_000_000 + np.cumsum(rng.choice([60, 3600, 86400, 3 * 86400], size=n))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    columns = {"timestamp": ts, "event": rng.integers(1, 4, n), "rating": rng.integers(1, 11, n) / 2.0}
    return Sequences(offsets, rng.integers(1, N_ITEMS + 1, n), N_ITEMS, columns)


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _run(model_name: str, over: dict[str, Any]) -> dict[str, Any]:
    """One epoch (batch 8, Adam) from seed 0, then the scores of every user's history."""
    spec = get_spec(model_name)
    base = GRU_SMALL if model_name.startswith("gru4rec") else BASE.get(model_name, {})
    config = spec.config_cls(**(base | over))
    train = _log()
    torch.manual_seed(0)
    kwargs = {"context": ModelContext(events=EVENTS)} if model_name in ("sasrec", "bert4rec") else {}
    model = spec.cls(config, train.n_users, N_ITEMS, **kwargs)
    init = _digest(*(v.detach().numpy() for v in model.state_dict().values()))
    dense = [
        p for n, p in model.named_parameters() if n != "item_emb.weight" or not over.get("sparse_embedding")
    ]
    opt = torch.optim.Adam(dense, lr=1e-2)
    sparse = (
        torch.optim.SparseAdam([model.item_emb.weight], lr=1e-2) if over.get("sparse_embedding") else None
    )
    rng = np.random.default_rng(0)
    model.train()
    losses = []
    for batch in model.train_batches(train, 8, rng):
        opt.zero_grad()
        if sparse is not None:
            sparse.zero_grad()
        loss = model.loss(batch)
        loss.backward()
        opt.step()
        if sparse is not None:
            sparse.step()
        losses.append(float(loss.detach()))
    model.eval()
    with torch.no_grad():
        users = np.arange(train.n_users)
        scores = model.score(
            model.score_inputs(users, train, train.column("timestamp")[train.offsets[1:] - 1])
        )
    state = model.state_dict()
    return {
        "rows": int(model.train_rows(train)),
        "keys": sorted(state),
        "init": init,
        "losses": _digest(np.array(losses)),
        "weights": _digest(*(state[k].detach().numpy() for k in sorted(state))),
        "scores": _digest(scores.numpy()),
    }


def _pinned() -> dict[str, Any]:
    return json.loads(PINNED.read_text()) if PINNED.exists() else {}


@pytest.mark.parametrize(("name", "model", "over"), CASES, ids=[c[0] for c in CASES])
def test_one_epoch_repeats_the_pinned_weights_and_scores(name: str, model: str, over: dict[str, Any]) -> None:
    got = _run(model, over)
    pinned = _pinned()
    if RECORD:
        pinned.setdefault("torch", torch.__version__)
        pinned.setdefault("cases", {})[name] = got
        PINNED.write_text(json.dumps(pinned, indent=1, sort_keys=True) + "\n")
        return
    if pinned.get("torch") != torch.__version__:
        pytest.skip(f"pinned under torch {pinned.get('torch')}, this is {torch.__version__}")
    assert got == pinned["cases"][name]
