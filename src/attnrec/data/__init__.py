"""Data: containers, readers, splits."""

from attnrec.data.build import from_columns
from attnrec.data.demo import make_demo
from attnrec.data.schema import DataError, DataSource, IdMap, Interactions, Sequences
from attnrec.data.split import EvalSet, Split, leave_one_out, temporal_split

__all__ = ["from_columns", "DataError", "DataSource", "IdMap", "Interactions", "Sequences",
           "EvalSet", "Split", "leave_one_out", "temporal_split"]
__all__ += ["make_demo"]
