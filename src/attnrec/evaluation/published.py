"""Published figures, as data, with what they are comparable to.

A published number is only comparable with ours when the data file (its sha256), the split and the
evaluation protocol are the same. :func:`published_metrics` returns a paper's figures for a model
only then, so a comparison table never puts numbers side by side that measure different things.

The figures themselves are data, in ``resources/published.toml`` next to this module (transcribed
from ``published-results.md`` of the project's shared reference folder):

* BERT4Rec paper (Sun et al., CIKM 2019), Table 2: ``ml-1m.txt`` and ``beauty.txt`` of the
  BERT4Rec repository, leave-one-out, 100 negatives sampled by popularity (history excluded).
* SASRec paper (Kang & McAuley, ICDM 2018): the same ``ml-1m.txt``, leave-one-out,
  100 negatives sampled uniformly (history excluded).
* Full ranking on the same two files (:data:`FULL_RANKING`): Klenitskiy & Vasilev (RecSys 2023),
  the RecTools table of the bert4rec_repro fork, Petrov & Macdonald (RecSys 2022 and 2023);
  leave-one-out, all items ranked, history excluded. HR@10 and NDCG@10 only.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from attnrec.data.split import parse_split
from attnrec.evaluation.metrics import METRICS
from attnrec.evaluation.protocol import Protocol

# sha256 of the uncompressed data files the published tables used.
ML_1M_SHA256 = "b725f3acb3986fe3130bffd1e77a74d182a1f51799567a236dbd60270f95b0a2"
BEAUTY_SHA256 = "f480b7a7403852342ffd8f9809bb30697dd669be31813d0e204b698fec86ef49"
TOYS_SHA256 = (
    "176c680c688d497598c4a89a03b402c0fe78d795e5db335c2e78dd5f2d778a3f"  # S3-Rec's Toys_and_Games.txt
)
SPORTS_SHA256 = (
    "2a095e0648872beb9982408958290f5d655db5be2911c3756b5446de9f0b8de2"  # S3-Rec's Sports_and_Outdoors.txt
)
DATASETS = {
    ML_1M_SHA256: "ml-1m",
    BEAUTY_SHA256: "beauty",
    TOYS_SHA256: "amazon-toys",
    SPORTS_SHA256: "amazon-sports",
}

# Registered model name -> the column name the papers use.
LABELS = {
    "pop": "POP",
    "bprmf": "BPR-MF",
    "ncf": "NCF",
    "fpmc": "FPMC",
    "fmc": "FMC",
    "transrec": "TransRec",
    "gru4rec": "GRU4Rec",
    "gru4rec-plus": "GRU4Rec+",
    "caser": "Caser",
    "sasrec": "SASRec",
    "bert4rec": "BERT4Rec",
    "hstu": "HSTU",
    "gsasrec": "gSASRec",
    "esasrec": "eSASRec",
    "content": "Content",
    "recent": "Recent",
}


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
        name, params = parse_split(split)
        if name != self.split or protocol.candidates != self.candidates:
            return False
        if params.get("cold_items"):  # cold items out of every history and tested as targets: other cases
            return False
        if self.candidates == "full":
            return protocol.exclude_seen
        return protocol.n_negatives == self.n_negatives and protocol.sampler == self.sampler


def _read_figures() -> dict[str, Any]:
    """The contents of ``resources/published.toml``."""
    text = (
        resources.files("attnrec.evaluation")
        .joinpath("resources", "published.toml")
        .read_text(encoding="utf-8")
    )
    return tomllib.loads(text)


def _table(spec: dict[str, Any]) -> PublishedTable:
    """A table of the resource file: per dataset ``{metric: values in models order}`` ->
    ``{model: {metric: value}}``."""
    models = spec["models"]
    for dataset, rows in spec["results"].items():
        if any(len(values) != len(models) for values in rows.values()):
            raise ValueError(f"published.toml: {spec['source']}, {dataset}: need one value per model")
    results = {
        dataset: {m: {k: rows[k][j] for k in METRICS if k in rows} for j, m in enumerate(models)}
        for dataset, rows in spec["results"].items()
    }
    fields = ("source", "split", "candidates", "n_negatives", "sampler")
    return PublishedTable(**{f: spec[f] for f in fields}, results=results)


_FIGURES = _read_figures()
_TABLES = {name: _table(spec) for name, spec in _FIGURES["tables"].items()}
BERT4REC_TABLE2 = _TABLES["bert4rec-table2"]
SASREC_PAPER = _TABLES["sasrec-paper"]
TABLES = tuple(_TABLES.values())


def published_table(
    data_sha256: str, protocol: Protocol, split: str = "leave-one-out"
) -> PublishedTable | None:
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


FULL_RANKING = tuple(FullRankingFigure(**row) for row in _FIGURES["full_ranking"])


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
