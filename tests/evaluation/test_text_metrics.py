"""PETER's metrics against hand-computed values (and NLTK / rouge-score when installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnrec.evaluation.text_metrics import (
    bleu,
    explanation_metrics,
    feature_coverage_ratio,
    feature_diversity,
    feature_matching_ratio,
    lcs_length,
    looping_share,
    loops,
    mae,
    rmse,
    rouge,
    rouge_pair,
    unique_sentence_ratio,
)

REF = [["the", "room", "is", "very", "clean"], ["great", "pool", "and", "staff"]]
GEN = [["the", "room", "is", "clean"], ["the", "staff", "is", "great"]]


def test_rating_errors_clip_to_the_rating_range() -> None:
    pred, true = np.array([6.0, 0.0, 3.5]), np.array([5.0, 1.0, 3.0])
    assert rmse(pred, true) == pytest.approx(math.sqrt(0.25 / 3))  # 6 -> 5 and 0 -> 1: no error
    assert mae(pred, true) == pytest.approx(0.5 / 3)
    assert rmse(pred, true, (0.0, 10.0)) == pytest.approx(math.sqrt((1 + 1 + 0.25) / 3))


def test_bleu_by_hand() -> None:
    # Unigrams: 4/4 + 2/4 ("staff", "great") = 6 of 8; c = 8, r = 9 -> BP = exp(1 - 9/8).
    bp = math.exp(1 - 9 / 8)
    assert bleu(REF, GEN, 1) == pytest.approx(100 * bp * 6 / 8)
    # Bigrams 2/6 (the room, room is); trigrams 1/4 (the room is); 4-grams 0/2 -> BLEU-4 is 0.
    assert bleu(REF, GEN, 4) == 0.0
    assert bleu(REF, GEN, 3) == pytest.approx(100 * bp * (6 / 8 * 2 / 6 * 1 / 4) ** (1 / 3))
    assert bleu([["a", "b", "c", "d"]], [["a", "b", "c", "d"]], 4) == pytest.approx(100.0)
    assert bleu([["a"]], [[]], 1) == 0.0
    # Clipping: a repeated word counts at most as often as in the reference; longer output: BP 1.
    assert bleu([["the", "cat"]], [["the", "the", "the"]], 1) == pytest.approx(100 / 3)


def test_rouge_by_hand() -> None:
    s = rouge_pair(REF[0], GEN[0])
    assert (s["ROUGE-1-P"], s["ROUGE-1-R"]) == (1.0, 0.8)
    assert s["ROUGE-1-F"] == pytest.approx(2 * 0.8 / 1.8)
    assert (s["ROUGE-2-P"], s["ROUGE-2-R"]) == (2 / 3, 2 / 4)
    assert lcs_length(REF[0], GEN[0]) == 4 and lcs_length(REF[1], GEN[1]) == 1
    t = rouge_pair(REF[1], GEN[1])
    assert t["ROUGE-1-P"] == 0.5 and t["ROUGE-2-F"] == 0.0 and t["ROUGE-L-P"] == 0.25
    avg = rouge(REF, GEN)
    assert avg["ROUGE-1-R"] == pytest.approx(100 * (0.8 + 0.5) / 2)
    assert avg["ROUGE-L-F"] == pytest.approx(100 * (s["ROUGE-L-F"] + t["ROUGE-L-F"]) / 2)
    assert rouge_pair(["a"], [])["ROUGE-1-F"] == 0.0


def test_explanation_diversity_metrics_by_hand() -> None:
    gen = [["great", "pool"], ["great", "pool"], ["clean", "room", "and", "pool"], ["nice"]]
    feats = {"pool", "room", "staff", "location"}
    assert unique_sentence_ratio(gen) == 0.75
    assert feature_matching_ratio(gen, ["pool", "room", "room", "staff"]) == 0.5
    assert feature_coverage_ratio(gen, feats) == 0.5  # pool, room of 4
    # pairs: (0,1) {pool}, (0,2) {pool}, (1,2) {pool}, the 3 pairs with {} -> 3 / 6.
    assert feature_diversity(gen, feats) == 0.5
    brute = np.mean([len(set(a) & set(b) & feats) for i, a in enumerate(gen) for b in gen[i + 1 :]])
    assert feature_diversity(gen, feats) == pytest.approx(brute)
    m = explanation_metrics(REF, GEN, ["room", "pool"], {"room", "pool", "staff"})
    assert m["FMR"] == 0.5 and m["USR"] == 1.0 and m["FCR"] == pytest.approx(2 / 3)


def _random_corpus(seed: int) -> tuple[list[list[str]], list[list[str]]]:
    rng = np.random.default_rng(seed)
    words = ["a", "b", "c"]  # few words, so that 4-grams match too
    # At least 4 words: NLTK counts a denominator of 1 for a text shorter than n (we, like the
    # NMT/PETER script, count 0 possible n-grams there); otherwise the two agree exactly.
    ref = [list(rng.choice(words, rng.integers(4, 15))) for _ in range(40)]
    gen = [list(rng.choice(words, rng.integers(4, 15))) for _ in range(40)]
    return ref, gen


def test_bleu_matches_nltk() -> None:
    bleu_score = pytest.importorskip("nltk.translate.bleu_score")
    for seed in range(3):
        ref, gen = _random_corpus(seed)
        for n in (1, 4):
            w = tuple([1.0 / n] * n)
            want = 100 * bleu_score.corpus_bleu([[r] for r in ref], gen, weights=w)
            assert want > 0
            assert bleu(ref, gen, n) == pytest.approx(want, rel=1e-9)


def test_rouge_matches_rouge_score() -> None:
    rs = pytest.importorskip("rouge_score.rouge_scorer")
    scorer = rs.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=False)
    ref, gen = _random_corpus(7)
    ours = rouge(ref, gen)
    theirs = [scorer.score(" ".join(r), " ".join(g)) for r, g in zip(ref, gen, strict=True)]
    for key, name in (("rouge1", "1"), ("rouge2", "2"), ("rougeL", "L")):
        for attr, letter in (("precision", "P"), ("recall", "R"), ("fmeasure", "F")):
            want = 100 * np.mean([getattr(t[key], attr) for t in theirs])
            assert ours[f"ROUGE-{name}-{letter}"] == pytest.approx(want, rel=1e-9)


def test_looping_share_needs_both_the_cap_and_a_repeated_bigram() -> None:
    cap = 6
    looping = "and it for a and it".split()  # 6 words, ("and", "it") twice: cut by the cap inside a loop
    long_fresh = "the tone is warm and clear".split()  # 6 words, no bigram twice: long but not looping
    short_repeat = "great great great".split()  # ("great", "great") twice, but ended before the cap
    word_twice = "the neck and the body ok".split()  # "the" twice, every bigram once
    assert loops(looping, cap) and not loops(long_fresh, cap) and not loops(short_repeat, cap)
    assert not loops(word_twice, cap) and loops(word_twice, cap, n=1)
    assert looping_share([looping, long_fresh, short_repeat, word_twice], cap) == 0.25
    assert looping_share([looping, looping], cap) == 1.0 and looping_share([], cap) == 0.0
    assert not loops(looping, cap + 1)  # one word short of a larger cap: it ended on its own
