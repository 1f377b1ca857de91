"""Evaluation: metrics and protocols."""

from attnrec.evaluation.metrics import hit_rate, mrr, ndcg, ranking_metrics
from attnrec.evaluation.protocol import FULL, PAPER_BERT4REC, PAPER_SASREC, EvalResult, Protocol, evaluate

__all__ = [
    "hit_rate",
    "mrr",
    "ndcg",
    "ranking_metrics",
    "FULL",
    "PAPER_BERT4REC",
    "PAPER_SASREC",
    "EvalResult",
    "Protocol",
    "evaluate",
]
