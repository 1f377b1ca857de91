"""Review data for explainable recommendation (PETER): records, readers, splits and encoding.

A record is PETER's: ``user``, ``item``, ``rating`` and ``template = (feature, adjective,
sentence, sentiment)``. :class:`ReviewData` holds them column-wise, immutable, with explicit ID
maps (users ``0..n_users-1``, items ``1..n_items`` as everywhere in attnrec).

Sources
-------
* PETER's published format (:func:`read_peter`): ``reviews.pickle`` (a list of dicts) and the
  ``1/ .. 5/`` folders holding ``train.index``/``validation.index``/``test.index`` (record
  numbers separated by white space). The pickle is read by a restricted unpickler that builds
  only ``dict, list, tuple, str, int, float, bool, None`` and refuses everything else (a
  pickle naming any class or function is rejected before it runs).
* Raw reviews (:func:`read_raw_reviews`): Amazon JSON lines (``reviewerID, asin, overall,
  reviewText``), Yelp JSON lines (``user_id, business_id, stars, text``) or CSV with
  ``user, item, rating, text`` columns; templates come from a :class:`TemplateExtractor`
  (default :class:`~attnrec.data.text.HeuristicExtractor`).

:func:`random_split` is PETER's 8:1:1 split with every user and item kept in training.
"""

from __future__ import annotations

import csv
import io
import json
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnrec.data.files import content_sha256, iter_lines, open_text
from attnrec.data.schema import DataError, DataSource, IdMap, UserItemLog
from attnrec.data.text import (
    HeuristicExtractor,
    RawReview,
    Template,
    TemplateExtractor,
    Vocabulary,
    stop_words,
)

_PLAIN = (dict, list, tuple, str, int, float, bool, type(None))


@dataclass(frozen=True)
class ReviewData(UserItemLog):
    """Explanation records, column-wise and read-only.

    ``user`` (``0..n_users-1``) and ``item`` (``1..n_items``) are internal indices into
    ``users``/``items``; ``sentence`` holds space-joined lower-case tokens; ``sentiment`` is +1/-1.
    ``rating_range`` is the (min, max) rating of the source, used to clip predictions.
    """

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    feature: tuple[str, ...]
    adjective: tuple[str, ...]
    sentence: tuple[str, ...]
    sentiment: np.ndarray
    users: IdMap
    items: IdMap
    rating_range: tuple[float, float] = (1.0, 5.0)
    source: DataSource = DataSource("unnamed")

    def __post_init__(self) -> None:
        n = len(self.user)
        cols = (self.item, self.rating, self.feature, self.adjective, self.sentence, self.sentiment)
        if any(len(c) != n for c in cols):
            raise DataError("ReviewData: columns differ in length")
        for name, dtype in (
            ("user", np.int64),
            ("item", np.int64),
            ("rating", np.float32),
            ("sentiment", np.int8),
        ):
            arr = np.array(getattr(self, name), dtype=dtype)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    def take(self, rows: np.ndarray | Sequence[int]) -> ReviewData:
        """The records ``rows`` (same ID maps)."""
        r = np.asarray(rows, dtype=np.int64)
        pick = [int(i) for i in r]
        return ReviewData(
            self.user[r],
            self.item[r],
            self.rating[r],
            tuple(self.feature[i] for i in pick),
            tuple(self.adjective[i] for i in pick),
            tuple(self.sentence[i] for i in pick),
            self.sentiment[r],
            self.users,
            self.items,
            self.rating_range,
            self.source,
        )

    def tokens(self, row: int) -> list[str]:
        return self.sentence[row].split()

    def features(self) -> frozenset[str]:
        return frozenset(self.feature)

    def records(self) -> list[dict[str, Any]]:
        """PETER-style plain records with external IDs."""
        us, it = self.users.to_external(self.user), self.items.to_external(self.item)
        return [
            {
                "user": us[i],
                "item": it[i],
                "rating": float(self.rating[i]),
                "template": (self.feature[i], self.adjective[i], self.sentence[i], int(self.sentiment[i])),
            }
            for i in range(len(self))
        ]


def from_records(
    records: Sequence[dict[str, Any]],
    source: DataSource | None = None,
    rating_range: tuple[float, float] | None = None,
) -> ReviewData:
    """:class:`ReviewData` from PETER-style dicts (``user, item, rating, template``)."""
    if not records:
        raise DataError("no review records")
    users = IdMap.from_values(str(r["user"]) for r in records)
    items = IdMap.from_values((str(r["item"]) for r in records), offset=1)
    feat, adj, sent, pol = [], [], [], []
    for n, r in enumerate(records):
        try:
            f, a, s, p = r["template"]
        except (KeyError, TypeError, ValueError):
            raise DataError(
                f"record {n}: 'template' must be (feature, adjective, sentence, sentiment)"
            ) from None
        feat.append(str(f))
        adj.append(str(a))
        sent.append(" ".join(str(s).split()))
        pol.append(1 if float(p) >= 0 else -1)
    ratings = np.array([float(r["rating"]) for r in records], dtype=np.float32)
    rr = rating_range or (float(ratings.min()), float(ratings.max()))
    return ReviewData(
        users.to_internal([str(r["user"]) for r in records]),
        items.to_internal([str(r["item"]) for r in records]),
        ratings,
        tuple(feat),
        tuple(adj),
        tuple(sent),
        np.array(pol),
        users,
        items,
        rr,
        source or DataSource("records"),
    )


# -- PETER's published format ---------------------------------------------------------------------
class _PlainUnpickler(pickle.Unpickler):
    """Builds only plain built-in values; any class, function or module reference is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise DataError(
            f"refusing to unpickle {module}.{name}: only plain dict/list/tuple/str/int/float/bool/None "
            "data are accepted"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise DataError("refusing to unpickle a persistent reference")


def restricted_loads(data: bytes) -> Any:
    """Unpickle ``data`` accepting only ``dict, list, tuple, str, int, float, bool, None``."""
    try:
        obj = _PlainUnpickler(io.BytesIO(data)).load()
    except DataError:
        raise
    except Exception as e:  # malformed pickles raise many kinds of errors
        raise DataError(f"not a readable pickle ({type(e).__name__}: {e})") from e
    stack = [obj]
    while stack:  # sets, bytes, bytearrays etc. are built by opcodes without find_class: check types
        x = stack.pop()
        if type(x) not in _PLAIN:
            raise DataError(
                f"refusing unpickled value of type {type(x).__name__}: only plain data are accepted"
            )
        if isinstance(x, dict):
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, list | tuple):
            stack.extend(x)
    return obj


def read_peter(path: str | Path) -> ReviewData:
    """PETER's ``reviews.pickle`` (or a directory holding it), read with :func:`restricted_loads`."""
    p = Path(path)
    if p.is_dir():
        p = p / "reviews.pickle"
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{p}: file not found") from None
    try:
        records = restricted_loads(raw)
    except DataError as e:
        raise DataError(f"{p}: {e}") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise DataError(f"{p}: expected a list of dicts")
    for n, r in enumerate(records):
        missing = {"user", "item", "rating", "template"} - set(r)
        if missing:
            raise DataError(f"{p}: record {n} lacks {sorted(missing)}")
    src = DataSource(p.parent.name or p.name, str(p), "peter", content_sha256(p))
    return from_records(records, src)


def write_peter(data: ReviewData, directory: str | Path, splits: Sequence[ReviewSplit] = ()) -> Path:
    """Write ``reviews.pickle`` (plain data, protocol 4) and ``1/ 2/ ...`` index folders."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "reviews.pickle").write_bytes(pickle.dumps(data.records(), protocol=4))
    for k, s in enumerate(splits, start=1):
        write_index_dir(s, d / str(k))
    return d


# -- splits -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReviewSplit:
    """Record numbers of the train/validation/test parts."""

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    name: str = "random-8:1:1"


def random_split(
    data: ReviewData, seed: int, ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
) -> ReviewSplit:
    """PETER's split: random 8:1:1, except that every user and item keeps a record in training.

    For each user and each item, one of its records (the first in a seeded permutation) is
    forced into training; the remaining records fill the three parts in that permutation order.
    """
    n = len(data)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    forced = np.zeros(n, dtype=bool)
    for col in (data.user, data.item):
        _, first = np.unique(col[perm], return_index=True)
        forced[perm[first]] = True
    rest = perm[~forced[perm]]
    n_train = max(0, round(ratios[0] * n) - int(forced.sum()))
    n_valid = round(ratios[1] * n)
    train = np.concatenate([perm[forced[perm]], rest[:n_train]])
    return ReviewSplit(
        np.sort(train),
        np.sort(rest[n_train : n_train + n_valid]),
        np.sort(rest[n_train + n_valid :]),
        f"random-8:1:1 seed {seed}",
    )


def _read_index(path: Path, n: int) -> np.ndarray:
    try:
        idx = np.array([int(t) for t in path.read_text().split()], dtype=np.int64)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except ValueError as e:
        raise DataError(f"{path}: expected record numbers separated by white space ({e})") from None
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        raise DataError(f"{path}: record numbers must lie in 0..{n - 1}")
    return idx


def read_index_dir(directory: str | Path, n_records: int) -> ReviewSplit:
    """One of PETER's ``1..5/`` folders of ``train.index``, ``validation.index``, ``test.index``."""
    d = Path(directory)
    train, valid, test = (_read_index(d / f"{s}.index", n_records) for s in ("train", "validation", "test"))
    return ReviewSplit(train, valid, test, name=f"index {d.name}")


def write_index_dir(split: ReviewSplit, directory: str | Path) -> None:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for name, idx in (("train", split.train), ("validation", split.valid), ("test", split.test)):
        (d / f"{name}.index").write_text(" ".join(str(int(i)) for i in idx) + "\n")


# -- raw reviews ------------------------------------------------------------------------------------
_JSON_FIELDS = {
    "amazon": ("reviewerID", "asin", "overall", "reviewText"),
    "yelp": ("user_id", "business_id", "stars", "text"),
}


def iter_raw_reviews(
    path: str | Path,
    fmt: str = "auto",
    columns: tuple[str, str, str, str] = ("user", "item", "rating", "text"),
) -> Iterator[RawReview]:
    """Reviews of an Amazon/Yelp JSON-lines file or a CSV file (``fmt``: auto, amazon, yelp, csv)."""
    p = Path(path)
    if fmt == "auto":
        fmt = "csv" if p.name.lower().removesuffix(".gz").endswith(".csv") else "json"
    if fmt == "csv":
        with open_text(p) as fh:
            reader = csv.DictReader(fh)
            missing = set(columns) - set(reader.fieldnames or [])
            if missing:
                raise DataError(f"{p}: CSV lacks column(s) {sorted(missing)}; has {reader.fieldnames}")
            for n, row in enumerate(reader, start=2):
                yield _raw(p, n, row, columns)
        return
    fields: tuple[str, str, str, str] | None = _JSON_FIELDS.get(fmt)
    if fmt not in ("json", "amazon", "yelp"):
        raise DataError(f"unknown review format {fmt!r}; use auto, amazon, yelp or csv")
    for n, line in iter_lines(p):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{p}:{n}: not valid JSON ({e.msg})") from None
        if fields is None:
            fields = next((f for f in _JSON_FIELDS.values() if f[0] in row and f[1] in row), None)
            if fields is None:
                raise DataError(
                    f"{p}:{n}: neither Amazon (reviewerID/asin) nor Yelp (user_id/business_id) JSON"
                )
        yield _raw(p, n, row, fields)


def _raw(p: Path, n: int, row: dict[str, Any], cols: tuple[str, str, str, str]) -> RawReview:
    try:
        return RawReview(
            str(row[cols[0]]), str(row[cols[1]]), float(row[cols[2]]), str(row.get(cols[3]) or "")
        )
    except KeyError as e:
        raise DataError(f"{p}:{n}: missing field {e}") from None
    except (TypeError, ValueError):
        raise DataError(f"{p}:{n}: rating {row.get(cols[2])!r} is not a number") from None


def build_review_data(
    reviews: Sequence[RawReview], extractor: TemplateExtractor | None = None, source: DataSource | None = None
) -> ReviewData:
    """Records of the reviews for which ``extractor`` finds a template (others are dropped)."""
    templates = (extractor or HeuristicExtractor()).extract(reviews)
    records = [
        {
            "user": r.user,
            "item": r.item,
            "rating": r.rating,
            "template": (t.feature, t.adjective, t.sentence, t.sentiment),
        }
        for r, t in zip(reviews, templates, strict=True)
        if t is not None
    ]
    if not records:
        raise DataError("no review yielded an explanation template")
    ratings = [r.rating for r in reviews]
    return from_records(records, source, (min(ratings), max(ratings)))


def read_raw_reviews(
    path: str | Path,
    fmt: str = "auto",
    extractor: TemplateExtractor | None = None,
    columns: tuple[str, str, str, str] = ("user", "item", "rating", "text"),
) -> ReviewData:
    """Explanation records from raw reviews (Amazon/Yelp JSON lines or CSV); see :mod:`attnrec.data.text`."""
    reviews = list(iter_raw_reviews(path, fmt, columns))
    if not reviews:
        raise DataError(f"{path}: no reviews")
    src = DataSource(Path(path).name, str(path), f"reviews-{fmt}", content_sha256(path))
    return build_review_data(reviews, extractor, src)


def load_review_data(
    path: str | Path, fmt: str = "auto", extractor: TemplateExtractor | None = None
) -> ReviewData:
    """PETER's format (a directory with ``reviews.pickle`` or a ``.pickle`` file) or raw reviews."""
    p = Path(path)
    if fmt == "peter" or (fmt == "auto" and (p.suffix == ".pickle" or (p / "reviews.pickle").exists())):
        return read_peter(p)
    return read_raw_reviews(p, fmt, extractor)


def read_templates(path: str | Path) -> dict[tuple[str, str], Template]:
    """User-supplied templates as JSON lines ``{user, item, feature, adjective, sentence, sentiment}``."""
    out: dict[tuple[str, str], Template] = {}
    for n, line in iter_lines(path):
        try:
            r = json.loads(line)
            out[(str(r["user"]), str(r["item"]))] = Template(
                str(r["feature"]), str(r["adjective"]), str(r["sentence"]), int(r["sentiment"])
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise DataError(f"{path}:{n}: bad template line ({e})") from None
    return out


# -- encoding for the model -------------------------------------------------------------------------
@dataclass(frozen=True)
class EncodedReviews:
    """Index arrays for PETER: ``text`` is ``<bos> w1..wn <eos> <pad>..`` of width ``max_words + 2``;
    ``context``/``context_content`` are the words (all / stop words removed), pad-filled."""

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    feature: np.ndarray
    text: np.ndarray
    context: np.ndarray
    context_content: np.ndarray

    def __len__(self) -> int:
        return len(self.user)


def encode_reviews(data: ReviewData, vocab: Vocabulary, max_words: int = 15) -> EncodedReviews:
    """Explanations cut to ``max_words`` words, as PETER's ``sentence_format``."""
    n, stop = len(data), stop_words()
    text = np.zeros((n, max_words + 2), dtype=np.int64)
    ctx = np.zeros((n, max_words), dtype=np.int64)
    content = np.zeros((n, max_words), dtype=np.int64)
    for i in range(n):
        words = data.tokens(i)[:max_words]
        ids = vocab.encode(words)
        text[i, : len(ids) + 2] = [vocab.bos, *ids, vocab.eos]
        ctx[i, : len(ids)] = ids
        kept = [j for j, w in zip(ids, words, strict=True) if w not in stop]
        content[i, : len(kept)] = kept
    feat = np.array([vocab.index(f) for f in data.feature], dtype=np.int64)
    return EncodedReviews(
        np.asarray(data.user),
        np.asarray(data.item),
        np.asarray(data.rating, dtype=np.float32),
        feat,
        text,
        ctx,
        content,
    )


__all__ = [
    "ReviewData",
    "ReviewSplit",
    "EncodedReviews",
    "from_records",
    "restricted_loads",
    "read_peter",
    "write_peter",
    "random_split",
    "read_index_dir",
    "write_index_dir",
    "iter_raw_reviews",
    "build_review_data",
    "read_raw_reviews",
    "load_review_data",
    "read_templates",
    "encode_reviews",
]
