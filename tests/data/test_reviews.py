"""Review data for PETER: restricted pickle reading, PETER's format, raw reviews, splits, encoding."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from attnrec.data.reviews import (
    encode_reviews,
    from_records,
    load_review_data,
    random_split,
    read_index_dir,
    read_peter,
    read_raw_reviews,
    read_templates,
    restricted_loads,
    write_peter,
)
from attnrec.data.schema import DataError
from attnrec.data.text import (
    HeuristicExtractor,
    RawReview,
    Template,
    TemplateTable,
    Vocabulary,
    split_sentences,
    stop_words,
    tokenize,
)

RECORDS = [
    {
        "user": "u1",
        "item": "i1",
        "rating": 5.0,
        "template": ("room", "clean", "the room was clean and quiet", 1),
    },
    {"user": "u2", "item": "i1", "rating": 2, "template": ("staff", "rude", "the staff was rude", -1)},
    {"user": "u1", "item": "i2", "rating": 4.0, "template": ("pool", "great", "great pool", 1)},
    {
        "user": "u3",
        "item": "i3",
        "rating": 3.0,
        "template": ("location", "good", "good location near the station", 1),
    },
]


class Evil:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("echo pwned",))


def test_restricted_unpickler_accepts_plain_data() -> None:
    data = [{"a": 1, "b": (1.5, "x", None, True)}, [1, 2]]
    for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
        assert restricted_loads(pickle.dumps(data, protocol=proto)) == data


@pytest.mark.parametrize(
    "value",
    [
        Evil(),
        {1, 2},
        frozenset({1}),
        b"bytes",
        bytearray(b"x"),
        np.float64(1.0),
        np.arange(3),
        complex(1, 2),
        [{"nested": {3}}],
    ],
)
def test_restricted_unpickler_refuses_everything_else(value: object) -> None:
    for proto in (2, 4):
        with pytest.raises(DataError, match="refus"):
            restricted_loads(pickle.dumps(value, protocol=proto))


def test_restricted_unpickler_rejects_garbage() -> None:
    with pytest.raises(DataError, match="pickle"):
        restricted_loads(b"not a pickle at all")


def test_peter_format_round_trip(tmp_path: Path) -> None:
    data = from_records(RECORDS)
    split = random_split(data, seed=0)
    write_peter(data, tmp_path, [split, random_split(data, seed=1)])
    back = read_peter(tmp_path)
    assert back.records() == data.records()
    assert back.users.to_list() == ["u1", "u2", "u3"] and back.items.get("i1") == 1
    assert back.rating_range == (2.0, 5.0)
    got = read_index_dir(tmp_path / "1", len(back))
    np.testing.assert_array_equal(got.train, split.train)
    np.testing.assert_array_equal(got.test, split.test)
    assert load_review_data(tmp_path).records() == data.records()


def test_read_peter_refuses_malicious_pickle(tmp_path: Path) -> None:
    (tmp_path / "reviews.pickle").write_bytes(pickle.dumps([RECORDS[0], Evil()]))
    with pytest.raises(DataError, match="refusing"):
        read_peter(tmp_path)


def test_read_peter_reports_missing_fields(tmp_path: Path) -> None:
    (tmp_path / "reviews.pickle").write_bytes(pickle.dumps([{"user": "u", "item": "i"}]))
    with pytest.raises(DataError, match="lacks"):
        read_peter(tmp_path / "reviews.pickle")


def test_review_data_is_immutable() -> None:
    data = from_records(RECORDS)
    with pytest.raises(ValueError, match="read-only"):
        data.rating[0] = 1.0
    with pytest.raises(AttributeError, match="cannot assign to field 'user'"):
        data.user = np.zeros(4)  # type: ignore[misc]


def _many_records(
    n_users: int = 30, n_items: int = 20, n: int = 400, seed: int = 0
) -> list[dict[str, object]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "user": f"u{rng.integers(n_users)}",
            "item": f"i{rng.integers(n_items)}",
            "rating": float(rng.integers(1, 6)),
            "template": ("sound", "good", "good sound", 1),
        }
        for _ in range(n)
    ]


def test_random_split_is_8_1_1_with_everyone_in_training() -> None:
    data = from_records(_many_records())
    s = random_split(data, seed=3)
    parts = np.concatenate([s.train, s.valid, s.test])
    assert sorted(parts.tolist()) == list(range(len(data)))
    assert len(s.train) == 320 and len(s.valid) == 40 and len(s.test) == 40
    assert set(data.user[s.train]) == set(range(data.n_users))
    assert set(data.item[s.train]) == set(range(1, data.n_items + 1))
    again = random_split(data, seed=3)
    np.testing.assert_array_equal(s.test, again.test)
    assert not np.array_equal(random_split(data, seed=4).test, s.test)


def test_text_helpers() -> None:
    assert split_sentences("Great strings.They last! Not cheap; ok\nnew line") == [
        "Great strings.",
        "They last!",
        "Not cheap;",
        "ok",
        "new line",
    ]
    assert tokenize("It's GREAT, isn't it? 9V-battery") == ["it's", "great", "isn't", "it", "9v", "battery"]
    assert {"the", "and", "not"} <= stop_words() and "guitar" not in stop_words()


def test_vocabulary_keeps_most_frequent_and_cuts_explanations() -> None:
    vocab = Vocabulary.build([["b", "a", "a", "c"], ["a", "b"]], max_size=2)
    assert vocab.words == ("<pad>", "<bos>", "<eos>", "<unk>", "a", "b")
    data = from_records(
        [
            {"user": "u", "item": "i", "rating": 5, "template": ("a", "x", " ".join(["a"] * 20), 1)},
            {"user": "u", "item": "j", "rating": 4, "template": ("c", "x", "the b c", 1)},
        ]
    )
    enc = encode_reviews(data, vocab, max_words=15)
    assert enc.text.shape == (2, 17)
    assert enc.text[0].tolist() == [1] + [4] * 15 + [2]  # cut to 15 words, then <eos>
    assert enc.text[1].tolist()[:6] == [1, 3, 5, 3, 2, 0]  # unknown words are <unk>
    assert enc.context[1].tolist()[:4] == [3, 5, 3, 0]
    assert enc.context_content[1].tolist()[:3] == [5, 3, 0]  # "the" (a stop word) removed
    assert enc.feature.tolist() == [4, 3]


def test_heuristic_extractor_picks_the_opinionated_feature_sentence() -> None:
    ex = HeuristicExtractor(features=frozenset({"strings", "tuner", "price"}))
    t = ex.choose(
        [
            tokenize(s)
            for s in split_sentences(
                "I bought these last week. The strings sound great and bright. The price is not good."
            )
        ],
        5.0,
        ex.features,
    )
    assert t == Template("strings", "great", "the strings sound great and bright", 1)
    neg = ex.choose(
        [
            tokenize(s)
            for s in split_sentences("The strings sound great and bright. The price is not good at all.")
        ],
        1.0,
        ex.features,
    )
    assert neg is not None and neg.feature == "price" and neg.sentiment == -1
    assert ex.choose([["no", "feature", "here", "really"]], 5.0, ex.features) is None


def test_feature_discovery_finds_nouns() -> None:
    texts = [
        "the tuner is great",
        "this tuner works",
        "a great tuner",
        "the strap is nice",
        "my strap broke",
        "i really like it",
        "it really works",
    ] * 4
    feats = HeuristicExtractor(min_count=4).discover_features(tokenize(t) for t in texts)
    assert {"tuner", "strap"} <= feats and "really" not in feats and "works" not in feats


def _write_amazon(path: Path) -> None:
    rows = [
        {
            "reviewerID": "A",
            "asin": "P1",
            "overall": 5.0,
            "reviewText": "Love it. The tone is great and warm.",
        },
        {"reviewerID": "B", "asin": "P1", "overall": 2.0, "reviewText": "The tone is bad and thin. Meh."},
        {"reviewerID": "A", "asin": "P2", "overall": 4.0, "reviewText": "No opinion words about any feature"},
    ]
    with gzip.open(path, "wt") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")


def test_raw_amazon_yelp_and_csv_reviews(tmp_path: Path) -> None:
    ex = HeuristicExtractor(features=frozenset({"tone"}))
    _write_amazon(tmp_path / "a.json.gz")
    data = read_raw_reviews(tmp_path / "a.json.gz", extractor=ex)
    assert len(data) == 2 and data.sentence == ("the tone is great and warm", "the tone is bad and thin")
    assert data.sentiment.tolist() == [1, -1] and data.rating_range == (2.0, 5.0)
    (tmp_path / "y.json").write_text(
        json.dumps({"user_id": "u", "business_id": "b", "stars": 4, "text": "The tone was great here."})
        + "\n"
    )
    assert load_review_data(tmp_path / "y.json", extractor=ex).feature == ("tone",)
    (tmp_path / "r.csv").write_text('user,item,rating,text\nu,i,5,"Nice tone, really nice tone."\n')
    assert read_raw_reviews(tmp_path / "r.csv", extractor=ex).adjective == ("nice",)
    (tmp_path / "bad.csv").write_text("who,what\n1,2\n")
    with pytest.raises(DataError, match="lacks column"):
        read_raw_reviews(tmp_path / "bad.csv")


def test_user_templates_plug_in(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text(
        json.dumps(
            {
                "user": "A",
                "item": "P1",
                "feature": "tone",
                "adjective": "warm",
                "sentence": "warm tone",
                "sentiment": 1,
            }
        )
        + "\n"
    )
    _write_amazon(tmp_path / "a.json.gz")
    data = read_raw_reviews(
        tmp_path / "a.json.gz", extractor=TemplateTable(read_templates(tmp_path / "t.jsonl"))
    )
    assert data.records() == [
        {"user": "A", "item": "P1", "rating": 5.0, "template": ("tone", "warm", "warm tone", 1)}
    ]
    assert TemplateTable({}).extract([RawReview("u", "i", 1.0, "x")]) == [None]
