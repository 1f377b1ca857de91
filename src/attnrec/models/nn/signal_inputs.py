"""The model-side encoders of declared signals (:mod:`attnrec.data.signals`), one per kind.

A signal's ``encoder`` (or, by default, its kind) names the module that turns its batch values ``(B, T)``
into vectors ``(B, T, D)`` added to the item embedding (:class:`~attnrec.models.event_context.EventContext`):
an embedding table for categorical codes, a linear projection for numbers. A new kind of signal brings its
encoder with :func:`register_encoder`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from attnrec.data import signals as sig


class CategoricalInput(nn.Module):
    """A declared categorical signal's embedding: codes ``0`` (padding), ``1`` (unknown), ``2..`` (values)."""

    def __init__(self, hidden: int, n_values: int) -> None:
        super().__init__()
        self.table = nn.Embedding(n_values + sig.UNKNOWN_CODE + 1, hidden, padding_idx=0)

    def forward(self, codes: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` for codes ``(B, T)``; padding positions (``~real``) zero."""
        out: torch.Tensor = self.table(codes.long().masked_fill(~real, 0))
        return out


class NumericInput(nn.Module):
    """A declared numeric signal's linear projection; a value not known (NaN) contributes nothing."""

    def __init__(self, hidden: int, n_values: int) -> None:
        super().__init__()
        self.proj = nn.Linear(1, hidden)

    def forward(self, values: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` for values ``(B, T)``; padding and NaN positions zero."""
        v = values.float()  # (B, T)
        known = (real & ~v.isnan()).unsqueeze(-1).to(v.dtype)  # (B, T, 1)
        out: torch.Tensor = self.proj(v.nan_to_num(0.0).unsqueeze(-1)) * known
        return out


#: ``(hidden, vocabulary size) -> module``; the module maps ``(values (B, T), real (B, T))`` to ``(B, T, D)``.
SignalEncoder = Callable[[int, int], nn.Module]
_ENCODERS: dict[str, SignalEncoder] = {"categorical": CategoricalInput, "numeric": NumericInput}


def register_encoder(name: str, encoder: SignalEncoder) -> None:
    """Make ``encoder`` the model-side encoder of the signals whose ``encoder`` (or kind) is ``name``."""
    _ENCODERS[name] = encoder


def encoder_of(signal: sig.Signal) -> SignalEncoder:
    """The encoder factory of ``signal`` (see :func:`signal_problem` for when there is none)."""
    return _ENCODERS[signal.encoder_name]


def signal_problem(name: str) -> str | None:
    """Why a model cannot read the signal ``name`` (not declared, built in, no encoder), or ``None``."""
    declared = sig.find_signal(name)
    if declared is None:
        return "is not declared; declare it with attnrec.data.signals.register_signal"
    if declared.builtin:
        return "is built in: it has its own setting (event_input, rating_input, time_features)"
    if declared.encoder_name not in _ENCODERS:
        return f"has no model encoder {declared.encoder_name!r}; add one with register_encoder"
    return None


__all__ = [
    "CategoricalInput",
    "NumericInput",
    "SignalEncoder",
    "encoder_of",
    "register_encoder",
    "signal_problem",
]
