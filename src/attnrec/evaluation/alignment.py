"""Evaluation cases of one dataset expressed in a trained model's indices.

A saved model is evaluated on data read again from a file; when that file is not the one it was
trained on (or IDs were added), the data's internal indices are not the model's. :func:`align_cases`
maps the cases over by external ID, so every score is read from the right column.
"""

from __future__ import annotations

import numpy as np

from attnrec.data.schema import IdMap, Sequences
from attnrec.data.split import EvalSet


def align_cases(
    cases: EvalSet, data_users: IdMap, data_items: IdMap, model_users: IdMap, model_items: IdMap
) -> tuple[EvalSet, int]:
    """``cases`` (in the data's indices) in the model's indices, and how many were dropped.

    History items the model does not know are removed from the histories; cases whose user or
    target the model does not know are dropped, since the model cannot rank them.
    """
    if model_items.to_list() == data_items.to_list() and model_users.to_list() == data_users.to_list():
        return cases, 0
    item_map = np.zeros(
        len(data_items) + 1, dtype=np.int64
    )  # data item index -> model item index (0: unknown)
    item_map[1:] = [model_items.get(i) or 0 for i in data_items.to_list()]
    user_map = np.array(
        [-1 if (u := model_users.get(x)) is None else u for x in data_users.to_list()], dtype=np.int64
    )  # data user index -> model user index (-1: unknown)
    users, targets = user_map[cases.users], item_map[cases.targets]
    keep_rows = np.flatnonzero((users >= 0) & (targets > 0))
    hist = cases.histories.take(keep_rows)
    items = item_map[hist.items]
    rows = np.repeat(np.arange(len(keep_rows)), hist.lengths())  # the case of every history item
    known = items > 0
    offsets = np.zeros(len(keep_rows) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[known], minlength=len(keep_rows)), out=offsets[1:])
    aligned = EvalSet(
        users[keep_rows], Sequences(offsets, items[known], len(model_items)), targets[keep_rows]
    )
    return aligned, len(cases) - len(keep_rows)
