"""DataFrames out: many users' recommendations as one pandas frame, one row per recommended item.

The frame has the columns :data:`FRAME_COLUMNS` (``title`` only when the model has item titles),
sorted by the order of the users asked for, then by rank: the shape RecTools' ``recommend``
returns, so code written for it reads attnrec's answers unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from attnrec.config import ConfigError
from attnrec.recommend.requests import check_flag
from attnrec.recommend.topk import Recommendation

#: The columns of a recommendations frame; ``rank`` counts from 1.
FRAME_COLUMNS = ("user", "rank", "item", "score", "title")


def seen_filter(exclude_seen: bool | None, filter_viewed: bool | None) -> bool:
    """Whether to drop the items a user has seen: ``exclude_seen`` or its RecTools name
    ``filter_viewed`` (default ``True``); both given and different is a :class:`ConfigError`."""
    if exclude_seen is not None and filter_viewed is not None and exclude_seen != filter_viewed:
        raise ConfigError(
            f"exclude_seen={exclude_seen} and filter_viewed={filter_viewed} contradict each other: "
            "they are two names of one setting"
        )
    if exclude_seen is not None:
        return check_flag("exclude_seen", exclude_seen)
    return True if filter_viewed is None else check_flag("filter_viewed", filter_viewed)


def recommendations_frame(
    users: Sequence[object], answers: Sequence[Recommendation], with_titles: bool
) -> pd.DataFrame:
    """One row per recommended item of each answer: ``user`` (as the caller gave it), ``rank``
    (1 = best), ``item`` (external ID), ``score`` and, when ``with_titles``, ``title``."""
    counts = np.array([len(a.items) for a in answers], dtype=np.int64)
    user_col = np.empty(len(users), dtype=object)
    user_col[:] = list(users)
    frame = {
        "user": pd.Series(np.repeat(user_col, counts)).infer_objects(),
        "rank": np.concatenate([np.arange(1, n + 1) for n in counts])
        if len(counts)
        else np.zeros(0, np.int64),
        "item": pd.Series([i for a in answers for i in a.items], dtype=object),
        "score": np.array([s for a in answers for s in a.scores], dtype=np.float64),
    }
    if with_titles:
        frame["title"] = pd.Series(
            [t for a in answers for t in (a.titles or [None] * len(a.items))], dtype=object
        )
    return pd.DataFrame(frame)


__all__ = ["FRAME_COLUMNS", "recommendations_frame", "seen_filter"]
