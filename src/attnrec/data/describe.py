"""Summary statistics of an interaction log (``attnrec data``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from attnrec.data.features import FeatureTable
from attnrec.data.schema import IdMap, Interactions


def describe(data: Interactions) -> dict[str, Any]:
    """Size, density, sequence-length distribution, time span and provenance of a log.

    Returns a JSON-serialisable dict with keys ``name``, ``users``, ``items``, ``interactions``,
    ``density``, ``sequence_length`` (``min``, ``median``, ``mean``, ``p90``, ``max``),
    ``users_below_3`` (users that leave-one-out can only train on), ``item_popularity``
    (``max``, ``median``, ``top10pct_share``), ``repeat_share`` (interactions with an item the
    user had before), ``time`` (``start``, ``end`` as ISO dates and ``span_days``; ``None``
    without timestamps), ``ratings`` (``min``, ``max``, ``mean`` or ``None``), ``events``
    (counts per event type or ``None``), ``titles`` (number of items with a title),
    ``features`` (``item``/``user``: :func:`describe_features` or ``None``) and ``source``
    (``name``, ``path``, ``format``, ``sha256``).
    """
    n = len(data)
    lengths = data.sequences().lengths() if data.n_users else np.zeros(0, dtype=np.int64)
    pop = np.sort(data.item_popularity()[1:])[::-1]
    keys = data.user * (data.n_items + 1) + data.item
    out: dict[str, Any] = {
        "name": data.source.name,
        "users": int(data.n_users),
        "items": int(data.n_items),
        "interactions": int(n),
        "density": float(n / (data.n_users * data.n_items)) if data.n_users and data.n_items else 0.0,
        "sequence_length": _distribution(lengths),
        "users_below_3": int(np.sum(lengths < 3)),
        "item_popularity": {
            "max": int(pop[0]) if len(pop) else 0,
            "median": float(np.median(pop)) if len(pop) else 0.0,
            "top10pct_share": float(pop[: max(1, len(pop) // 10)].sum() / max(pop.sum(), 1)),
        },
        "repeat_share": float(1.0 - len(np.unique(keys)) / n) if n else 0.0,
        "time": None,
        "ratings": None,
        "events": None,
        "titles": len(data.item_titles or {}),
        "features": {
            "item": describe_features(data.item_features, data.items),
            "user": describe_features(data.user_features, data.users),
        },
        "source": {
            "name": data.source.name,
            "path": data.source.path,
            "format": data.source.format,
            "sha256": data.source.sha256,
        },
    }
    if data.timestamp is not None and n:
        t0, t1 = float(np.min(data.timestamp)), float(np.max(data.timestamp))
        out["time"] = {"start": _iso(t0), "end": _iso(t1), "span_days": round((t1 - t0) / 86_400.0, 2)}
    if data.rating is not None and n:
        out["ratings"] = {
            "min": float(np.min(data.rating)),
            "max": float(np.max(data.rating)),
            "mean": round(float(np.mean(data.rating)), 4),
        }
    if data.event is not None and n:
        kinds, counts = np.unique(data.event.astype(str), return_counts=True)
        out["events"] = {str(k): int(c) for k, c in zip(kinds, counts, strict=True)}
    return out


def describe_features(table: FeatureTable | None, ids: IdMap) -> dict[str, Any] | None:
    """A feature table seen from a log: ``source``, ``rows``, ``covered`` (log IDs with a row),
    ``extra_ids`` (rows for IDs the log lacks), and per field ``kind``, ``values`` (vocabulary
    size; ``None`` for numeric), ``coverage`` (share of the log's IDs with a non-empty value)
    and, for multi/text fields, ``per_row`` (mean values per covered ID)."""
    if table is None:
        return None
    aligned = table.align(ids, missing="empty", max_values=1 << 16)
    rows = slice(ids.offset, None)  # the log's IDs, without the padding row
    n = max(len(ids), 1)
    fields: dict[str, Any] = {}
    for name, kind in aligned.kinds.items():
        if name in aligned.numeric:
            filled = aligned.present[name][rows]
            fields[name] = {"kind": kind, "values": None, "coverage": float(filled.sum() / n)}
        elif name in aligned.categorical:
            filled = aligned.categorical[name][rows] > 0
            fields[name] = {
                "kind": kind,
                "values": aligned.vocab_sizes[name],
                "coverage": float(filled.sum() / n),
            }
        else:
            counts = (aligned.multi[name][rows] > 0).sum(axis=1)
            fields[name] = {
                "kind": kind,
                "values": aligned.vocab_sizes[name],
                "coverage": float((counts > 0).sum() / n),
                "per_row": round(float(counts[counts > 0].mean()) if (counts > 0).any() else 0.0, 2),
            }
    return {
        "source": table.source,
        "rows": len(table),
        "covered": len(ids) - len(aligned.missing_ids),
        "extra_ids": len(aligned.extra_ids),
        "fields": fields,
    }


def _distribution(lengths: np.ndarray) -> dict[str, float]:
    if len(lengths) == 0:
        return {"min": 0, "median": 0.0, "mean": 0.0, "p90": 0.0, "max": 0}
    return {
        "min": int(lengths.min()),
        "median": float(np.median(lengths)),
        "mean": round(float(lengths.mean()), 2),
        "p90": float(np.percentile(lengths, 90)),
        "max": int(lengths.max()),
    }


def _iso(t: float) -> str:
    """Unix seconds as a UTC ISO date-time; other scales (not plausible dates) as the number."""
    if -62_135_596_800 <= t <= 253_402_300_799:  # years 1..9999
        return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{t:g}"


def _feature_lines(f: dict[str, Any] | None, role: str, plural: str, n: int) -> list[str]:
    if f is None:
        return []
    lines = [
        f"{role} features  {f['covered']:,} of {n:,} {plural} have a row ({f['extra_ids']:,} rows for "
        f"{plural} not in the log) from {f['source']}"
    ]
    for name, info in f["fields"].items():
        values = "" if info["values"] is None else f", {info['values']:,} values"
        per_row = f", {info['per_row']:g} per {role}" if "per_row" in info else ""
        lines.append(f"  {name:<13}{info['kind']}{values}, {info['coverage']:.1%} of {plural}{per_row}")
    return lines


def format_description(desc: dict[str, Any]) -> str:
    """A human-readable multi-line rendering of :func:`describe`'s dict."""
    s = desc["sequence_length"]
    pop = desc["item_popularity"]
    lines = [
        f"dataset        {desc['name']}",
        f"users          {desc['users']:,}",
        f"items          {desc['items']:,}",
        f"interactions   {desc['interactions']:,}",
        f"density        {desc['density']:.4%}",
        f"per user       min {s['min']}  median {s['median']:g}  mean {s['mean']:g}  p90 {s['p90']:g}  max "
        f"{s['max']}",
        f"item counts    max {pop['max']:,}  median {pop['median']:g}  top 10% of items hold "
        f"{pop['top10pct_share']:.1%} of interactions",
    ]
    if desc["users_below_3"]:
        lines.append(
            f"short users    {desc['users_below_3']:,} users have < 3 interactions "
            "(leave-one-out uses them for training only)"
        )
    if desc["repeat_share"]:
        lines.append(
            f"repeats        {desc['repeat_share']:.2%} of interactions repeat an item of the same user"
        )
    if desc["time"]:
        t = desc["time"]
        lines.append(f"time span      {t['start']} .. {t['end']} ({t['span_days']:g} days)")
    else:
        lines.append("time span      n/a (no timestamps; file order is the chronology)")
    if desc["ratings"]:
        r = desc["ratings"]
        lines.append(f"ratings        {r['min']:g}..{r['max']:g}, mean {r['mean']:g}")
    if desc["events"]:
        lines.append("events         " + ", ".join(f"{k} {v:,}" for k, v in desc["events"].items()))
    lines.append(f"titles         {desc['titles']:,} items" if desc["titles"] else "titles         none")
    for role, plural in (("item", "items"), ("user", "users")):
        lines += _feature_lines(desc.get("features", {}).get(role), role, plural, desc[plural])
    src = desc["source"]
    lines.append(f"source         {src['path'] or src['name']} ({src['format'] or 'n/a'})")
    lines.append(f"sha256         {src['sha256'] or 'n/a'}")
    return "\n".join(lines)
