"""Text for explainable recommendation: sentences, tokens, a vocabulary and explanation templates.

An explanation *template* is PETER's ``(feature, adjective, sentence, sentiment)``: the product
aspect a review talks about, the opinion word about it, the one sentence that says so, and its
polarity (+1/-1). PETER's own data get templates from the Sentires toolkit; attnrec builds
them offline and reproducibly with :class:`HeuristicExtractor`, or takes them from the user
(:class:`TemplateTable`, any object with the :class:`TemplateExtractor` interface).

The heuristic method (deterministic, no network, no model download)
-------------------------------------------------------------------
1. Each review is split into sentences (``.``, ``!``, ``?``, ``;`` and line breaks, also when
   no space follows: ``"cheap.It works"``) and each sentence into lower-case word tokens.
2. **Features** are found on the whole corpus: a word is a candidate when it is neither a stop
   word nor an opinion word, has 3+ letters, appears at least ``min_count`` times, and is used
   like a noun -- at least ``noun_ratio`` of its occurrences directly follow a determiner or
   possessive (``the``, ``this``, ``my``, ...) or an opinion adjective (``great sound``). A short
   list of generic nouns (``thing``, ``product``, ``review`` ...) is excluded.
3. For every review, each sentence of 4 to ``max_sentence_words`` words that holds a feature
   and an opinion word (from the shipped lexicon, with ``not``/``n't``/``never``/``no`` up to
   three words before flipping its polarity) is a candidate. The score favours sentences
   whose polarity agrees with the rating (>= 4 positive, <= 2 negative, 3 either) and that are
   no longer than ``prefer_words``; ties go to the earliest sentence. The template's feature is
   the feature word nearest the opinion word.
4. Reviews without such a sentence give no record (the counts are reported).

Limits: the noun test is a distributional heuristic, not a POS tagger, so some adjectives or
verbs slip in as "features" and multi-word aspects (``pop filter``) are reduced to one word;
the lexicon is small and English only; a fixed list of frequent adjectives is excluded; sarcasm, comparisons
and long-range negation are not understood. Bring your own templates (e.g. from Sentires) when quality
matters.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import ClassVar, Protocol

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)

_SENT_END = re.compile(r"(?<=[.!?;])\s*(?=[A-Za-z\"'(])|[\r\n]+|(?<=[.!?;])\s+")
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NEGATIONS = frozenset(
    {
        "not",
        "no",
        "never",
        "n't",
        "don't",
        "doesn't",
        "didn't",
        "isn't",
        "wasn't",
        "aren't",
        "won't",
        "can't",
        "cannot",
        "couldn't",
        "wouldn't",
        "hardly",
    }
)
_DETERMINERS = frozenset(
    {
        "the",
        "this",
        "that",
        "these",
        "those",
        "my",
        "a",
        "an",
        "its",
        "your",
        "their",
        "his",
        "her",
        "our",
        "whose",
        "every",
        "each",
    }
)
_GENERIC = frozenset(
    {
        "thing",
        "things",
        "lot",
        "lots",
        "bit",
        "way",
        "time",
        "times",
        "one",
        "ones",
        "something",
        "anything",
        "everything",
        "nothing",
        "review",
        "reviews",
        "star",
        "stars",
        "amazon",
        "product",
        "products",
        "item",
        "items",
        "purchase",
        "price's",
        "day",
        "days",
        "year",
        "years",
        "while",
        "job",
        "stuff",
        "kind",
        "sort",
        "fact",
        "reason",
        "part",
        "end",
        "case",
        "use",
        "order",
        "look",
        "buy",
        "deal",
        # frequent adjectives/adverbs that pass the distributional noun test
        "little",
        "enough",
        "small",
        "new",
        "long",
        "first",
        "big",
        "much",
        "many",
        "old",
        "last",
        "next",
        "other",
        "own",
        "same",
        "several",
        "whole",
        "extra",
        "real",
        "actual",
        "only",
        "large",
        "high",
        "low",
        "double",
        "single",
        "different",
        "second",
        "entire",
        "sounding",
        "additional",
        "absolute",
        "average",
        "basic",
        "biggest",
        "black",
        "blue",
        "brown",
        "white",
        "red",
        "top",
        "full",
        "huge",
        "tiny",
        "certain",
        "main",
        "original",
        "overall",
        "previous",
        "particular",
        "third",
    }
)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``; splits at ``.!?;`` (with or without a following space) and newlines."""
    return [s.strip() for s in _SENT_END.split(text) if s and s.strip()]


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens (letters/digits, inner apostrophes kept); punctuation dropped."""
    return _TOKEN.findall(text.lower().replace("\u2019", "'"))


def _resource_lines(name: str) -> list[str]:
    text = resources.files("attnrec.data").joinpath("resources", name).read_text(encoding="utf-8")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


@cache
def stop_words() -> frozenset[str]:
    """The shipped English stop-word list (the classic 179-word Snowball/NLTK list)."""
    return frozenset(_resource_lines("stopwords_en.txt"))


@cache
def opinion_lexicon() -> dict[str, int]:
    """The shipped opinion lexicon: word -> +1 or -1."""
    out: dict[str, int] = {}
    for ln in _resource_lines("opinion_en.txt"):
        word, pol = ln.split("\t")
        out[word] = int(pol)
    return out


@dataclass(frozen=True)
class Vocabulary:
    """Words <-> indices; indices 0-3 are ``<pad> <bos> <eos> <unk>``."""

    words: tuple[str, ...]
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    # The indices of SPECIALS, fixed for every vocabulary (class constants, not fields).
    pad: ClassVar[int] = 0
    bos: ClassVar[int] = 1
    eos: ClassVar[int] = 2
    unk: ClassVar[int] = 3

    def __post_init__(self) -> None:
        if self.words[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary starts with {SPECIALS}")
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], max_size: int = 20_000) -> Vocabulary:
        """The ``max_size`` most frequent words (ties alphabetical) plus the four specials."""
        counts: Counter[str] = Counter()
        for toks in sentences:
            counts.update(toks)
        for s in SPECIALS:
            counts.pop(s, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:max_size]
        return cls(SPECIALS + tuple(w for w, _ in ranked))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._index

    def index(self, word: str) -> int:
        return self._index.get(word, self.unk)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self._index.get(w, 3) for w in tokens]

    def decode(self, ids: Iterable[int], stop_at_eos: bool = True) -> list[str]:
        """Words of ``ids``, skipping ``<pad>``/``<bos>`` and stopping at ``<eos>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == 2 and stop_at_eos:
                break
            if i > 1:
                out.append(self.words[i])
        return out


@dataclass(frozen=True)
class Template:
    """PETER's explanation template: feature, opinion word, sentence (space-joined tokens), polarity."""

    feature: str
    adjective: str
    sentence: str
    sentiment: int


@dataclass(frozen=True)
class RawReview:
    """One review before extraction; ``user``/``item`` are external IDs."""

    user: str
    item: str
    rating: float
    text: str


class TemplateExtractor(Protocol):
    """Anything that turns a corpus of reviews into one template (or ``None``) per review."""

    def extract(self, reviews: Sequence[RawReview]) -> list[Template | None]: ...


@dataclass(frozen=True)
class HeuristicExtractor:
    """The offline, deterministic extractor described in the module docstring."""

    min_count: int = 10
    noun_ratio: float = 0.3
    max_sentence_words: int = 40
    prefer_words: int = 20
    features: frozenset[str] | None = None  # give a fixed feature set to skip discovery

    def discover_features(self, token_lists: Iterable[Sequence[str]]) -> frozenset[str]:
        """Noun-like frequent words of the corpus (step 2)."""
        stop, opinion = stop_words(), opinion_lexicon()
        total: Counter[str] = Counter()
        after: Counter[str] = Counter()
        for toks in token_lists:
            total.update(toks)
            for prev, w in zip(toks, toks[1:], strict=False):
                if prev in _DETERMINERS or prev in opinion:
                    after[w] += 1
        return frozenset(
            w
            for w, n in total.items()
            if n >= self.min_count
            and len(w) >= 3
            and w.isalpha()
            and w not in stop
            and w not in opinion
            and w not in _GENERIC
            and w not in _NEGATIONS
            and after[w] >= self.noun_ratio * n
        )

    def extract(self, reviews: Sequence[RawReview]) -> list[Template | None]:
        sentences = [[tokenize(s) for s in split_sentences(r.text)] for r in reviews]
        feats = self.features
        if feats is None:
            feats = self.discover_features(t for sents in sentences for t in sents)
        return [self.choose(sents, r.rating, feats) for sents, r in zip(sentences, reviews, strict=True)]

    def choose(
        self, sentences: Sequence[Sequence[str]], rating: float, features: frozenset[str]
    ) -> Template | None:
        """The template of the sentence that best explains ``rating`` (step 3), or ``None``."""
        opinion = opinion_lexicon()
        want = 1 if rating >= 4 else -1 if rating <= 2 else 0
        best: tuple[float, Template] | None = None
        for toks in sentences:
            if not 4 <= len(toks) <= self.max_sentence_words:
                continue
            fpos = [i for i, w in enumerate(toks) if w in features]
            opos = [i for i, w in enumerate(toks) if w in opinion]
            if not fpos or not opos:
                continue
            polar = {}
            for i in opos:
                neg = any(w in _NEGATIONS or w.endswith("n't") for w in toks[max(0, i - 3) : i])
                polar[i] = -opinion[toks[i]] if neg else opinion[toks[i]]
            agree = [i for i in opos if want == 0 or polar[i] == want]
            o = agree[0] if agree else opos[0]
            f = min(fpos, key=lambda j: (abs(j - o), j))
            score = 2.0 * bool(agree) + (len(toks) <= self.prefer_words) + 0.5 * (len(fpos) > 0)
            if best is None or score > best[0]:
                best = (score, Template(toks[f], toks[o], " ".join(toks), polar[o]))
        return None if best is None else best[1]


@dataclass(frozen=True)
class TemplateTable:
    """User-supplied templates (e.g. from Sentires) looked up by ``(user, item)``.

    ``table`` maps ``(user, item)`` external IDs to a :class:`Template`; reviews without an entry
    get ``None`` and are dropped.
    """

    table: dict[tuple[str, str], Template]

    def extract(self, reviews: Sequence[RawReview]) -> list[Template | None]:
        return [self.table.get((r.user, r.item)) for r in reviews]


__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "UNK",
    "SPECIALS",
    "split_sentences",
    "tokenize",
    "stop_words",
    "opinion_lexicon",
    "Vocabulary",
    "Template",
    "RawReview",
    "TemplateExtractor",
    "HeuristicExtractor",
    "TemplateTable",
]
