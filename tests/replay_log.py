"""A tiny timestamped log and a model stub for the replay tests (the library's replay mechanics and the
replay benchmark's)."""

from __future__ import annotations

import numpy as np
import torch

from attnrec.data.schema import IdMap, Sequences
from attnrec.experiments.replay import Log, Plan


def tiny() -> tuple[Log, Plan]:
    """Three users, items 1-6, the cut at 100 with two steps of 20 seconds.

    user 0: item 1 @0, 2 @10 | 3 @100, 4 @110, 2 @120 (a repeat)
    user 1: item 2 @5 | 5 @105, 6 @130
    user 2: | 3 @102 (its first event), 1 @125
    """
    user = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2])
    item = np.array([1, 2, 3, 4, 2, 2, 5, 6, 3, 1])
    time = np.array([0, 10, 100, 110, 120, 5, 105, 130, 102, 125])
    return Log(user, item, time, 6), Plan(100, 20, (100, 120, 140))


class Recorder:
    """A model stub that scores item ``i`` as ``i`` (``sign`` -1: as ``-i``) and records what it was asked."""

    def __init__(self, known: list[str], sign: float = 1.0) -> None:
        self.sign = sign
        self.items_ = IdMap.from_values(known, offset=1)
        self.popularity_ = np.arange(len(known) + 1)
        self.asked: list[tuple[list[int], int]] = []

    def score_histories(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray
    ) -> torch.Tensor:
        for u in range(histories.n_users):
            self.asked.append((histories[u].tolist(), int(request_time[u])))
        n = int(histories.n_items)
        return self.sign * torch.arange(n + 1, dtype=torch.float32).expand(histories.n_users, -1).clone()
