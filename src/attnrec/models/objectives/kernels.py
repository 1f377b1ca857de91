"""Training objectives the models share: full softmax (chunked), sampled softmax with log-Q correction, gBCE,
BPR.

Each model file still spells out its own objective in ``loss``: which positions count, which logits
go in; these functions are the arithmetic it calls by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F

CE_CHUNK_ELEMENTS = 1 << 23  # logits the chunked cross-entropy holds at once (32 MiB in float32)
# The item-major kernel's rows a chunk (fewer when a catalog is so large that 128 rows would exceed
# CE_CHUNK_ELEMENTS): the fastest of 32-512 at 3.4k, 12k and 54k items on this CPU, one thread
FAST_CE_CHUNK_ROWS = 128


class _Context(Protocol):
    """The part of torch's autograd context the chunked cross-entropy uses between forward and backward."""

    saved_tensors: tuple[torch.Tensor, ...]

    def save_for_backward(self, *tensors: torch.Tensor | None) -> None: ...


class _ChunkedSoftmaxCE(torch.autograd.Function):
    """Mean cross-entropy of ``h @ weight.T + bias`` without materialising the ``(N, I)`` logits.

    Rows are processed in chunks that fit in cache (fewer rows per chunk for large catalogs, so a
    chunk never holds more than ``CE_CHUNK_ELEMENTS`` logits). Column 0 (padding) is excluded from the
    softmax. The loss is the graph's end, so its gradients are computed in the forward pass, chunk by
    chunk while the chunk's logits are in cache (``grads=True``): each chunk's logits are computed
    once and exponentiated once, where a separate backward would recompute both (a quarter of the
    layer's matrix products and half its exponentials). The backward only scales them by the
    incoming gradient. The arithmetic is the same as a recomputing backward's, in the same order, so
    the gradients are bit-identical to it. Under autocast the matmuls run in bfloat16 with float32
    accumulation of the log-sum-exp and the gradients.
    """

    @staticmethod
    def forward(
        ctx: _Context,
        h: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        target: torch.Tensor,
        grads: bool,
        fast: bool = False,
    ) -> torch.Tensor:
        low = torch.is_autocast_enabled(h.device.type)
        w = weight.to(torch.bfloat16) if low else weight.float()
        n = h.shape[0]
        scale = torch.ones((), dtype=torch.float32, device=h.device) / n  # d(mean)/d(term)
        lse = torch.empty(n, dtype=torch.float32, device=h.device)
        target_logit = (h.float() * weight[target].float()).sum(-1)  # (N,)
        if bias is not None:
            target_logit = target_logit + bias[target].float()
        grad_h = torch.empty_like(h) if grads else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=h.device) if grads else None
        grad_b = (
            torch.zeros(weight.shape[0], dtype=torch.float32, device=h.device)
            if grads and bias is not None
            else None
        )
        if fast:
            chunk = max(1, min(FAST_CE_CHUNK_ROWS, CE_CHUNK_ELEMENTS // max(weight.shape[0], 1)))
            for s in range(0, n, chunk):
                _item_major_chunk(
                    h[s : s + chunk],
                    w,
                    bias,
                    target[s : s + chunk],
                    scale,
                    lse[s : s + chunk],
                    None if grad_h is None else grad_h[s : s + chunk],
                    grad_w,
                    grad_b,
                )
        else:
            chunk = max(1, min(256 if low else 512, CE_CHUNK_ELEMENTS // max(weight.shape[0], 1)))
            for s in range(0, n, chunk):
                hc = h[s : s + chunk]  # (C, D)
                logits = (hc.to(w.dtype) @ w.T).float()  # (C, I)
                if bias is not None:
                    logits += bias.float()
                logits[:, 0] = -torch.inf
                lse[s : s + chunk] = torch.logsumexp(logits, dim=1)
                if grad_h is None or grad_w is None:
                    continue
                p = logits.sub_(lse[s : s + chunk, None]).exp_()  # softmax, (C, I)
                p[:, 0] = 0.0
                p[torch.arange(len(hc), device=h.device), target[s : s + chunk]] -= (
                    1.0  # d(lse - target logit)
                )
                p.mul_(scale)
                if grad_b is not None:
                    grad_b += p.sum(0)
                pc = p.to(w.dtype)
                grad_h[s : s + chunk] = (pc @ w).to(h.dtype)  # (C, D)
                grad_w += (pc.T @ hc.to(w.dtype)).float()  # (I, D)
        ctx.save_for_backward(
            grad_h,
            None if grad_w is None else grad_w.to(weight.dtype),
            None if grad_b is None or bias is None else grad_b.to(bias.dtype),
        )
        return (lse - target_logit).mean()

    @staticmethod
    def backward(ctx: _Context, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_h, grad_w, grad_b = ctx.saved_tensors
        if grad_h is None or grad_w is None:
            raise RuntimeError(
                "softmax_cross_entropy ran without gradients (grads=False) and cannot be differentiated"
            )
        one = bool(grad == 1)  # the usual case (loss.backward()): the gradients as they are, bit for bit
        gh = grad_h if one else grad_h * grad.to(grad_h.dtype)
        gw = grad_w if one else grad_w * grad.float()
        gb = None if grad_b is None else grad_b if one else grad_b * grad.float()
        return gh, gw, gb, None, None, None


def _item_major_chunk(
    hc: torch.Tensor,
    w: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    scale: torch.Tensor,
    lse: torch.Tensor,
    grad_h: torch.Tensor | None,
    grad_w: torch.Tensor | None,
    grad_b: torch.Tensor | None,
) -> None:
    """One chunk of the fast kernel: fills ``lse`` ``(C,)`` and ``grad_h`` ``(C, D)``, adds to ``grad_w`` and
    ``grad_b``.

    The logits are laid out item-major, ``w @ hc.T`` ``(I, C)``: on CPU that product is about twice as fast
    as ``hc @ w.T`` (the long dimension is the output's rows), and the weight gradient ``p @ hc`` then needs
    no transpose. Each logit is exponentiated once (``exp(x - max)``, normalised by its column's sum)
    where the default kernel's ``logsumexp`` and softmax exponentiate it twice. The sums run in another
    order than the default kernel's, so the results agree with it to float32 rounding, not bit for bit.
    """
    lt = (w @ hc.to(w.dtype).T).float()  # (I, C) logits, item-major
    if bias is not None:
        lt += bias.float()[:, None]
    lt[0] = -torch.inf  # padding is never a class: its exponential is 0
    m = lt.amax(0)  # (C,)
    lt.sub_(m).exp_()  # exp(logit - max), (I, C)
    z = lt.sum(0)  # (C,)
    lse.copy_(m + z.log())
    if grad_h is None or grad_w is None:
        return
    lt.mul_(scale / z)  # softmax / N, (I, C)
    lt[target, torch.arange(len(hc), device=hc.device)] -= scale  # d(lse - target logit) / N
    if grad_b is not None:
        grad_b += lt.sum(1)
    pc = lt.to(w.dtype)
    grad_h.copy_((pc.T @ w).to(grad_h.dtype))  # (C, D)
    grad_w += (pc @ hc.to(w.dtype)).float()  # (I, D)


_chunked_softmax_ce: Callable[..., torch.Tensor] = _ChunkedSoftmaxCE.apply  # torch leaves apply untyped


def softmax_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    fast: bool = False,
) -> torch.Tensor:
    """Full-catalog cross-entropy of hidden states ``h`` (N, D) against item embeddings ``weight`` (I, D).

    Memory is bounded by the chunk size, not by ``N x I``; column 0 is padding and never a class.
    ``fast``: the item-major kernel (one exponential per logit, chunks of 128 rows), equal to the
    default to float32 rounding but not bit for bit; SASRec's ``fast_ce`` option (on by default with loss
    ce; ``fast_ce = false`` repeats a run trained with the row-major kernel).
    """
    grads = torch.is_grad_enabled() and (
        h.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    return _chunked_softmax_ce(h, weight, bias, target, grads, fast)


def sampled_softmax_cross_entropy(
    pos_logit: torch.Tensor,
    neg_logit: torch.Tensor,
    target: torch.Tensor,
    negative: torch.Tensor,
    target_logq: torch.Tensor | None = None,
    neg_logq: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of a softmax over each row's target and its negatives.

    ``pos_logit`` ``(N,)`` are the targets' logits, ``neg_logit`` ``(N, S)`` those of the
    ``negative`` items: ``(S,)`` shared by every row, or ``(N, S)`` each row its own; ``target``
    ``(N,)`` are the target items. With ``target_logq`` ``(N,)`` and ``neg_logq`` (``negative``'s
    shape; log expected counts among the draws, from
    :class:`attnrec.models.objectives.negatives.SharedNegatives`) every logit is corrected by ``-log E[k]``
    (log-Q correction), which makes the sampled softmax's gradient an estimate of the full
    softmax's. A negative equal to the row's target (an accidental hit) is masked out.
    """
    pos = pos_logit[:, None]  # (N, 1)
    shared = negative.dim() == 1  # (S,) for every row, else (N, S)
    if target_logq is not None and neg_logq is not None:
        pos = pos - target_logq[:, None]
        neg_logit = neg_logit - (neg_logq[None, :] if shared else neg_logq)
    neg_ids = negative[None, :] if shared else negative  # (1 or N, S)
    neg_logit = neg_logit.masked_fill(neg_ids == target[:, None], -torch.inf)  # (N, S) accidental hits
    logits = torch.cat([pos, neg_logit], dim=1)  # (N, 1+S), the target in column 0
    return F.cross_entropy(logits, torch.zeros(len(target), dtype=torch.long, device=logits.device))


def gbce_beta(n_negatives: int, n_items: int, t: float) -> float:
    """The exponent ``beta`` of gBCE (Petrov & Macdonald, RecSys 2023) for ``n_negatives`` per positive.

    ``alpha = k / (|I| - 1)`` is the negative sampling rate (the share of the other items a positive is
    contrasted with) and ``beta = alpha * (t * (1 - 1/alpha) + 1/alpha)``, i.e. ``1 - t * (1 - alpha)``:
    ``t = 0`` gives ``beta = 1`` (plain BCE), ``t = 1`` gives ``beta = alpha`` (the paper's fully
    calibrated case). With ``k >= |I| - 1`` every other item can be drawn, so ``alpha`` is capped at 1
    (nothing to calibrate: ``beta = 1`` whatever ``t``).
    """
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"gbce_t must be in [0, 1], not {t}")
    alpha = min(1.0, n_negatives / (n_items - 1)) if n_items > 1 else 1.0
    return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)


def gbce_loss(pos_logit: torch.Tensor, neg_logit: torch.Tensor, beta: float) -> torch.Tensor:
    """Mean generalised binary cross-entropy of positives ``(N,)`` against their negatives ``(N, K)``.

    Per positive ``s+`` with negatives ``s-_1..s-_K`` (the paper's eq., normalised by ``K + 1``)::

        loss = -( log sigmoid(s+)^beta + sum_j log(1 - sigmoid(s-_j)) ) / (K + 1)
             =  ( beta * softplus(-s+) + sum_j softplus(s-_j) ) / (K + 1)

    averaged over the ``N`` positives. ``beta = 1`` is the BCE of the ``N * (K + 1)`` logits; see
    :func:`gbce_beta`. A negative logit of ``-inf`` (a masked negative) contributes 0.
    """
    k = neg_logit.shape[1]
    pos_term = beta * F.softplus(-pos_logit)  # (N,) -log sigmoid(s+)^beta, stable for any logit
    neg_term = F.softplus(neg_logit).sum(1)  # (N,) -sum log(1 - sigmoid(s-))
    return ((pos_term + neg_term) / (k + 1)).mean()


def batch_sampled_softmax(
    pos_logit: torch.Tensor,
    neg_logit: torch.Tensor,
    target: torch.Tensor,
    batch: dict[str, torch.Tensor],
    rows: torch.Tensor,
) -> torch.Tensor:
    """:func:`sampled_softmax_cross_entropy` over a batch's negatives (``batch["negative"]``).

    ``rows`` selects the scored positions of the batch's ``(B, T)`` grid. The negatives are ``(S,)``,
    shared by the batch, ``(B, S)``, each sequence its own, or ``(B, T, S)``, each position its own (then
    ``neg_logit`` ``(N, S)`` must score each position against its own, as :func:`negative_logits` and
    :func:`position_logits` do). When they were drawn non-uniformly the batch also holds their log-Q
    corrections (``neg_logq``, and ``target_logq`` per position); uniform draws leave them out, as their
    correction is a constant.
    """
    corrected = "neg_logq" in batch
    negative, neg_logq = batch["negative"], batch.get("neg_logq")
    if negative.dim() == 3:  # per position: the scored positions' own rows
        negative, neg_logq = negative[rows], None if neg_logq is None else neg_logq[rows]  # (N, S)
    elif negative.dim() == 2:  # per sequence: each scored position takes its sequence's row
        negative = negative[:, None, :].expand(*rows.shape, -1)[rows]  # (B, S) -> (N, S)
        neg_logq = None if neg_logq is None else neg_logq[:, None, :].expand(*rows.shape, -1)[rows]
    return sampled_softmax_cross_entropy(
        pos_logit,
        neg_logit,
        target,
        negative,
        batch["target_logq"][rows] if corrected else None,
        neg_logq if corrected else None,
    )


def negative_logits(
    scored: torch.Tensor, vectors: torch.Tensor, states: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """Logits ``(N, S)`` of the scored positions against their negatives' ``vectors``.

    ``scored`` ``(N, D)`` are the states of the positions ``rows`` (a ``(B, T)`` mask) of ``states``
    ``(B, T, D)``. Negatives shared by the batch (``vectors`` ``(S, D)``): ``scored @ vectors.T``. Each
    sequence its own (``(B, S, D)``): one batched product ``(B, T, S)`` of which the scored rows are kept.
    Each position its own: :func:`position_logits`.
    """
    if vectors.dim() == 2:
        return scored @ vectors.T  # (N, D) @ (D, S)
    return (states @ vectors.transpose(1, 2))[rows]  # (B, T, D) @ (B, D, S) -> (B, T, S) -> (N, S)


# Per-position negatives are scored against the whole catalog (keeping the drawn columns) while it has at
# most this many items per negative: gathering every position's S vectors, and scattering their gradients
# back, cost ~190 times a multiply-add of the dense product per element on the development CPU (an
# eSASRec step of 3,928 positions, 256 negatives, 18k items, d 256: 9.9 s gathered, 3.8 s dense).
POSITION_DENSE = 128


def position_logits(
    scored: torch.Tensor, table: torch.Tensor, negative: torch.Tensor, chunk: int = 1024
) -> torch.Tensor:
    """Logits ``(N, S)`` of each scored position ``(N, D)`` against its own negatives ``negative`` ``(N, S)``,
    rows of the item ``table`` ``(I+1, D)`` (the references' per-position draws).

    A catalog of at most :data:`POSITION_DENSE` items per negative: ``chunk`` rows at a time against the
    whole table, the drawn columns kept (the ``(chunk, I+1)`` product is never saved for the backward).
    A larger one: the ``N x S x D`` vectors gathered.
    """
    if table.shape[0] > POSITION_DENSE * negative.shape[1]:
        return torch.einsum("nd,nsd->ns", scored, table[negative])  # (N, D) x (N, S, D) -> (N, S)
    parts = [
        torch.take_along_dim(
            scored[i : i + chunk] @ table.T, negative[i : i + chunk], 1
        )  # (c, I+1) -> (c, S)
        for i in range(0, len(scored), chunk)
    ]
    return torch.cat(parts) if parts else scored.new_zeros(0, negative.shape[1])


def bpr_loss(x_pos: torch.Tensor, x_neg: torch.Tensor) -> torch.Tensor:
    """Mean Bayesian personalised ranking loss ``-log sigmoid(x_pos - x_neg)`` of ``(B,)`` against
    ``(B, K)``."""
    return -F.logsigmoid(x_pos[:, None] - x_neg).mean()
