"""What the user-factor baselines share: the fold-in of unknown users, item counts, presets.

User-embedding models (BPR-MF, NCF, FPMC, TransRec, Caser) learn one vector per training user.
For an ad-hoc history of a user the model has never seen, the :class:`~attnrec.Recommender`
passes the user index :data:`UNKNOWN_USER` (``-1``). Those models then *fold the history in*
(:func:`fold_in`): with every item-side parameter frozen, a fresh user vector is fitted to the
history, the MAP estimate under the model's own likelihood of the history items (each given the
items before it, for sequential models) and a Gaussian prior with the mean and spread of the
trained users' vectors. A short history therefore stays close to the average user, a long one
moves as far as its evidence warrants. This is the classic fold-in of matrix factorisation, applied
to each model's scoring function; it is deterministic and needs no training data at inference time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Self, TypeVar

import numpy as np
import torch
from torch import nn

from attnrec.data.schema import Sequences
from attnrec.models.batches.windows import last_items
from attnrec.models.contracts import Batch
from attnrec.models.validation import require_positive_fields

UNKNOWN_USER = -1
FOLD_IN_ITEMS = 200  # most recent history items a folded-in user vector is fitted to

FOLD_IN_ELEMENTS = 1 << 23  # history positions x items scored at once while folding users in
# user_fn(user_vectors) -> the user-dependent scores (R, n_items + 1) of R user vectors
UserFn = Callable[[list[torch.Tensor]], torch.Tensor]
# base_fn(history (R, T)) -> user-independent scores (R, T, n_items + 1) of each position given the items
# before it
BaseFn = Callable[[torch.Tensor], torch.Tensor]
ConfigT = TypeVar("ConfigT")  # the config dataclass of a counting baseline


@dataclass(frozen=True)
class UserVectorSettings:
    """The settings of every user-embedding baseline (BPR-MF, NCF, FPMC/FMC, TransRec, Caser): how an
    unknown user's vector is folded in, and how the ID tables get their gradients."""

    fold_in_steps: int = 30  # Adam steps fitting an unknown user's vector (0 = the trained users' mean)
    # Sparse gradients for the ID tables: lazy Adam then updates only the rows a batch touched. On a
    # large catalog the dense Adam step over every row dominates (Caser on Beauty: 87 of 121 ms a batch).
    sparse: bool = False

    def __post_init__(self) -> None:
        if self.fold_in_steps < 0:
            raise ValueError("fold_in_steps must be >= 0")


@dataclass(frozen=True)
class FactorSettings(UserVectorSettings):
    """The settings of the factor models trained with the pairwise BPR loss (BPR-MF, FPMC/FMC, TransRec):
    ``dim`` factors per table, ``n_negatives`` sampled items per positive (the loss averages over them),
    the L2 weight ``reg`` on the factors a training triple touches, factors drawn from N(0, init_std^2)."""

    dim: int = 64
    reg: float = 1e-4
    n_negatives: int = 1
    init_std: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive_fields(self, "dim", "n_negatives")
        if self.reg < 0 or self.init_std <= 0:
            raise ValueError("reg must be >= 0 and init_std > 0")


def item_counts(train: Sequences) -> np.ndarray:
    """Training interactions per item index, length ``n_items + 1`` (padding counts 0)."""
    return np.bincount(train.items, minlength=train.n_items + 1).astype(np.int64)


class CountedItems(nn.Module, Generic[ConfigT]):
    """The fit of the counting baselines (POP, Recent): each item's training interactions, in a buffer
    (saved and moved with the module, never trained; key ``"counts"``, float64)."""

    counts: torch.Tensor

    def __init__(self, config: ConfigT, n_users: int, n_items: int) -> None:
        super().__init__()
        self.config = config
        self.n_users, self.n_items = n_users, n_items
        self.register_buffer("counts", torch.zeros(n_items + 1, dtype=torch.float64))  # (I+1,)

    def fit(self, train: Sequences, rng: np.random.Generator) -> Self:
        """Count each item's training interactions (``rng`` is unused: counting is exact)."""
        if train.n_items != self.n_items:
            raise ValueError(f"training data has {train.n_items} items, the model {self.n_items}")
        with torch.no_grad():
            self.counts.copy_(torch.from_numpy(item_counts(train).astype(np.float64)))  # (I+1,)
        return self

    def num_parameters(self) -> int:
        """No trainable parameters (the counts are statistics, not weights)."""
        return 0


def user_inputs(users: np.ndarray, histories: Sequences, n: int = FOLD_IN_ITEMS) -> Batch:
    """Score inputs of a user-factor model: user indices ``(B,)`` (``-1`` = unknown) and the last ``n``
    history items ``(B, n)``, left-padded, from which an unknown user's vectors are folded in."""
    return {"user": torch.as_tensor(np.asarray(users, dtype=np.int64)), "history": last_items(histories, n)}


def fold_in(
    priors: Sequence[tuple[torch.Tensor, torch.Tensor]],
    user_fn: UserFn,
    history: torch.Tensor,
    base: torch.Tensor | None,
    steps: int,
    lr: float = 0.1,
) -> list[torch.Tensor]:
    """User vectors ``[(R, D_k)]`` fitted to the histories ``history`` ``(R, T)`` (0 = padding).

    The logits of history item ``t`` are ``base[:, t] + user_fn(vectors)``: ``base`` ``(R, T, I+1)``
    holds the user-independent part given the items before ``t`` (``None`` for models without one)
    and ``user_fn`` maps the vectors to their ``(R, I+1)`` contribution. Each vector has a Gaussian
    prior ``(mean, std)`` per dimension, estimated from the trained users; the fold-in is the MAP
    estimate: Adam takes ``steps`` full-batch steps on ``-sum_t log p(history_t) + |z|^2 / 2`` over
    the standardised ``z = (v - mean) / std``, starting at the prior mean, model parameters frozen.
    """
    r = len(history)
    if steps <= 0 or r == 0:
        return [m.detach().expand(r, -1).clone() for m, _ in priors]
    # Callers score under no_grad or inference_mode; the fold-in needs autograd for its own vectors.
    with torch.inference_mode(False), torch.enable_grad():
        means = [m.detach().clone() for m, _ in priors]  # plain tensors, even if made in inference mode
        stds = [s.detach().clone().clamp(min=1e-6) for _, s in priors]
        zs = [torch.zeros(r, len(m), dtype=m.dtype, device=m.device, requires_grad=True) for m in means]
        history = history.clone()
        base = None if base is None else base.detach().clone()
        real = (history > 0).to(means[0].dtype)  # (R, T)
        opt = torch.optim.Adam(zs, lr=lr)
        for _ in range(steps):
            user = user_fn([m + s * z for m, s, z in zip(means, stds, zs, strict=True)])  # (R, I+1)
            logits = user[:, None, :] if base is None else base + user[:, None, :]  # (R, 1 or T, I+1)
            logits = logits.index_fill(2, torch.tensor([0], device=logits.device), -torch.inf)
            logp = logits.log_softmax(-1)  # (R, 1 or T, I+1)
            if base is None:
                picked = logp[:, 0].gather(1, history)  # (R, T)
            else:
                picked = logp.gather(2, history[..., None]).squeeze(-1)  # (R, T)
            loss = -(picked * real).sum() + sum(0.5 * (z**2).sum() for z in zs)
            grads = torch.autograd.grad(loss, zs)  # model parameters get no .grad
            for z, g in zip(zs, grads, strict=True):
                z.grad = g
            opt.step()
    return [(m + s * z).detach() for m, s, z in zip(means, stds, zs, strict=True)]


def user_vectors(
    tables: Sequence[torch.nn.Embedding],
    users: torch.Tensor,
    history: torch.Tensor,
    user_fn: UserFn,
    steps: int,
    base_fn: BaseFn | None = None,
    prior: str = "mean",
) -> list[torch.Tensor]:
    """Rows of the user ``tables`` for ``users`` ``(B,)``, folding in the unknown ones (index < 0).

    ``history`` ``(B, T)`` is left-padded. ``user_fn(vectors)`` gives the user-dependent scores
    ``(R, I+1)`` of ``R`` vectors; ``base_fn(history)`` the user-independent scores ``(R, T, I+1)``
    of every history position given the items before it (sequential models). The prior is centred
    on the average trained user (``prior="mean"``) or on zero (``"zero"``, a model whose user
    vectors are offsets from a population-level default), with the trained users' spread.
    Unknown rows are folded in a few at a time, so memory stays bounded.
    """
    known = users >= 0
    vecs = [t(users.clamp(min=0)) for t in tables]  # [(B, D_k)]
    if bool(known.all()):
        return vecs
    rows = torch.nonzero(~known).squeeze(1)  # (R,)
    hist = history[rows]  # (R, T)
    longest = int((hist > 0).sum(1).max())
    hist = hist[:, hist.shape[1] - max(longest, 1) :]  # (R, T') drop all-padding columns
    priors = []  # (mean, std) per dimension of the trained users: the empirical prior of a new user
    for t in tables:
        w = t.weight.detach()  # (U, D)
        mean = w.mean(0) if prior == "mean" else torch.zeros_like(w[0])
        priors.append((mean, (w - mean).pow(2).mean(0).sqrt()))
    n_scores = int(user_fn([m[None] for m, _ in priors]).shape[1])  # I+1
    step = max(1, FOLD_IN_ELEMENTS // (n_scores * (hist.shape[1] if base_fn is not None else 1)))
    out = [v.clone() for v in vecs]
    for lo in range(0, len(rows), step):
        h = hist[lo : lo + step]  # (r, T')
        base = None if base_fn is None else base_fn(h)  # (r, T', I+1)
        folded = fold_in(priors, user_fn, h, base, steps)
        for v, f in zip(out, folded, strict=True):
            v[rows[lo : lo + step]] = f.to(v.dtype)
    return out


def transition_presets(personal: bool) -> dict[str, dict[str, dict[str, object]]]:
    """The presets of the S-BPR transition models (FPMC, FMC, TransRec): dense ML-1M learns fast;
    sparse Beauty needs more regularisation, the more so with ``personal`` (per-user) factors.

    On ML-1M one epoch costs ~14 s of one CPU core (TransRec ~15 s); FPMC reaches pop100 HR@10 0.55
    after 6 epochs.
    """
    return {
        "ml-1m": {
            "model": {"dim": 64, "reg": 1e-4, "n_negatives": 4},
            "train": {
                "lr": 1e-2,
                "batch_size": 4096,
                "max_epochs": 60,
                "lr_decay": 0.3,
                "max_lr_decays": 2,
                "time_budget": 600,
            },
        },
        "beauty": {
            "model": {"dim": 64, "reg": 1e-3 if personal else 1e-4, "n_negatives": 4},
            "train": {
                "lr": 5e-3,
                "batch_size": 1024,
                "max_epochs": 60,
                "lr_decay": 0.3,
                "max_lr_decays": 2,
                "time_budget": 600,
            },
        },
        "demo": {
            "model": {"dim": 32, "reg": 1e-4, "n_negatives": 4},
            "train": {"lr": 1e-2, "batch_size": 512, "max_epochs": 40, "patience": 5, "time_budget": 120},
        },
    }
