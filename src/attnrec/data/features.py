"""Item and user feature tables: typed fields keyed by external IDs, aligned to a log's ID map.

A :class:`FeatureTable` holds one row per external ID (an item's genres, a user's age ...), so
filters and k-cores that re-index a log never misalign it; :meth:`FeatureTable.align` turns it
into arrays indexed by a log's internal indices (:class:`AlignedFeatures`). Field kinds:

* ``categorical``: one value per row (gender, brand, category); codes ``1..V``, ``0`` = missing.
* ``multi``: a set of values per row (genres, attribute ids, tags); codes as for categorical,
  aligned as a left-aligned ``(rows, max_values)`` matrix padded with ``0``.
* ``numeric``: a float per row (age, year), stored raw; missing values are NaN, aligned as
  float32 with a present-mask, optionally standardised.
* ``text``: free text tokenised (:func:`tokens`) into a multi field of lower-cased words.

Building tables from DataFrames and inferring kinds lives in :mod:`attnrec.data.feature_frames`;
reading them from files in :mod:`attnrec.data.feature_files`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from attnrec.data.schema import DataError, IdMap

FIELD_KINDS = ("categorical", "multi", "numeric", "text")
#: Values of a multi/text field kept per row by :meth:`FeatureTable.align` unless told otherwise.
MAX_VALUES = 32
#: What :meth:`FeatureTable.align` does with log IDs that have no row: raise, or give them empty features.
MISSING_POLICIES = ("error", "empty")
_WORD = re.compile(r"[^\W_]+")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (runs of letters and digits) of ``text``, in order."""
    return _WORD.findall(text.lower())


@dataclass(frozen=True)
class CategoricalField:
    """One value per row: ``codes[r]`` is ``vocab``'s index of row ``r``'s value, 0 when missing."""

    vocab: IdMap  # offset 1: code = position + 1, 0 = padding/unknown
    codes: np.ndarray  # (rows,) int64

    kind = "categorical"


@dataclass(frozen=True)
class MultiField:
    """A set of values per row in CSR form: row ``r`` holds ``codes[offsets[r]:offsets[r+1]]``."""

    vocab: IdMap  # offset 1
    offsets: np.ndarray  # (rows + 1,) int64
    codes: np.ndarray  # (values,) int64, each >= 1
    kind: str = "multi"  # "text" when built from tokenised text

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


@dataclass(frozen=True)
class NumericField:
    """One float per row; ``NaN`` marks a missing value."""

    values: np.ndarray  # (rows,) float64

    kind = "numeric"

    def stats(self) -> tuple[float, float]:
        """Mean and standard deviation of the present values (``(0, 1)`` when there are none;
        a zero deviation is reported as 1 so that standardising never divides by zero)."""
        present = self.values[~np.isnan(self.values)]
        if len(present) == 0:
            return 0.0, 1.0
        std = float(present.std())
        return float(present.mean()), std if std > 0 else 1.0


FeatureField = CategoricalField | MultiField | NumericField


@dataclass(frozen=True)
class AlignedFeatures:
    """A feature table as arrays indexed by a log's internal indices.

    Every array has ``n_rows`` rows: ``ids.offset + len(ids)`` (row 0 is the padding item for
    items; for users, row ``u`` is user ``u``), followed by the table's extra IDs when aligned
    with ``include_extra=True``. Rows without features (padding, missing IDs) hold code 0,
    value 0 and ``present`` False.
    """

    n_rows: int
    kinds: dict[str, str]
    categorical: dict[str, np.ndarray]  # (n_rows,) int64 codes
    multi: dict[str, np.ndarray]  # (n_rows, width) int64 codes, left-aligned, 0-padded; width <= max_values
    numeric: dict[str, np.ndarray]  # (n_rows,) float32
    present: dict[str, np.ndarray]  # (n_rows,) bool, per numeric field
    vocab_sizes: dict[str, int]  # distinct values per categorical/multi field (codes 0..size)
    missing_ids: tuple[str, ...]  # log IDs without a row (all-padding features)
    extra_ids: tuple[str, ...]  # table IDs not in the log: the cold-start candidates
    truncated: dict[str, int]  # rows of each multi field with more than max_values values


@dataclass(frozen=True)
class FeatureTable:
    """Typed feature fields for a set of external IDs (row ``r`` describes ``ids.external[r]``).

    ``source`` names where the table came from (a file path or ``"DataFrame"``) in every error;
    ``missing`` is the default policy of :meth:`align` for log IDs without a row.
    """

    ids: IdMap  # offset 0
    fields: Mapping[str, FeatureField]
    source: str = "DataFrame"
    missing: str = "error"
    _rows: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ids.offset != 0:
            raise DataError(f"{self.source}: a feature table's ID map starts at 0, not {self.ids.offset}")
        if self.missing not in MISSING_POLICIES:
            raise DataError(f"missing={self.missing!r}: use one of {', '.join(MISSING_POLICIES)}")
        for name, f in self.fields.items():
            n = len(f.offsets) - 1 if isinstance(f, MultiField) else len(_row_values(f))
            if n != len(self.ids):
                raise DataError(f"{self.source}: field {name!r} has {n} rows for {len(self.ids)} IDs")

    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        id_column: str,
        fields: Mapping[str, str] | None = None,
        *,
        text_min_count: int = 1,
        text_max_vocab: int | None = None,
    ) -> FeatureTable:
        """A table from a DataFrame: one row per ID of ``id_column``; ``fields`` declares
        ``{column: kind}`` (else every other column, kinds inferred; rules in
        :mod:`attnrec.data.feature_frames`)."""
        from attnrec.data.feature_frames import from_frame  # builds on this module

        return from_frame(df, id_column, fields, text_min_count=text_min_count, text_max_vocab=text_max_vocab)

    def __len__(self) -> int:
        return len(self.ids)

    def kinds(self) -> dict[str, str]:
        """Each field's kind (``categorical``, ``multi``, ``numeric`` or ``text``)."""
        return {name: f.kind for name, f in self.fields.items()}

    def rows_of(self, ids: Sequence[object] | np.ndarray) -> np.ndarray:
        """Table row of each external ID (``-1`` where the table has none)."""
        index = pd.Index(self.ids.external)
        return np.asarray(index.get_indexer(np.asarray([str(i) for i in ids], dtype=object)), dtype=np.int64)

    def missing_ids(self, ids: IdMap) -> list[str]:
        """The IDs of ``ids`` that have no row in this table, in ``ids`` order."""
        rows = self.rows_of(ids.external)
        return [str(x) for x in ids.external[rows < 0]]

    def extra_ids(self, ids: IdMap) -> list[str]:
        """The table's IDs that ``ids`` does not know (cold-start candidates), in table order."""
        known = np.asarray([e in ids for e in self.ids.external], dtype=bool)
        return [str(x) for x in self.ids.external[~known]]

    def check_rows(self, ids: IdMap, what: str = "IDs") -> None:
        """Every ID of ``ids`` has a row, else a :class:`DataError` naming this table's source and
        a few of the IDs without one (``what`` says whose: ``"items"``, ``"users"``)."""
        self._require_rows(self.missing_ids(ids), len(ids), what)

    def _require_rows(self, absent: list[str], n: int, what: str = "IDs") -> None:
        if absent:
            raise DataError(
                f"{self.source}: no feature row for {len(absent):,} of the log's {n:,} {what} "
                f"(e.g. {', '.join(absent[:5])}); add rows for them, or pass missing='empty' "
                "(CLI: --missing-features empty) to give them empty features"
            )

    def with_missing(self, missing: str) -> FeatureTable:
        """The same table with another default :attr:`missing` policy."""
        return replace(self, missing=missing)

    def rekey(self, mapping: Mapping[str, str]) -> FeatureTable:
        """The table re-keyed through ``{new_id: original_id}`` (e.g. SASRec's remapped ML-1M IDs):
        new ID ``k`` gets the row of ``mapping[k]``; rows no new ID maps to are dropped."""
        new = [k for k, orig in mapping.items() if orig in self.ids]
        rows = self.rows_of([mapping[k] for k in new])
        return FeatureTable(
            IdMap(np.array(new, dtype=object)),
            {k: _take(f, rows) for k, f in self.fields.items()},
            self.source,
            self.missing,
        )

    def align(
        self,
        ids: IdMap,
        *,
        missing: str | None = None,
        max_values: int = MAX_VALUES,
        standardise: bool = False,
        include_extra: bool = False,
    ) -> AlignedFeatures:
        """Arrays indexed by ``ids``' internal indices (see :class:`AlignedFeatures`).

        ``missing`` (default :attr:`missing`): ``"error"`` raises a :class:`DataError` naming the
        table and a few of the log's IDs without a row; ``"empty"`` gives them all-padding
        features (listed in ``missing_ids``). Multi/text fields keep the first ``max_values``
        values of a row (their matrix is as wide as the longest row, at most ``max_values``). ``standardise``
        maps numeric fields to ``(x - mean) / std`` over the table's present values. ``include_extra`` appends
        the table's IDs unknown to ``ids`` (``extra_ids``, in that order) as rows ``ids.offset + len(ids)``
        on.
        """
        policy = self.missing if missing is None else missing
        if policy not in MISSING_POLICIES:
            raise DataError(f"missing={policy!r}: use one of {', '.join(MISSING_POLICIES)}")
        if max_values < 1:
            raise DataError(f"max_values must be at least 1, not {max_values}")
        known_rows = self.rows_of(ids.external)
        absent = [str(x) for x in ids.external[known_rows < 0]]
        if policy == "error":
            self._require_rows(absent, len(ids))
        extra = self.extra_ids(ids)
        rows = np.full(ids.offset, -1, dtype=np.int64)  # padding rows below the offset
        rows = np.concatenate([rows, known_rows, self.rows_of(extra) if include_extra else rows[:0]])
        out = AlignedFeatures(len(rows), self.kinds(), {}, {}, {}, {}, {}, tuple(absent), tuple(extra), {})
        for name, f in self.fields.items():
            _align_field(out, name, f, rows, max_values, standardise)
        return out


def _row_values(f: CategoricalField | NumericField) -> np.ndarray:
    return f.codes if isinstance(f, CategoricalField) else f.values


def _take(f: FeatureField, rows: np.ndarray) -> FeatureField:
    """The field restricted to table rows ``rows`` (all ``>= 0``), in that order."""
    if isinstance(f, CategoricalField):
        return CategoricalField(f.vocab, f.codes[rows])
    if isinstance(f, NumericField):
        return NumericField(f.values[rows])
    lengths = f.lengths()[rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.repeat(f.offsets[rows] - offsets[:-1], lengths) + np.arange(offsets[-1])
    return MultiField(f.vocab, offsets, f.codes[idx], f.kind)


def _align_field(
    out: AlignedFeatures, name: str, f: FeatureField, rows: np.ndarray, max_values: int, standardise: bool
) -> None:
    """Fill ``out``'s arrays of one field for table rows ``rows`` (``-1``: no features)."""
    has = rows >= 0
    src = rows[has]
    if isinstance(f, CategoricalField):
        codes = np.zeros(len(rows), dtype=np.int64)
        codes[has] = f.codes[src]
        out.categorical[name] = codes
        out.vocab_sizes[name] = len(f.vocab)
    elif isinstance(f, NumericField):
        values = np.full(len(rows), np.nan, dtype=np.float64)
        values[has] = f.values[src]
        present = ~np.isnan(values)
        if standardise:
            mean, std = f.stats()
            values = (values - mean) / std
        out.numeric[name] = np.where(present, values, 0.0).astype(np.float32)
        out.present[name] = present
    else:
        lengths = np.zeros(len(rows), dtype=np.int64)
        lengths[has] = f.lengths()[src]
        starts = np.zeros(len(rows), dtype=np.int64)
        starts[has] = f.offsets[src]
        # As wide as the longest row, at most max_values: genres need 6 columns, not 32.
        width = int(min(max_values, max(int(lengths.max(initial=0)), 1)))
        col = np.arange(width)[None, :]
        valid = col < np.minimum(lengths, width)[:, None]  # left-aligned, 0-padded on the right
        matrix = np.zeros((len(rows), width), dtype=np.int64)
        matrix[valid] = f.codes[(starts[:, None] + col)[valid]]
        out.multi[name] = matrix
        out.vocab_sizes[name] = len(f.vocab)
        out.truncated[name] = int(np.sum(lengths > max_values))


__all__ = [
    "FIELD_KINDS",
    "MAX_VALUES",
    "MISSING_POLICIES",
    "AlignedFeatures",
    "CategoricalField",
    "FeatureField",
    "FeatureTable",
    "MultiField",
    "NumericField",
    "tokens",
]
