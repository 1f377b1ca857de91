"""Columns of an interaction table: which column plays which role.

Shared by the table readers, the streaming Parquet reader and DataFrames
(:mod:`attnrec.data.frames`), so all accept the same column names; the values of each role are
converted by :mod:`attnrec.data.boundary`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from attnrec.data.schema import DataError
from attnrec.data.signals import signals

#: The ID roles of an interaction table and the column names recognised for each when not mapped;
#: the other roles are the declared signals (:mod:`attnrec.data.signals`), with their aliases.
ID_ALIASES: dict[str, tuple[str, ...]] = {
    "user": (
        "user",
        "user_id",
        "userid",
        "uid",
        "reviewerid",
        "session",
        "session_id",
        "visitorid",
        "customer_id",
        "username",
    ),
    "item": (
        "item",
        "item_id",
        "itemid",
        "iid",
        "movieid",
        "movie_id",
        "asin",
        "aid",
        "product_id",
        "article_id",
        "productid",
    ),
}
#: Roles every interaction log must have.
REQUIRED_ROLES = ("user", "item")


def column_aliases() -> dict[str, tuple[str, ...]]:
    """Every role of an interaction table (the IDs, then each declared signal) and its column names."""
    return ID_ALIASES | {s.name: s.aliases for s in signals()}


def _only(labels: list[object], label: object, role: str, path: str | Path, *, exact: bool = False) -> object:
    """``label`` when no other column has its name (``exact``: the same label; else the same name in any
    case); a :class:`DataError` otherwise (the first of two ``item`` columns was read without a word)."""
    name = str(label).strip().lower()
    same = [c for c in labels if (c == label if exact else str(c).strip().lower() == name)]
    if len(same) > 1:
        raise DataError(
            f"{path}: {len(same)} columns are named {str(label)!r}; which is the {role}? "
            "Rename or drop the others"
        )
    return label


def resolve_columns(
    available: Sequence[object],
    columns: Mapping[str, str | int] | None,
    path: str | Path,
    map_hint: str = "columns={{'{role}': '<column name>'}}",
) -> dict[str, object]:
    """Map roles to actual column labels: explicit ``columns`` first, then the known aliases.

    A missing required role (user, item) or an explicitly mapped column that does not exist is
    a :class:`DataError` naming the column and the available ones; ``map_hint`` (formatted with
    the role) says how the caller maps a column.
    """
    labels = list(available)
    lower = {str(c).strip().lower(): c for c in labels}
    out: dict[str, object] = {}
    columns = dict(columns or {})
    aliases_of = column_aliases()
    unknown = set(columns) - set(aliases_of)
    if unknown:
        raise DataError(f"unknown column roles {sorted(unknown)}; use {list(aliases_of)}")
    shown = ", ".join(repr(str(c)) for c in labels[:30])
    for role, aliases in aliases_of.items():
        want = columns.get(role)
        if want is not None:
            if isinstance(want, int) and not isinstance(want, bool):
                if not 0 <= want < len(labels):
                    raise DataError(
                        f"{path}: no column number {want} for {role}; there are {len(labels)} columns"
                    )
                out[role] = _only(labels, labels[want], role, path, exact=True)
            elif want in labels:
                out[role] = _only(labels, want, role, path, exact=True)
            elif str(want).strip().lower() in lower:
                out[role] = _only(labels, lower[str(want).strip().lower()], role, path)
            else:
                raise DataError(
                    f"{path}: missing column {want!r} (mapped as {role}); available columns: {shown}"
                )
            continue
        for alias in aliases:
            if alias in lower:
                out[role] = _only(labels, lower[alias], role, path)
                break
        else:
            if role in REQUIRED_ROLES:
                raise DataError(
                    f"{path}: missing column for {role} (looked for {', '.join(aliases[:6])}, ...); "
                    f"available columns: {shown}; map it with {map_hint.format(role=role)}"
                )
    return out
