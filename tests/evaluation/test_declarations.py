"""The metric list, the named protocols and the named splits are declared once, in the library."""

from __future__ import annotations

import numpy as np
import pytest

from attnrec.data.demo import make_demo
from attnrec.data.split import SPLITS, SplitSettings, leave_one_out, make_split, temporal_split
from attnrec.evaluation.metrics import DEFAULT_KS, METRICS, ranking_metrics
from attnrec.evaluation.protocol import (
    DEFAULT_NEGATIVES,
    FULL,
    PAPER_BERT4REC,
    PAPER_SASREC,
    PROTOCOLS,
    Protocol,
    protocol_by_name,
)


def test_the_table_metrics_are_what_the_default_cut_offs_give() -> None:
    assert list(ranking_metrics(np.array([0, 3, 20]), DEFAULT_KS)) == list(METRICS)


def test_named_protocols_are_the_papers() -> None:
    assert PROTOCOLS["full"] == FULL == Protocol()
    assert PAPER_SASREC == Protocol("sampled", DEFAULT_NEGATIVES, "uniform") == PROTOCOLS["sampled-uniform"]
    assert (
        PAPER_BERT4REC
        == Protocol("sampled", DEFAULT_NEGATIVES, "popularity")
        == PROTOCOLS["sampled-popularity"]
    )
    assert DEFAULT_NEGATIVES == 100


def test_protocol_by_name_sets_negatives_seed_and_cut_offs() -> None:
    p = protocol_by_name("sampled-popularity", 10, seed=3, ks=(5,))
    assert (p.candidates, p.sampler, p.n_negatives, p.seed, p.ks) == ("sampled", "popularity", 10, 3, (5,))
    # Full ranking has no negatives: its recorded protocol does not change with the count asked for.
    assert protocol_by_name("full", 10) == FULL
    assert protocol_by_name("sampled-uniform") == PAPER_SASREC
    with pytest.raises(
        ValueError,
        match="unknown protocol 'halfway'; use full, full-history, sampled-uniform, sampled-popularity",
    ):
        protocol_by_name("halfway")
    with pytest.raises(ValueError, match="n_negatives must be >= 1"):
        protocol_by_name("sampled-uniform", 0)


@pytest.mark.parametrize(
    "settings",
    [
        SplitSettings(),
        SplitSettings("leave-one-out", valid_users=5, seed=1),
        SplitSettings("temporal"),
        SplitSettings("last-qualifying", min_rating=3.0),
    ],
)
def test_a_split_is_remade_from_its_description(settings: SplitSettings) -> None:
    # evaluate re-splits a saved model's data from the description its results recorded: the settings
    # read back must make the same held-out cases, or the figures would be of another split.
    data = make_demo(n_users=60, n_items=30, seed=1, mean_length=10)
    made = settings.make(data)
    again = SplitSettings.described(made.describe())
    assert again == settings
    remade = again.make(data)
    assert remade.describe() == made.describe()
    assert np.array_equal(remade.test.users, made.test.users)
    assert np.array_equal(remade.valid.targets, made.valid.targets)


def test_split_settings_are_checked_before_any_data_and_unknown_descriptions_fall_back() -> None:
    with pytest.raises(ValueError, match="apply to the last-qualifying split only, not leave-one-out"):
        SplitSettings(target_events="buy")
    with pytest.raises(ValueError, match="apply to the last-qualifying split only, not temporal"):
        SplitSettings("temporal", min_rating=4.0)
    assert SplitSettings.described("custom (fold=3)") == SplitSettings()


def test_make_split_builds_each_named_split() -> None:
    data = make_demo(n_users=60, n_items=30, seed=1, mean_length=10)  # with timestamps
    assert SPLITS == ("leave-one-out", "temporal", "last-qualifying")
    loo = make_split(data, "leave-one-out", valid_users=5, seed=1)
    expected = leave_one_out(data, valid_users=5, seed=1)
    assert loo.describe() == expected.describe() and np.array_equal(loo.valid.users, expected.valid.users)
    assert make_split(data).describe() == "leave-one-out"
    assert make_split(data, "temporal").describe() == temporal_split(data).describe()
    with pytest.raises(ValueError, match="applies to the leave-one-out split only, not temporal"):
        make_split(data, "temporal", valid_users=5)
    with pytest.raises(
        ValueError, match="unknown split 'random'; use leave-one-out, temporal, last-qualifying"
    ):
        make_split(data, "random")
