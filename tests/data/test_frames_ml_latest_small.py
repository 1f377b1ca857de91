"""The issue's done-when: ``Recommender("sasrec").fit(df).recommend_frame(...)`` on a pandas frame of the
real ml-latest-small ratings (skipped when the shared data folder is absent)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from shared_data import SHARED, needs

import attnrec


@needs("ml-latest-small/ratings.csv.gz")
def test_sasrec_fits_a_pandas_frame_of_ml_latest_small_and_recommends_a_frame() -> None:
    df = pd.read_csv(SHARED / "ml-latest-small" / "ratings.csv.gz")
    users = df["userId"].unique()[:5]
    recs = attnrec.Recommender("sasrec", train={"max_epochs": 1, "threads": 1}).fit(df, progress=False)
    frame = recs.recommend_frame(users, k=10, filter_viewed=True)
    assert len(frame) == 50 and frame["user"].tolist() == np.repeat(users, 10).tolist()
    assert frame["rank"].tolist() == list(range(1, 11)) * 5
    for u, group in frame.groupby("user"):
        viewed = set(df.loc[df["userId"] == u, "movieId"].astype(str))
        assert not viewed & set(group["item"]) and group["score"].is_monotonic_decreasing
