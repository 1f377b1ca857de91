"""Model directories saved before the house refactor (issue 17) load and answer exactly as they did.

``tests/fixtures/legacy/`` was written by ``tests/fixtures/make_legacy.py`` with the code of commit
ad72be0 (gSASRec, eSASRec and HSTU with that of 0bc6107, before the models were split into backbone,
wrapper, objectives and batch builders); ``expected.json`` holds the scores, recommendations and test
metrics they gave then.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import attnrec
from attnrec.data.schema import DataSource
from attnrec.data.split import leave_one_out
from synthetic_logs import ring_log

LEGACY = Path(__file__).parent / "fixtures" / "legacy"
EXPECTED = json.loads((LEGACY / "expected.json").read_text())


@pytest.fixture(scope="module")
def split():  # type: ignore[no-untyped-def]
    data = ring_log(
        n_users=60,
        n_items=30,
        source=DataSource("ring", sha256="0" * 64),
        item_titles={f"i{i}": f"Item {i}" for i in range(30)},
    )
    return leave_one_out(data)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_legacy_directory_scores_identically(name: str, split) -> None:  # type: ignore[no-untyped-def]
    rec = attnrec.load(LEGACY / name, device="cpu", allow_unsigned=True)  # saved before manifests
    want = EXPECTED[name]
    users = np.arange(8)
    scores = rec.score_histories(split.test.users[users], split.test.histories.take(users))
    torch.testing.assert_close(scores[:, 1:].float(), torch.tensor(want["scores"]), rtol=0, atol=1e-6)
    assert rec.recommend(user="u3", k=5).items == want["by_user"]
    assert rec.recommend(history=["i4", "i5", "i6", "nope"], k=5, exclude=["i8"]).items == want["by_history"]
    assert rec.evaluate(split.test).metrics == pytest.approx(want["test_full"], abs=1e-12)
