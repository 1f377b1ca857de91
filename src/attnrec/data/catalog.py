"""The catalogue of public datasets attnrec knows by name: where each comes from, how it is read
and preprocessed, and which of the papers' preprocessed files may stand in for it.

Declarations only; :mod:`attnrec.data.named` finds, downloads and loads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Environment variable naming a folder searched for named datasets (before ``~/.cache/attnrec``).
ENV_DATA = "ATTNREC_DATA"
#: Environment variable that, set to anything but ``0``, forbids downloads.
ENV_OFFLINE = "ATTNREC_OFFLINE"


@dataclass(frozen=True)
class NamedDataset:
    """A public dataset attnrec knows how to fetch and prepare.

    ``url``/``filename``/``sha256`` describe the official download (``sha256`` is ``None`` where
    we do not know the hash for certain; the download is then not verified). ``members`` are
    the files used from it (archive members are matched by base name); ``members[0]`` holds the
    interactions and is read with ``reader``; ``titles`` names the item-title file, if any.
    ``paper_files`` are the papers' preprocessed files accepted instead, with the sha256 of
    their (uncompressed) content when known.
    """

    name: str
    url: str
    sha256: str | None
    filename: str
    reader: str
    preprocessing: str
    members: tuple[str, ...]
    titles: str | None = None
    homepage: str = ""
    paper_files: tuple[str, ...] = ()
    paper_sha256: str | None = None
    paper_titles: tuple[str, str] | None = None  # (id mapping file, title file) for the paper file
    min_user_count: int = 0  # one-pass filters of the raw data (counted over the whole file)
    min_item_count: int = 0
    extra_downloads: tuple[tuple[str, str], ...] = field(default=())  # (url, filename), optional


DATASETS: dict[str, NamedDataset] = {
    d.name: d
    for d in (
        NamedDataset(
            name="ml-1m",
            url="https://files.grouplens.org/datasets/movielens/ml-1m.zip",
            sha256=None,  # not known for certain; GroupLens does not publish a sha256
            filename="ml-1m.zip",
            reader="movielens-dat",
            members=("ratings.dat", "movies.dat"),
            titles="movies.dat",
            homepage="https://grouplens.org/datasets/movielens/1m/",
            preprocessing=(
                "Every rating is an implicit interaction; items with fewer than 5 ratings are removed "
                "(3,416 items, all 6,040 users remain); per-user chronological order, ties in file order. "
                "This is the recipe of the SASRec/BERT4Rec file ml-1m.txt, which is preferred when present "
                "(the raw file gives the same users and items, but the order of equal timestamps may differ)."
            ),
            paper_files=("ml-1m.txt", "ml-1m.txt.gz"),
            paper_sha256="b725f3acb3986fe3130bffd1e77a74d182a1f51799567a236dbd60270f95b0a2",
            paper_titles=("sas_to_original_items.txt", "movies.dat"),
            min_item_count=5,
        ),
        NamedDataset(
            name="ml-20m",
            url="https://files.grouplens.org/datasets/movielens/ml-20m.zip",
            sha256=None,  # not known for certain; GroupLens publishes only an md5
            filename="ml-20m.zip",
            reader="ml20m",
            members=("ratings.csv", "movies.csv"),
            titles="movies.csv",
            homepage="https://grouplens.org/datasets/movielens/20m/",
            preprocessing=(
                "Every rating is an implicit interaction (as in BERT4Rec: 138,493 users, 26,744 items); "
                "per-user chronological order, ties in file order."
            ),
            paper_files=("ml-20m.txt", "ml-20m.txt.gz"),
        ),
        NamedDataset(
            name="ml-100k",
            url="https://files.grouplens.org/datasets/movielens/ml-100k.zip",
            sha256=None,  # not known for certain
            filename="ml-100k.zip",
            reader="ml100k",
            members=("u.data", "u.item"),
            titles="u.item",
            homepage="https://grouplens.org/datasets/movielens/100k/",
            preprocessing="Every rating is an implicit interaction; per-user chronological order, ties in file order.",
            paper_files=("ml-100k.txt", "ml-100k.txt.gz"),
        ),
        NamedDataset(
            name="beauty",
            # Amazon product data (2014, McAuley et al.), "ratings only" file of the Beauty category.
            url="http://snap.stanford.edu/data/amazon/productGraph/categoryFiles/ratings_Beauty.csv",
            sha256=None,  # not known for certain
            filename="ratings_Beauty.csv",
            reader="amazon-ratings-csv",
            members=("ratings_Beauty.csv",),
            homepage="http://jmcauley.ucsd.edu/data/amazon/",
            preprocessing=(
                "Every review/rating is an implicit interaction; users and items with fewer than 5 "
                "interactions (counted once over the whole file, as in the SASRec script) are removed; "
                "chronological per user. The BERT4Rec paper's beauty.txt (40,226 users, 54,542 items, "
                "353,962 interactions) was made with a different filter and is preferred when present."
            ),
            paper_files=("beauty.txt", "beauty.txt.gz", "Beauty.txt", "Beauty.txt.gz"),
            paper_sha256="f480b7a7403852342ffd8f9809bb30697dd669be31813d0e204b698fec86ef49",
            min_user_count=5,
            min_item_count=5,
        ),
        NamedDataset(
            name="steam",
            url="http://cseweb.ucsd.edu/~wckang/steam_reviews.json.gz",  # from the SASRec README
            sha256=None,  # not known for certain
            filename="steam_reviews.json.gz",
            reader="steam-json",
            members=("steam_reviews.json.gz",),
            titles="steam_games.json.gz",
            homepage="https://github.com/kang205/SASRec",
            preprocessing=(
                "Every review is an implicit interaction (user = username, item = product_id, time = "
                "review date, day resolution, ties in file order); users and items with fewer than 5 "
                "reviews (counted once over the whole file) are removed. Reading the 1.3 GB file takes "
                "minutes. A papers' steam.txt is preferred when present."
            ),
            paper_files=("steam.txt", "steam.txt.gz", "Steam.txt", "Steam.txt.gz"),
            min_user_count=5,
            min_item_count=5,
            extra_downloads=(("http://cseweb.ucsd.edu/~wckang/steam_games.json.gz", "steam_games.json.gz"),),
        ),
    )
}

_ALIASES: dict[str, str] = {
    "ml1m": "ml-1m", "movielens-1m": "ml-1m", "ml20m": "ml-20m", "movielens-20m": "ml-20m",
    "ml100k": "ml-100k", "movielens-100k": "ml-100k", "amazon-beauty": "beauty",
}  # fmt: skip


def list_datasets() -> list[str]:
    """Names accepted by :func:`~attnrec.data.datasets.load_dataset` besides file paths."""
    return ["demo", *DATASETS]


def canonical_name(spec: str) -> str:
    """``spec`` in lower case with aliases resolved (``ML1M`` -> ``ml-1m``)."""
    return _ALIASES.get(spec.lower(), spec.lower())
