"""The error of bad or unusable input data (re-exported by :mod:`attnrec.data.schema`)."""

from __future__ import annotations


class DataError(ValueError):
    """Bad or unusable input data; the message says what and where."""


__all__ = ["DataError"]
