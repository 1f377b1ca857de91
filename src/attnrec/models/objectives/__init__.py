"""Training objectives (:mod:`.objectives`), their arithmetic (:mod:`.kernels`) and their negatives
(:mod:`.negatives`)."""

from attnrec.models.objectives.objectives import (
    BCE,
    GBCE,
    OBJECTIVES,
    BPRMax,
    FullSoftmax,
    ItemTable,
    Objective,
    ObjectiveSettings,
    SampledSoftmax,
    Scored,
    TOP1Max,
    build_objective,
    check_negative_counts,
    check_objective,
)

__all__ = [
    "BCE",
    "BPRMax",
    "GBCE",
    "TOP1Max",
    "OBJECTIVES",
    "FullSoftmax",
    "ItemTable",
    "Objective",
    "ObjectiveSettings",
    "SampledSoftmax",
    "Scored",
    "build_objective",
    "check_negative_counts",
    "check_objective",
]
