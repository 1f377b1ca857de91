"""The built-in demo dataset: a deterministic generator of realistic sequential behaviour.

MovieLens and Amazon data may not be redistributed, so attnrec ships a generator instead of a
file. It needs no network and no real data, and the same arguments always give the same log.

The world it simulates
----------------------
* Items belong to **genres** and, inside a genre, to **series** (a film and its sequels, a
  season of episodes): an ordered run of 1..8 parts. Series popularity is Zipf-like, and later
  parts are less popular than earlier ones, so item popularity has a long tail.
* Every series has a **follow-up** series in the same genre ("people who finished X start Y").
* A user has a **taste** over genres (a sparse Dirichlet draw, biased to popular genres) that
  **drifts**: now and then it moves towards a fresh draw, so recent behaviour says more about
  the next item than old behaviour.
* Next item, given the current one: continue the series (the next part) with probability
  ``p_series``; when a series is finished, start its follow-up with probability ``p_follow``;
  otherwise stay in the genre with probability ``p_genre``, else jump to a genre drawn from the
  (drifting) taste. Items within a genre are drawn by popularity. Nobody consumes an item twice.
* Sequence lengths are log-normal (at least ``min_length``), timestamps advance in sessions
  (minutes apart inside a session, days between sessions) from a user-specific start date, and
  ratings (1-5) are higher for the user's favourite genres.

Most of the signal is in item-to-item transitions, which a sequential model learns and a
popularity ranking cannot (``tests/data/test_demo.py`` checks that a first-order transition
count model beats popularity by a wide margin under leave-one-out full ranking).
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from dataclasses import astuple, dataclass, fields, replace
from itertools import accumulate
from typing import Any

import numpy as np

from attnrec.data.build import from_columns
from attnrec.data.schema import DataError, DataSource, Interactions

GENRES = (
    "Sci-Fi",
    "Drama",
    "Comedy",
    "Thriller",
    "Documentary",
    "Animation",
    "Romance",
    "Horror",
    "Fantasy",
    "Mystery",
    "Crime",
    "Adventure",
    "Western",
    "Musical",
    "War",
    "Family",
    "Noir",
    "Sports",
    "History",
    "Anime",
    "Superhero",
    "Biography",
    "Satire",
    "Cyberpunk",
)

_START = 1_577_836_800  # 2020-01-01T00:00:00Z
_SPAN = 3 * 365 * 86_400  # users start within three years


@dataclass(frozen=True)
class DemoKnobs:
    """The knobs of the simulated world (see the module docstring), with the demo's defaults.

    Attributes
    ----------
    n_genres : int
        Number of latent genres (at most ``len(GENRES)``).
    mean_length, min_length, max_length : float, int, int
        Sequence lengths are log-normal with about this mean, clipped to the bounds (and to half
        the catalogue).
    p_series, p_follow, p_resume, p_genre, p_drift : float
        Probabilities of continuing a series, starting the follow-up of a finished series,
        resuming the most recently abandoned series, staying in the current genre, and of a taste
        drift at each step.
    zipf : float
        Exponent of the Zipf-like series popularity (larger: a longer head).
    """

    n_genres: int = 16
    mean_length: float = 50.0
    min_length: int = 5
    max_length: int = 200
    p_series: float = 0.35
    p_follow: float = 0.25
    p_resume: float = 0.4
    p_genre: float = 0.4
    p_drift: float = 0.05
    zipf: float = 1.1

    def __post_init__(self) -> None:
        if not 1 <= self.n_genres <= len(GENRES):
            raise DataError(f"demo dataset: n_genres must be in 1..{len(GENRES)}")
        if self.min_length < 1 or self.max_length < self.min_length:
            raise DataError("demo dataset: need 1 <= min_length <= max_length")
        for f in fields(self):
            p = getattr(self, f.name)
            if f.name.startswith("p_") and not 0.0 <= p <= 1.0:
                raise DataError(f"demo dataset: {f.name} must be a probability, got {p}")


def make_demo(
    n_users: int = 2000,
    n_items: int = 500,
    seed: int = 0,
    *,
    min_rating: float | None = None,
    k_core: int = 0,
    **overrides: Any,
) -> Interactions:
    """Generate the demo interaction log (deterministic in all arguments).

    Parameters
    ----------
    n_users, n_items : int
        Size of the log. Every item gets a readable title such as ``"Sci-Fi #12, part 2"``.
    seed : int
        The only source of randomness; the same arguments give byte-identical data.
    min_rating, k_core : optional
        Passed to :func:`attnrec.data.build.from_columns`.
    **overrides
        Fields of :class:`DemoKnobs` to change from their defaults (``mean_length=15``, ``p_series=0.5``,
        ...).

    Returns
    -------
    Interactions
        User IDs ``"1".."n_users"``, item IDs ``"1".."n_items"`` (shuffled with respect to the
        latent structure), unix-second timestamps, 1-5 ratings and item titles. The source is
        ``DataSource("demo", "builtin:demo?...", "demo", sha256)`` where the sha256 is of the
        generated content.
    """
    if n_users < 1 or n_items < 2:
        raise DataError("demo dataset: need n_users >= 1 and n_items >= 2")
    knobs = DemoKnobs(**overrides)

    rng = np.random.default_rng([seed, 7001])
    world = _World(n_items, knobs.n_genres, knobs.zipf, rng)
    max_length = min(knobs.max_length, max(n_items // 2, 1))  # nobody consumes most of the catalogue
    knobs = replace(knobs, max_length=max_length, min_length=min(knobs.min_length, max_length))

    # Log-normal lengths with the requested mean (sigma 0.8), then clipped.
    sigma = 0.8
    mu = math.log(max(knobs.mean_length - knobs.min_length, 1.0)) - sigma**2 / 2
    lengths = np.clip(
        knobs.min_length + np.round(rng.lognormal(mu, sigma, n_users)), knobs.min_length, knobs.max_length
    ).astype(np.int64)
    total = int(lengths.sum())
    user_col = np.repeat(np.arange(1, n_users + 1), lengths)
    item_col = np.empty(total, dtype=np.int64)
    time_col = np.empty(total, dtype=np.int64)
    rating_col = np.empty(total, dtype=np.float64)

    # Genre popularity prior: some genres are simply more watched.
    genre_prior = 1.0 / np.arange(1, knobs.n_genres + 1) ** 0.7
    genre_prior = rng.permutation(genre_prior / genre_prior.sum())
    pos = 0
    for u in range(n_users):
        urng = np.random.default_rng([seed, 7002, u])
        n = int(lengths[u])
        items, ratings = _user_sequence(world, urng, n, genre_prior, knobs)
        item_col[pos : pos + n] = items
        rating_col[pos : pos + n] = ratings
        time_col[pos : pos + n] = _timestamps(urng, n)
        pos += n

    # External IDs are a shuffle of 1..n_items so that ID order does not reveal the structure.
    ext_of = rng.permutation(n_items) + 1
    ext_items = ext_of[item_col]
    titles = {str(ext_of[i]): world.titles[i] for i in range(n_items)}
    sha = hashlib.sha256()
    for arr in (user_col.astype(np.int64), ext_items.astype(np.int64), time_col, rating_col):
        sha.update(np.ascontiguousarray(arr).tobytes())
    digest = hashlib.sha1(repr(astuple(knobs)).encode()).hexdigest()[:8]  # of the knobs as clipped above
    query = f"n_users={n_users}&n_items={n_items}&seed={seed}&knobs={digest}"
    source = DataSource("demo", f"builtin:demo?{query}", "demo", sha.hexdigest())
    return from_columns(
        user_col,
        ext_items,
        time_col,
        rating_col,
        source=source,
        item_titles=titles,
        min_rating=min_rating,
        k_core=k_core,
    )


class _World:
    """The latent catalogue: genres, series, popularity, follow-ups and titles."""

    def __init__(self, n_items: int, n_genres: int, zipf: float, rng: np.random.Generator) -> None:
        # Partition items 0..n_items-1 into series of 1..8 parts (mostly short).
        sizes: list[int] = []
        left = n_items
        while left > 0:
            s = min(int(rng.geometric(0.4)), 8, left)
            sizes.append(s)
            left -= s
        n_series = len(sizes)
        self.series_genre = rng.integers(0, n_genres, n_series)
        # Make sure every genre has at least one series when possible.
        self.series_genre[: min(n_genres, n_series)] = np.arange(min(n_genres, n_series))
        self.series_genre = rng.permutation(self.series_genre)
        series_pop = 1.0 / np.arange(1, n_series + 1) ** zipf
        series_pop = rng.permutation(series_pop)

        self.series_of = np.empty(n_items, dtype=np.int64)
        self.part_of = np.empty(n_items, dtype=np.int64)
        self.first_item = np.empty(n_series, dtype=np.int64)
        self.next_item = np.full(n_items, -1, dtype=np.int64)
        weight = np.empty(n_items, dtype=np.float64)
        start = 0
        for s, size in enumerate(sizes):
            self.first_item[s] = start
            for k in range(size):
                i = start + k
                self.series_of[i] = s
                self.part_of[i] = k
                weight[i] = series_pop[s] * 0.6**k  # sequels are watched less
                if k + 1 < size:
                    self.next_item[i] = i + 1
            start += size
        self.genre_of = self.series_genre[self.series_of]

        # Follow-up series: another series of the same genre (itself only if alone).
        self.follow_up = np.empty(n_series, dtype=np.int64)
        for s in range(n_series):
            same = np.flatnonzero(self.series_genre == self.series_genre[s])
            others = same[same != s]
            self.follow_up[s] = rng.choice(others) if len(others) else s

        # Per-genre popularity sampling tables (python lists: bisect is fast for scalars).
        self.genre_items: list[list[int]] = []
        self.genre_cdf: list[list[float]] = []
        for g in range(n_genres):
            members = np.flatnonzero(self.genre_of == g)
            w = weight[members]
            self.genre_items.append(members.tolist())
            self.genre_cdf.append(list(accumulate((w / w.sum()).tolist())) if len(members) else [])

        # Plain lists for the per-step loop (indexing numpy scalars is slow).
        self.next_list: list[int] = self.next_item.tolist()
        self.genre_list: list[int] = self.genre_of.tolist()
        self.follow_first_list: list[int] = self.first_item[self.follow_up[self.series_of]].tolist()

        # Titles: "<Genre> #<n>" numbered within the genre, with the part for multi-part series.
        counters = [0] * n_genres
        number = np.empty(n_series, dtype=np.int64)
        for s in range(n_series):
            g = int(self.series_genre[s])
            counters[g] += 1
            number[s] = counters[g]
        self.titles: list[str] = []
        for i in range(n_items):
            s = int(self.series_of[i])
            base = f"{GENRES[int(self.genre_of[i])]} #{number[s]}"
            self.titles.append(base if sizes[s] == 1 else f"{base}, part {int(self.part_of[i]) + 1}")


def _pick(cdf: list[float], r: float) -> int:
    return min(bisect_right(cdf, r * cdf[-1]), len(cdf) - 1)


def _user_sequence(
    world: _World,
    rng: np.random.Generator,
    n: int,
    genre_prior: np.ndarray,
    knobs: DemoKnobs,
) -> tuple[list[int], list[float]]:
    p_genre, p_drift = knobs.p_genre, knobs.p_drift
    n_genres = len(genre_prior)
    base_taste = rng.dirichlet(np.full(n_genres, 0.3)) * 0.8 + genre_prior * 0.2
    taste = base_taste
    taste_l = taste.tolist()
    next_l, genre_l = world.next_list, world.genre_list
    # Genres with no items can never be drawn.
    has_items = np.array([len(g) > 0 for g in world.genre_items], dtype=np.float64)
    taste_cdf = list(accumulate((taste * has_items).tolist()))
    uniforms = rng.random((n, 5)).tolist()
    seen: set[int] = set()
    out: list[int] = []
    ratings: list[float] = []
    noise = rng.normal(0.0, 0.8, n).tolist()
    pending: list[int] = []  # next parts of series left unfinished, most recent last
    cur = -1
    for t in range(n):
        r_move, r_drift, r_pick, r_genre, r_resume = uniforms[t]
        if r_drift < p_drift:  # taste drift: move most of the way to a fresh draw
            fresh = rng.dirichlet(np.full(n_genres, 0.3)) * 0.8 + genre_prior * 0.2
            taste = 0.3 * taste + 0.7 * fresh
            taste_cdf = list(accumulate((taste * has_items).tolist()))
            taste_l = taste.tolist()
        nxt = _series_step(world, cur, seen, pending, r_move, r_resume, knobs) if cur >= 0 else -1
        if nxt < 0:
            # Stay in the genre or jump by taste.
            g = genre_l[cur] if cur >= 0 and r_genre < p_genre else _pick(taste_cdf, r_genre)
            nxt = _genre_step(world, rng, seen, g, r_pick, taste_cdf)
        if cur >= 0:
            cont = next_l[cur]
            if cont >= 0 and nxt != cont and cont not in seen:
                pending.append(cont)  # this series is left unfinished for now
                del pending[:-3]
        seen.add(nxt)
        out.append(nxt)
        affinity = taste_l[genre_l[nxt]] * n_genres  # ~1 for an average genre
        ratings.append(float(min(5, max(1, round(3.2 + 0.6 * math.log(affinity + 1e-3) + noise[t])))))
        cur = nxt
    return out, ratings


def _series_step(
    world: _World,
    cur: int,
    seen: set[int],
    pending: list[int],
    r_move: float,
    r_resume: float,
    knobs: DemoKnobs,
) -> int:
    """After item ``cur``: its series' next part, the follow-up series' first part, or the most
    recently abandoned series; -1 when none is drawn (or it was seen). Uses no extra randomness."""
    nxt = -1
    cont = world.next_list[cur]
    if cont >= 0 and r_move < knobs.p_series and cont not in seen:
        nxt = cont
    elif cont < 0 and r_move < knobs.p_follow:
        first = world.follow_first_list[cur]
        if first not in seen:
            nxt = first
    if nxt < 0 and pending and r_resume < knobs.p_resume:
        cand = pending.pop()  # resume the most recently abandoned series
        if cand not in seen:
            nxt = cand
    return nxt


def _genre_step(
    world: _World, rng: np.random.Generator, seen: set[int], g: int, r_pick: float, taste_cdf: list[float]
) -> int:
    """An unseen item of genre ``g`` by popularity: a few tries (the first with ``r_pick``), then
    the taste picks another genre, then any unseen item."""
    for attempt in range(8):
        r = r_pick if attempt == 0 else float(rng.random())
        if attempt == 4:  # the genre may be exhausted: fall back to the taste
            g = _pick(taste_cdf, float(rng.random()))
        cand = world.genre_items[g][_pick(world.genre_cdf[g], r)]
        if cand not in seen:
            return cand
    return _first_unseen(world, rng, seen)


def _first_unseen(world: _World, rng: np.random.Generator, seen: set[int]) -> int:
    n_items = len(world.genre_of)
    start = int(rng.integers(0, n_items))
    for k in range(n_items):
        i = (start + k) % n_items
        if i not in seen:
            return i
    raise AssertionError("sequence longer than the catalogue")  # lengths are clipped to n_items


def _timestamps(rng: np.random.Generator, n: int) -> np.ndarray:
    """Sessions: minutes apart inside a session, about three days between sessions."""
    start = _START + int(rng.integers(0, _SPAN))
    new_session = rng.random(n) < 0.25
    gaps = np.where(new_session, rng.exponential(3 * 86_400, n), rng.exponential(40 * 60, n))
    gaps[0] = 0.0
    return start + np.cumsum(np.maximum(gaps, 1.0)).astype(np.int64)
