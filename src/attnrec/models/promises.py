"""What each named preset promises, and what was measured with it.

A preset is a set of settings with a claim attached: where its numbers come from (a paper, the
authors' code, attnrec's own tuning) and what a user can expect when running it. The claims live
here, one line each, beside the committed result files that back them (``benchmarks/results``);
the settings themselves stay in each model's file. ``attnrec models NAME`` prints them, and a test
checks that every registered preset has one and that no promise names a preset that does not exist.

Figures are test-split leave-one-out metrics: "full" is full ranking over all items, "pop-sampled"
100 popularity-sampled negatives, "uniform-sampled" 100 uniform ones, the history excluded.
"""

from __future__ import annotations

_DEMO = (
    "the built-in demo data (`--data demo`: 2,000 users, 500 items) within a few minutes on 2 CPU "
    "cores, for `make demo` and the tests; no promise on real data"
)
_BERT4REC_TABLE = (
    "the BERT4Rec paper's Table 2 protocol (pop-sampled) on its {data} file, with the preset's "
    "time budget on one CPU thread (a few Beauty rows with a longer one, named under the table): "
    "{figure} (benchmarks/results/compare/{data})"
)

PROMISES: dict[str, dict[str, str]] = {
    "sasrec": {
        "paper": "the paper's dense-data settings and its 200 epochs: on ml-1m.txt it reproduces the "
        "paper's uniform-sampled HR@10 0.8245 / NDCG@10 0.5905 (measured 0.8219 / 0.5991, "
        "ml-1m-sasrec-bce-paper, lr 2e-3); off ML-1M it is the paper's recipe, not a tuned one "
        "(ml-100k full 0.2047 / 0.1025, ml-latest-small 0.0639 / 0.0283)",
        "paper-sparse": "the paper's sparse-data settings (n 50, dropout 0.5) and its 200 epochs, the "
        "setting the paper used for Amazon files; off its home data, against the S3-Rec "
        "table's BCE SASRec (full HR@10 0.0675 / NDCG@10 0.0374): amazon-toys 0.0639 / "
        "0.0360, 95% / 96%, validation still rising at epoch 200 "
        "(amazon-toys-sasrec-bce-paper); amazon-sports 0.0285 / 0.0148 against 0.0350 / "
        "0.0192, 81% / 77%, best epoch 40 (amazon-sports-sasrec-bce-paper; docs/explanation/models.md)",
        "ml-1m-ce": "attnrec's full-softmax SASRec (d 64, dropout 0.2, n 200): on ml-1m.txt full "
        "HR@10 0.3025 / NDCG@10 0.1738 in 94 epochs on one CPU thread (ml-1m-sasrec-ce), "
        "above the BCE paper setting's 0.2517 / 0.1338; patience 5 can stop early on a small "
        "validation set (train.min_epochs / train.smooth, README); on a sparse file with max length "
        "50, dropout 0.5 and patience 20, amazon-toys full 0.1169 / 0.0719 ID-only "
        "(amazon-toys-sasrec-ce-v2048-seed0, validation on 2,048 users) and amazon-sports "
        "0.0657 / 0.0385 (amazon-sports-sasrec-ce-v2048-seed0, the same split); on beauty with hidden "
        "128 under that split 0.0675 / 0.0411 (beauty-sasrec-ce-v2048-h128-gpu, a lent GPU, 4 minutes)",
        "demo": _DEMO,
    },
    "bert4rec": {
        "ml-1m": "the authors' ML-1M model settings at a CPU's training length (lr 1e-3, at most 100 "
        "epochs and 4 hours), not their 400k steps: full NDCG@10 0.0907 after 40 minutes "
        "(ml-1m-bert4rec-40min); the lighter-dropout variant reached 0.1780 in 125 minutes "
        "(ml-1m-bert4rec-fast); the paper's own figures need its ~10,000 epochs",
        "beauty": "the authors' Beauty model settings at a CPU's training length: full HR@10 0.0227 / "
        "NDCG@10 0.0109 in 70 minutes (beauty-bert4rec); sampled softmax and a cosine schedule "
        "(beauty-bert4rec-sampled-cosine*) reach 0.0393-0.0500 / 0.0213-0.0277",
        "demo": _DEMO,
    },
    "gsasrec": {
        "paper": "the authors' ML-1M run and stopping rule (d 128, k 256, t 0.75, patience 417 passes, up "
        "to 3,000): GPU-length training, not measured here end to end",
        "ml-1m": "the same model trained all 200 epochs (gBCE sits at popularity level for dozens of "
        "epochs first); patience 20 without min_epochs stopped on that plateau at full NDCG@10 "
        "0.0215 (ml-1m-gsasrec-gpu), so the preset never stops before epoch 200",
        "demo": _DEMO,
    },
    "esasrec": {
        "ml-1m": "the eSASRec authors' ML-1M settings (blondered/transformer_benchmark), negatives per "
        "sequence; the per-batch predecessor reached full 0.2806 / 0.1550 on a GPU "
        "(ml-1m-esasrec-gpu), the full-softmax variant 0.3192 / 0.1842 (ml-1m-esasrec-ce-gpu2)",
        "beauty": "the authors' Beauty training (d 64 as their README table gives it, 1 layer, n 50, "
        "256 negatives per position, item-table dropout, FFN x4, 200 epochs, patience 50); "
        "with the default split (validation on every user) their protocol; their Beauty is "
        "S3-Rec's file, not BERT4Rec's `beauty`, so not run here. The preset sets none of the speed "
        "settings `sports`/`toys` were timed with: add them as `--set amp=bf16 --set fast_dropout=true "
        "--set threads=1` (without them one run took 64 s an epoch)",
        "sports": "the authors' Sports training (as `beauty`, FFN x2): under their protocol 200 epochs "
        "of 22 s on one CPU core, with three settings this preset does not set (add them: `--set "
        "amp=bf16 --set fast_dropout=true --set threads=1`), reached full HR@10 0.0561 / NDCG@10 "
        "0.0314 against the published 0.0560 / 0.0323 (amazon-sports-esasrec-authors-d64), up "
        "to 400 epochs 0.0569 / 0.0321 (amazon-sports-esasrec-authors-d64-e400); "
        "the loo configs' width 256 reached 0.0488 / 0.0272 (amazon-sports-esasrec-authors)",
        "toys": "the authors' Toys training (as `beauty`, FFN x1): under their protocol 200 epochs of "
        "9 s on one CPU core, with three settings this preset does not set (add them: `--set "
        "amp=bf16 --set fast_dropout=true --set threads=1`), reached full HR@10 0.0917 / NDCG@10 0.0521 "
        "(a second seed 0.0914 / 0.0529) against the published 0.0939 / 0.0538 "
        "(amazon-toys-esasrec-authors-d64), 400 epochs 0.0964 / 0.0567 (amazon-toys-esasrec-"
        "authors-d64-e400); the loo configs' width 256 reached 0.0827 / 0.0511 "
        "(amazon-toys-esasrec-authors)",
        "demo": _DEMO,
    },
    "hstu": {
        "ml-1m": "the reference's ML-1M recipe (101 epochs, AdamW, 128 negatives per sequence); ml-1m.txt "
        "has no timestamps, so no time bias. Ten CPU epochs reach full NDCG@10 0.1242 "
        "(ml-1m-hstu-negatives-sequence-10ep); the paper reports 0.1720 after 101",
        "ml-1m-large": "HSTU-large's recipe (8 layers, 2 heads); the paper reports full HR@10 0.3294 / "
        "NDCG@10 0.1893. With the full softmax (loss=ce) 101 GPU epochs reached 0.3325 / "
        "0.1923 (ml-1m-hstu-large-ce-gpu2) and 153 reached 0.3371 / 0.1962 "
        "(ml-1m-hstu-large-ce-gpu3), attnrec's best on ML-1M",
        "demo": _DEMO,
    },
    "peter": {
        "paper": "the authors' training (SGD lr 1.0, clip 1.0, lr x0.25 on each non-improving epoch, 5 "
        "drops) at the paper's sizes, run against the reference implementation with equal budgets "
        "(benchmarks/results/peter_reference.md); far from converged in a short budget",
        "plus": "PETER+ (the item's feature word as input) trained as `paper`",
        "adam": "Adam lr 1e-3 with the same schedule (3 drops): the setting of the committed "
        "benchmarks/results/peter.md figures",
    },
    "pop": {
        "ml-1m": _BERT4REC_TABLE.format(data="ml-1m", figure="HR@10 0.1328 against the published 0.1358"),
        "beauty": _BERT4REC_TABLE.format(
            data="beauty", figure="HR@10 0.0592 against the published 0.0762 (the notes explain the gap)"
        ),
        "demo": _DEMO,
    },
    "recent": {
        "default": "no settings: the user's own most recent items, newest first (a re-purchase baseline)",
        "demo": _DEMO,
    },
    "content": {
        "default": "no settings: attribute overlap with the history, weighted by recency; the cold-item "
        "baseline (amazon-toys-cold-content)",
    },
}

_TABLE_FIGURES = {
    "bprmf": ("HR@10 0.3906 (published 0.4301), stopped by its budget", "HR@10 0.1825 (published 0.1992)"),
    "ncf": ("HR@10 0.3937 (published 0.3477)", "HR@10 0.2265 (published 0.2142)"),
    "fmc": ("HR@10 0.4899 (no published row)", "HR@10 0.1822 (no published row)"),
    "fpmc": ("HR@10 0.5674 (published 0.5946)", "HR@10 0.2605 (published 0.2401)"),
    "transrec": ("HR@10 0.4960 (no published row)", "HR@10 0.1987 (no published row)"),
    "gru4rec": ("HR@10 0.6672 (published 0.6207)", "HR@10 0.2179 (published 0.2343)"),
    "gru4rec-plus": ("HR@10 0.6942 (published 0.6351)", "HR@10 0.2840 (published 0.2654)"),
    "caser": ("HR@10 0.6389 (published 0.6692), stopped by its budget", "HR@10 0.2380 (published 0.2590)"),
}
for _model, (_ml1m, _beauty) in _TABLE_FIGURES.items():
    PROMISES[_model] = {
        "ml-1m": _BERT4REC_TABLE.format(data="ml-1m", figure=_ml1m),
        "beauty": _BERT4REC_TABLE.format(data="beauty", figure=_beauty),
        "demo": _DEMO,
    }


def promise(model: str, preset: str) -> str:
    """The promise of ``model``'s ``preset`` (empty when none is written)."""
    return PROMISES.get(model, {}).get(preset, "")
