"""Data: containers, readers, splits."""

from attnrec.data.build import from_columns
from attnrec.data.demo import make_demo
from attnrec.data.schema import DataError, DataSource, IdMap, Interactions, Sequences
from attnrec.data.split import EvalSet, Split, leave_one_out, parse_split, temporal_split

__all__ = ["from_columns", "DataError", "DataSource", "IdMap", "Interactions", "Sequences",
           "EvalSet", "Split", "leave_one_out", "parse_split", "temporal_split"]
__all__ += ["make_demo"]
from attnrec.data.datasets import DATASETS, FORMATS, NamedDataset, detect_format, list_datasets, load_dataset  # noqa: E402
from attnrec.data.describe import describe, format_description  # noqa: E402
from attnrec.data.io import (  # noqa: E402
    read_amazon_json,
    read_json_lines,
    read_ml20m,
    read_ml100k,
    read_movielens_dat,
    read_otto_jsonl,
    read_pairs,
    read_steam_json,
    read_table,
    read_titles,
    read_user_lines,
    with_titles,
)

__all__ += ["DATASETS", "FORMATS", "NamedDataset", "detect_format", "list_datasets", "load_dataset",
            "describe", "format_description", "read_amazon_json", "read_json_lines", "read_ml20m",
            "read_ml100k", "read_movielens_dat", "read_otto_jsonl", "read_pairs", "read_steam_json",
            "read_table", "read_titles", "read_user_lines", "with_titles"]
