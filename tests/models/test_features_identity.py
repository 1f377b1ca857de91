"""Item features are off by default: SASRec and BERT4Rec build, train and score exactly as before.

The digests were computed with the code before item features existed (commit ac36d66), so a
change of parameter creation order or RNG use with the options off fails here.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from attnrec.config import config_from_dict
from attnrec.models.registry import get_spec
from attnrec.recommend.core import build_core
from synthetic_logs import ring_log

CASES = {
    # name: (model, settings, digest of the initial weights, after two steps, of the scores)
    "sasrec-bce": ("sasrec", {"hidden": 16, "max_len": 12},
                   "717e1a6cb03b8608", "8189321ffd0233c6", "9bb9d04454a764a0"),
    "sasrec-ce": ("sasrec", {"hidden": 16, "max_len": 12, "loss": "ce"},
                  "717e1a6cb03b8608", "7144fc1fa97bd623", "59bd3c92da9d8017"),
    "bert4rec": ("bert4rec", {"hidden": 16, "max_len": 12, "n_heads": 2},
                 "cfdab38b8a38a4ec", "1e179574e0ad381a", "6f8cdab8b7fa85bc"),
}


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k in sorted(tensors):
        h.update(k.encode())
        h.update(tensors[k].detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def run_case(model: str, settings: dict[str, object]) -> tuple[str, str, str]:
    """Digests of a seeded model's initial weights, its weights after two Adam steps, and its scores."""
    data = ring_log(n_users=30, n_items=20)
    spec = get_spec(model)
    core = build_core(spec, config_from_dict(spec.config_cls, dict(settings)), data.n_users, data.n_items, seed=3)
    assert isinstance(core, torch.nn.Module)
    init = _digest(dict(core.state_dict()))
    torch.manual_seed(5)
    opt = torch.optim.Adam(core.parameters(), lr=1e-2)
    core.train()
    batches = core.train_batches(data.sequences(), 8, np.random.default_rng(7))
    for _, batch in zip(range(2), batches, strict=False):
        opt.zero_grad()
        core.loss(batch).backward()
        opt.step()
    trained = _digest(dict(core.state_dict()))
    core.eval()
    seqs = data.sequences()
    with torch.no_grad():
        scores = core.score(core.score_inputs(np.arange(5), seqs.take(np.arange(5))))
    return init, trained, _digest({"scores": scores})


@pytest.mark.parametrize("name", sorted(CASES))
def test_features_off_is_bit_identical_to_before(name: str) -> None:
    model, settings, *want = CASES[name]
    assert list(run_case(model, settings)) == want


if __name__ == "__main__":  # prints the digests (how CASES was filled in)
    for n, (m, s, *_) in CASES.items():
        print(n, run_case(m, s))
