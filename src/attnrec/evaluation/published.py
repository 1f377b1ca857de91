"""Published figures, as data, with what they are comparable to.

A published number is only comparable with ours when the data file (its sha256), the split and the
evaluation protocol are the same. :func:`published_metrics` returns a paper's figures for a model
only then, so a comparison table never puts numbers side by side that measure different things.

Sources (transcribed from ``published-results.md`` of the project's shared reference folder):

* BERT4Rec paper (Sun et al., CIKM 2019), Table 2: ``ml-1m.txt`` and ``beauty.txt`` of the
  BERT4Rec repository, leave-one-out, 100 negatives sampled by popularity (history excluded).
* SASRec paper (Kang & McAuley, ICDM 2018): the same ``ml-1m.txt``, leave-one-out,
  100 negatives sampled uniformly (history excluded).
* Full ranking on the same two files (:data:`FULL_RANKING`): Klenitskiy & Vasilev (RecSys 2023),
  the RecTools table of the bert4rec_repro fork, Petrov & Macdonald (RecSys 2022 and 2023);
  leave-one-out, all items ranked, history excluded. HR@10 and NDCG@10 only.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnrec.data.split import parse_split
from attnrec.evaluation.metrics import METRICS
from attnrec.evaluation.protocol import Protocol

# sha256 of the uncompressed data files the published tables used.
ML_1M_SHA256 = "b725f3acb3986fe3130bffd1e77a74d182a1f51799567a236dbd60270f95b0a2"
BEAUTY_SHA256 = "f480b7a7403852342ffd8f9809bb30697dd669be31813d0e204b698fec86ef49"
DATASETS = {ML_1M_SHA256: "ml-1m", BEAUTY_SHA256: "beauty"}

# Registered model name -> the column name the papers use.
LABELS = {
    "pop": "POP", "bprmf": "BPR-MF", "ncf": "NCF", "fpmc": "FPMC", "fmc": "FMC", "transrec": "TransRec",
    "gru4rec": "GRU4Rec", "gru4rec-plus": "GRU4Rec+", "caser": "Caser", "sasrec": "SASRec",
    "bert4rec": "BERT4Rec",
}  # fmt: skip


@dataclass(frozen=True)
class PublishedTable:
    """One published results table: figures per dataset, per model, per metric."""

    source: str
    split: str
    candidates: str  # "full" or "sampled"
    n_negatives: int
    sampler: str  # "uniform" or "popularity" (sampled protocols)
    results: dict[str, dict[str, dict[str, float]]]  # dataset -> model label -> metric -> value

    def matches(self, protocol: Protocol, split: str) -> bool:
        """Whether ``protocol`` on ``split`` measures what this table measured.

        ``split`` may carry parameters (``"leave-one-out (valid_users=2048, seed=0)"``): they change
        which validation items are trained on, not the test cases, so the base name decides.
        """
        if parse_split(split)[0] != self.split or protocol.candidates != self.candidates:
            return False
        if self.candidates == "full":
            return protocol.exclude_seen
        return protocol.n_negatives == self.n_negatives and protocol.sampler == self.sampler


_MODELS = ("POP", "BPR-MF", "NCF", "FPMC", "GRU4Rec", "GRU4Rec+", "Caser", "SASRec", "BERT4Rec")


def _table(rows: dict[str, tuple[float, ...]]) -> dict[str, dict[str, float]]:
    """``{metric: values in _MODELS order}`` -> ``{model: {metric: value}}``."""
    return {m: {k: rows[k][j] for k in METRICS} for j, m in enumerate(_MODELS)}


BERT4REC_TABLE2 = PublishedTable(
    source="BERT4Rec paper (Sun et al., CIKM 2019), Table 2",
    split="leave-one-out", candidates="sampled", n_negatives=100, sampler="popularity",
    results={
        "beauty": _table({
            "HR@1": (0.0077, 0.0415, 0.0407, 0.0435, 0.0402, 0.0551, 0.0475, 0.0906, 0.0953),
            "HR@5": (0.0392, 0.1209, 0.1305, 0.1387, 0.1315, 0.1781, 0.1625, 0.1934, 0.2207),
            "HR@10": (0.0762, 0.1992, 0.2142, 0.2401, 0.2343, 0.2654, 0.2590, 0.2653, 0.3025),
            "NDCG@5": (0.0230, 0.0814, 0.0855, 0.0902, 0.0812, 0.1172, 0.1050, 0.1436, 0.1599),
            "NDCG@10": (0.0349, 0.1064, 0.1124, 0.1211, 0.1074, 0.1453, 0.1360, 0.1633, 0.1862),
            "MRR": (0.0437, 0.1006, 0.1043, 0.1056, 0.1023, 0.1299, 0.1205, 0.1536, 0.1701),
        }),
        "ml-1m": _table({
            "HR@1": (0.0141, 0.0914, 0.0397, 0.1386, 0.1583, 0.2092, 0.2194, 0.2351, 0.2863),
            "HR@5": (0.0715, 0.2866, 0.1932, 0.4297, 0.4673, 0.5103, 0.5353, 0.5434, 0.5876),
            "HR@10": (0.1358, 0.4301, 0.3477, 0.5946, 0.6207, 0.6351, 0.6692, 0.6629, 0.6970),
            "NDCG@5": (0.0416, 0.1903, 0.1146, 0.2885, 0.3196, 0.3705, 0.3832, 0.3980, 0.4454),
            "NDCG@10": (0.0621, 0.2365, 0.1640, 0.3439, 0.3627, 0.4064, 0.4268, 0.4368, 0.4818),
            "MRR": (0.0627, 0.2009, 0.1358, 0.2891, 0.3041, 0.3462, 0.3648, 0.3790, 0.4254),
        }),
    },
)  # fmt: skip

SASREC_PAPER = PublishedTable(
    source="SASRec paper (Kang & McAuley, ICDM 2018)",
    split="leave-one-out", candidates="sampled", n_negatives=100, sampler="uniform",
    results={"ml-1m": {"SASRec": {"HR@10": 0.8245, "NDCG@10": 0.5905}}},
)

TABLES = (BERT4REC_TABLE2, SASREC_PAPER)


def published_table(data_sha256: str, protocol: Protocol, split: str = "leave-one-out") -> PublishedTable | None:
    """The published table measured on this data file under this protocol, if any."""
    dataset = DATASETS.get(data_sha256)
    for table in TABLES:
        if dataset is not None and dataset in table.results and table.matches(protocol, split):
            return table
    return None


def published_metrics(
    model: str, data_sha256: str, protocol: Protocol, split: str = "leave-one-out"
) -> dict[str, float] | None:
    """The published figures of registered ``model`` comparable with ours, or ``None``.

    >>> from attnrec.evaluation.protocol import PAPER_BERT4REC, FULL
    >>> published_metrics("fpmc", ML_1M_SHA256, PAPER_BERT4REC)["HR@10"]
    0.5946
    >>> published_metrics("fpmc", ML_1M_SHA256, FULL) is None
    True
    """
    table = published_table(data_sha256, protocol, split)
    if table is None:
        return None
    label = LABELS.get(model, model)
    return table.results[DATASETS[data_sha256]].get(label)


@dataclass(frozen=True)
class FullRankingFigure:
    """One published full-ranking HR@10 / NDCG@10 on a data file of :data:`DATASETS`."""

    dataset: str  # a value of DATASETS
    model: str  # the registered model it is a figure of
    source: str  # model variant and paper
    hr10: float
    ndcg10: float
    train_seconds: float | None = None  # as reported, on the authors' GPU

    def text(self) -> str:
        """``"<source> 0.3152 / 0.1821"`` (HR@10 / NDCG@10)."""
        return f"{self.source} {self.hr10:.4f} / {self.ndcg10:.4f}"


_KV, _RT, _PM = "Klenitskiy & Vasilev, RecSys 2023", "RecTools, bert4rec_repro fork table", "Petrov & Macdonald"
FULL_RANKING = (
    FullRankingFigure("ml-1m", "sasrec", f"SASRec, BCE 1 negative ({_KV})", 0.2500, 0.1341, 486),
    FullRankingFigure("ml-1m", "sasrec", f"SASRec+ full CE ({_KV})", 0.3152, 0.1821, 540),
    FullRankingFigure("ml-1m", "sasrec", f"SASRec+ sampled CE, 3000 negatives ({_KV})", 0.3159, 0.1857, 769),
    FullRankingFigure("ml-1m", "bert4rec", f"BERT4Rec ({_KV})", 0.2843, 0.1537, 1409),
    FullRankingFigure("ml-1m", "sasrec", f"SASRec, softmax loss ({_RT})", 0.3058, 0.1779),
    FullRankingFigure("ml-1m", "bert4rec", f"BERT4Rec ({_RT})", 0.2921, 0.1618),
    FullRankingFigure("ml-1m", "bert4rec", f"BERT4Rec original code ({_PM}, RecSys 2022)", 0.1518, 0.0806),
    FullRankingFigure("ml-1m", "sasrec", f"gSASRec, gBCE 256 negatives ({_PM}, RecSys 2023)", 0.3003, 0.1726),
    FullRankingFigure("beauty", "sasrec", f"SASRec, BCE ({_KV})", 0.0246, 0.0126, 521),
    FullRankingFigure("beauty", "sasrec", f"SASRec+ full CE ({_KV})", 0.0533, 0.0327, 332),
    FullRankingFigure("beauty", "bert4rec", f"BERT4Rec ({_KV})", 0.0338, 0.0187, 2325),
    FullRankingFigure("beauty", "sasrec", f"SASRec ({_RT})", 0.0595, 0.0359),
    FullRankingFigure("beauty", "bert4rec", f"BERT4Rec ({_RT})", 0.0434, 0.0242),
)  # fmt: skip


def full_ranking_figures(data_sha256: str, model: str | None = None) -> list[FullRankingFigure]:
    """The published full-ranking figures on this data file (of ``model`` only, when given)."""
    dataset = DATASETS.get(data_sha256)
    return [f for f in FULL_RANKING if f.dataset == dataset and model in (None, f.model)]


def best_full_ranking(model: str, data_sha256: str) -> FullRankingFigure | None:
    """The best (by NDCG@10) published full-ranking figure of ``model`` on this file, or ``None``.

    >>> best_full_ranking("bert4rec", ML_1M_SHA256).hr10
    0.2921
    >>> best_full_ranking("caser", ML_1M_SHA256) is None
    True
    """
    return max(full_ranking_figures(data_sha256, model), key=lambda f: f.ndcg10, default=None)
