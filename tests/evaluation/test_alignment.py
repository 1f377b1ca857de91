"""align_cases: cases of re-read data scored in a saved model's indices."""

from __future__ import annotations

import numpy as np

from attnrec.data.schema import IdMap, Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.alignment import align_cases


def _ids(names: list[str], offset: int) -> IdMap:
    return IdMap(np.array(names, dtype=object), offset)


def test_same_ids_leave_the_cases_as_they_are() -> None:
    users, items = _ids(["a", "b"], 0), _ids(["x", "y"], 1)
    cases = EvalSet(np.array([0, 1]), Sequences(np.array([0, 1, 2]), np.array([1, 2]), 2), np.array([2, 1]))
    assert align_cases(cases, users, items, users, items) == (cases, 0)


def test_cases_are_mapped_by_external_id_and_unknown_ones_dropped() -> None:
    data_users, data_items = _ids(["a", "b", "c"], 0), _ids(["x", "y", "new"], 1)
    model_users, model_items = (
        _ids(["b", "a"], 0),
        _ids(["y", "x"], 1),
    )  # another order, "c" and "new" unknown
    # a: history x, new -> target y; b: history y -> target new (unknown); c: unknown user.
    histories = Sequences(np.array([0, 2, 3, 4]), np.array([1, 3, 2, 1]), 3)
    cases = EvalSet(np.array([0, 1, 2]), histories, np.array([2, 3, 2]))
    aligned, dropped = align_cases(cases, data_users, data_items, model_users, model_items)
    assert dropped == 2
    assert aligned.users.tolist() == [1]  # "a" is the model's user 1
    assert aligned.targets.tolist() == [1]  # "y" is the model's item 1
    assert (
        aligned.histories.items.tolist() == [2] and aligned.histories.n_items == 2
    )  # "x" kept, "new" removed
