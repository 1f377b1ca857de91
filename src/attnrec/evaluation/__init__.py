"""Evaluation: metrics and protocols."""

from attnrec.evaluation.list_metrics import average_popularity, coverage, intra_list_diversity, novelty
from attnrec.evaluation.metrics import TargetRanks, hit_rate, mrr, ndcg, ranking_metrics
from attnrec.evaluation.protocol import FULL, PAPER_BERT4REC, PAPER_SASREC, EvalResult, Protocol, evaluate
from attnrec.evaluation.window import TargetSets, split_window_cases, window_cases

__all__ = [
    "hit_rate",
    "mrr",
    "ndcg",
    "ranking_metrics",
    "TargetRanks",
    "average_popularity",
    "coverage",
    "intra_list_diversity",
    "novelty",
    "FULL",
    "PAPER_BERT4REC",
    "PAPER_SASREC",
    "EvalResult",
    "Protocol",
    "evaluate",
    "TargetSets",
    "split_window_cases",
    "window_cases",
]
