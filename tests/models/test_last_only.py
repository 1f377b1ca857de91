"""Scoring computes only the newest position in the final transformer block: same states as the full pass.

SASRec's and BERT4Rec's ``query_vectors`` (what serving and evaluation score with) run the last
block for the final position only. That position still attends to every position of the earlier
blocks' output, so its state must equal the full forward pass's last row, for left-padded
histories of different lengths in one batch, in eval mode.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnrec.data.schema import Sequences
from attnrec.models.bert4rec import BERT4Rec, BERT4RecConfig
from attnrec.models.nn.wrapper import NEWEST
from attnrec.models.sasrec import SASRec, SASRecConfig


def _histories(n_items: int) -> Sequences:
    rng = np.random.default_rng(0)
    rows = [rng.integers(1, n_items + 1, size=n) for n in (1, 4, 9, 12)]  # 12 > max_len: truncated
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    return Sequences(offsets, np.concatenate(rows).astype(np.int64), n_items)


@pytest.mark.parametrize("model", ["sasrec", "bert4rec"])
def test_last_position_state_equals_the_full_pass(model: str) -> None:
    torch.manual_seed(0)
    core: SASRec | BERT4Rec
    if model == "sasrec":
        core = SASRec(SASRecConfig(hidden=16, n_heads=2, n_layers=3, max_len=10, dropout=0.3), 5, 40)
    else:
        core = BERT4Rec(BERT4RecConfig(hidden=16, n_heads=2, n_layers=3, max_len=10), 5, 40)
    core.eval()
    batch = core.score_inputs(np.arange(4), _histories(40))
    with torch.no_grad():
        full = core.encode(batch["seq"])[:, -1, :]  # (B, D) every position in every block
        last = core.forward(batch, NEWEST)[0]  # (B, 1, D)
        assert last.shape == (4, 1, 16)
        torch.testing.assert_close(last[:, 0], full, rtol=1e-5, atol=1e-6)
        scores = core.score(batch)
    # and the scores built on it are the full pass's
    want = full if model == "sasrec" else core.project(full)
    torch.testing.assert_close(
        scores[:, 1:],
        (want @ core.item_vectors().T)[:, 1:] + (0 if model == "sasrec" else core.item_bias()[1:]),
        rtol=1e-5,
        atol=1e-5,
    )
