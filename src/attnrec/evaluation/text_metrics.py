"""Metrics of explainable recommendation, as listed in the PETER paper (ACL 2021).

Texts are lists of word tokens. BLEU and ROUGE are reported x100 like the paper.

* **RMSE / MAE** of rating predictions clipped to the rating range.
* **BLEU-n**: corpus BLEU (Papineni et al. 2002) with one reference per hypothesis, uniform
  weights over orders 1..n, no smoothing (any zero precision gives 0), brevity penalty
  ``exp(1 - r/c)`` when the generated corpus is shorter. Equals NLTK's ``corpus_bleu``.
* **ROUGE-N** P/R/F: clipped n-gram overlap / generated (P) and / reference (R) n-grams, F1;
  **ROUGE-L** the same with the longest common subsequence; each averaged over pairs (an empty
  text scores 0). Equals the ``rouge-score`` package on pre-tokenised text.
* **USR**: unique generated sentences / generated sentences.
* **FMR**: share of generated explanations that contain the record's ground-truth feature.
* **FCR**: distinct features (from the feature set) generated / size of the feature set.
* **DIV**: mean over all pairs of generated explanations of the size of the intersection of
  their feature sets (lower = more diverse).
* **Looping share** (:func:`looping_share`, not in the paper): share of generated explanations
  that run to the word cap *and* repeat a bigram, i.e. greedy decoding caught in a loop.

Known difference: the PETER authors' ROUGE script (``rouge.py``, borrowed from tensorflow/nmt)
counts n-gram *types* (sets) and weights the LCS F-score by P/R; attnrec uses the standard
definition. Its filter that would drop empty generations is commented out, so empty outputs are
scored (as a single empty token) in both.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

Tokens = Sequence[str]


def clip_ratings(pred: np.ndarray, rating_range: tuple[float, float]) -> np.ndarray:
    return np.clip(np.asarray(pred, dtype=np.float64), rating_range[0], rating_range[1])


def rmse(pred: np.ndarray, true: np.ndarray, rating_range: tuple[float, float] = (1.0, 5.0)) -> float:
    """Root mean squared error of predictions clipped to ``rating_range``."""
    d = clip_ratings(pred, rating_range) - np.asarray(true, dtype=np.float64)
    return float(np.sqrt(np.mean(d * d)))


def mae(pred: np.ndarray, true: np.ndarray, rating_range: tuple[float, float] = (1.0, 5.0)) -> float:
    """Mean absolute error of predictions clipped to ``rating_range``."""
    return float(np.mean(np.abs(clip_ratings(pred, rating_range) - np.asarray(true, dtype=np.float64))))


def ngrams(tokens: Tokens, n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def bleu(references: Sequence[Tokens], generated: Sequence[Tokens], max_order: int = 4) -> float:
    """Corpus BLEU x100 with orders ``1..max_order`` (BLEU-1: ``max_order=1``)."""
    if len(references) != len(generated):
        raise ValueError("references and generated differ in length")
    match = np.zeros(max_order)
    total = np.zeros(max_order)
    ref_len = gen_len = 0
    for ref, gen in zip(references, generated, strict=True):
        ref_len, gen_len = ref_len + len(ref), gen_len + len(gen)
        for n in range(1, max_order + 1):
            g, r = ngrams(gen, n), ngrams(ref, n)
            match[n - 1] += sum(min(c, r[k]) for k, c in g.items())
            total[n - 1] += max(len(gen) - n + 1, 0)
    if gen_len == 0 or (total == 0).any() or (match == 0).any():
        return 0.0
    log_p = float(np.mean(np.log(match / total)))
    bp = 1.0 if gen_len > ref_len else math.exp(1 - ref_len / gen_len)
    return 100.0 * bp * math.exp(log_p)


def _prf(overlap: float, n_gen: int, n_ref: int) -> tuple[float, float, float]:
    p = overlap / n_gen if n_gen else 0.0
    r = overlap / n_ref if n_ref else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def lcs_length(a: Tokens, b: Tokens) -> int:
    """Length of the longest common subsequence (dynamic programming, O(len(a) * len(b)))."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_pair(reference: Tokens, generated: Tokens) -> dict[str, float]:
    """ROUGE-1/2/L precision, recall and F1 (fractions) of one pair."""
    out: dict[str, float] = {}
    for n in (1, 2):
        g, r = ngrams(generated, n), ngrams(reference, n)
        overlap = sum(min(c, r[k]) for k, c in g.items())
        p, rc, f = _prf(overlap, sum(g.values()), sum(r.values()))
        out |= {f"ROUGE-{n}-P": p, f"ROUGE-{n}-R": rc, f"ROUGE-{n}-F": f}
    p, rc, f = _prf(lcs_length(reference, generated), len(generated), len(reference))
    return out | {"ROUGE-L-P": p, "ROUGE-L-R": rc, "ROUGE-L-F": f}


def rouge(references: Sequence[Tokens], generated: Sequence[Tokens]) -> dict[str, float]:
    """ROUGE-1/2/L P/R/F x100, averaged over pairs."""
    if len(references) != len(generated):
        raise ValueError("references and generated differ in length")
    if not references:
        return {}
    scores = [rouge_pair(r, g) for r, g in zip(references, generated, strict=True)]
    return {k: 100.0 * float(np.mean([s[k] for s in scores])) for k in scores[0]}


def unique_sentence_ratio(generated: Sequence[Tokens]) -> float:
    """USR: unique generated sentences / generated sentences."""
    return len({tuple(g) for g in generated}) / len(generated) if generated else 0.0


def feature_sets(generated: Sequence[Tokens], features: Iterable[str]) -> list[set[str]]:
    """The features (words of ``features``) in each generated explanation."""
    fs = set(features)
    return [set(g) & fs for g in generated]


def feature_matching_ratio(generated: Sequence[Tokens], true_features: Sequence[str]) -> float:
    """FMR: share of explanations containing the record's ground-truth feature."""
    if not generated:
        return 0.0
    return sum(f in set(g) for g, f in zip(generated, true_features, strict=True)) / len(generated)


def feature_coverage_ratio(generated: Sequence[Tokens], features: Iterable[str]) -> float:
    """FCR: distinct features generated / number of features."""
    fs = set(features)
    found: set[str] = set().union(*feature_sets(generated, fs)) if generated else set()
    return len(found) / len(fs) if fs else 0.0


def feature_diversity(generated: Sequence[Tokens], features: Iterable[str]) -> float:
    """DIV: mean size of the shared feature set over all pairs of explanations (lower is better)."""
    sets = feature_sets(generated, features)
    n = len(sets)
    if n < 2:
        return 0.0
    vocab = sorted(set().union(*sets))
    if not vocab:
        return 0.0
    col = {w: j for j, w in enumerate(vocab)}
    m = np.zeros((n, len(vocab)), dtype=np.float64)
    for i, s in enumerate(sets):
        m[i, [col[w] for w in s]] = 1.0
    per_feature = m.sum(0)  # sum over pairs of |A & B| = sum over features of C(count, 2)
    return float((per_feature * (per_feature - 1) / 2).sum() / (n * (n - 1) / 2))


def loops(tokens: Tokens, cap: int, n: int = 2) -> bool:
    """Whether ``tokens`` ran to the word ``cap`` (``len >= cap``) and some ``n``-gram occurs twice in it."""
    return len(tokens) >= cap and any(c > 1 for c in ngrams(tokens, n).values())


def looping_share(generated: Sequence[Tokens], cap: int, n: int = 2) -> float:
    """Share of explanations that :func:`loops`: cut by the word cap while repeating an ``n``-gram.

    Both conditions, because a long explanation is not a defect by itself, and a short one that
    repeats a word pair ended on its own (``<eos>``); the loop that greedy decoding falls into
    ("and it for a nice and it for a ...") is cut only by the cap.
    """
    return sum(loops(g, cap, n) for g in generated) / len(generated) if generated else 0.0


def explanation_metrics(
    references: Sequence[Tokens],
    generated: Sequence[Tokens],
    true_features: Sequence[str],
    features: Iterable[str],
) -> dict[str, float]:
    """Every text metric of the PETER paper in one dict."""
    fs = set(features)
    return {
        "BLEU-1": bleu(references, generated, 1),
        "BLEU-4": bleu(references, generated, 4),
        **rouge(references, generated),
        "USR": unique_sentence_ratio(generated),
        "FMR": feature_matching_ratio(generated, true_features),
        "FCR": feature_coverage_ratio(generated, fs),
        "DIV": feature_diversity(generated, fs),
    }


__all__ = [
    "clip_ratings",
    "rmse",
    "mae",
    "ngrams",
    "bleu",
    "lcs_length",
    "rouge_pair",
    "rouge",
    "unique_sentence_ratio",
    "feature_sets",
    "feature_matching_ratio",
    "feature_coverage_ratio",
    "feature_diversity",
    "loops",
    "looping_share",
    "explanation_metrics",
]
