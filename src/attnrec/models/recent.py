"""Recent: the user's own most recent items first, then the most popular ones (a repeat baseline).

Logs of shops and streams repeat themselves: a buyer returns to what they just viewed, carted or
bought. On the taobao sample two in three next buys are an item of the buyer's history. A sequential
model trained on next events may or may not learn to rank those items; this baseline does nothing
else. The score of an item the history holds is ``1 + t`` for its latest position ``t`` among the
last ``max_len`` history items (0 the oldest read), so the latest item ranks first; every other item
scores its share of the training interactions, ``count / (max count + 1)``, below 1, so popularity
orders the rest. It is fitted in closed form (:class:`~attnrec.models.contracts.ClosedForm`): ``fit``
counts.

Measure it with the history kept (protocol ``full-history``). Under the default ``full`` protocol
every history item except the target is removed, so a target that repeats the history competes with
unseen items only and this baseline ranks it first: there, its hit rate is the share of repeated
targets, a property of the log and not of any model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.models._baselines import CountedItems
from attnrec.models.batches.windows import last_items
from attnrec.models.contracts import Batch, ClosedForm
from attnrec.models.registry import register


@dataclass(frozen=True)
class RecentConfig:
    """``max_len``: the most recent history items that rank first (the rest of the history ranks by
    popularity)."""

    max_len: int = 200

    def __post_init__(self) -> None:
        if self.max_len < 1:
            raise ValueError(f"recent: max_len must be at least 1, not {self.max_len}")


@register("recent", config=RecentConfig, presets={"default": {}, "demo": {}})
class Recent(CountedItems[RecentConfig], ClosedForm):
    """Recent: the history's latest items first (most recent on top), then the most popular items."""

    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """``{"seq": (B, max_len)}``: the last history items, left-padded."""
        return {"seq": last_items(histories, self.config.max_len)}

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, n_items + 1)``: ``1 + t`` for a history item at its latest position ``t``,
        popularity below 1 for the rest; column 0 is ``-inf``."""
        seq = batch["seq"].to(self.counts.device)  # (B, T), left-padded with 0
        popular = (self.counts / (self.counts.max() + 1)).to(torch.float32)  # (I+1,) in [0, 1)
        scores = popular.expand(len(seq), -1).clone()  # (B, I+1)
        t = seq.shape[1]
        position = torch.arange(1, t + 1, dtype=torch.float32, device=seq.device).expand(
            len(seq), t
        )  # (B, T): 1 + t
        scores.scatter_reduce_(1, seq, position, reduce="amax")  # a repeated item keeps its latest position
        scores[:, 0] = -torch.inf  # padding (also where the left padding scattered)
        return scores
