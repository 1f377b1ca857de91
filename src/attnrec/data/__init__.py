"""Data: containers, readers, named datasets, splits."""

from attnrec.data.build import from_columns
from attnrec.data.catalog import DATASETS, NamedDataset, list_datasets
from attnrec.data.datasets import load_dataset
from attnrec.data.demo import make_demo
from attnrec.data.describe import describe, format_description
from attnrec.data.feature_files import read_features, with_features
from attnrec.data.features import AlignedFeatures, FeatureTable
from attnrec.data.formats import FORMATS
from attnrec.data.frames import from_frame
from attnrec.data.readers.jsonlines import read_amazon_json, read_json_lines, read_otto_jsonl, read_steam_json
from attnrec.data.readers.lines import read_pairs, read_user_lines
from attnrec.data.readers.movielens import read_ml20m, read_ml100k, read_movielens_dat
from attnrec.data.readers.table import read_table
from attnrec.data.schema import (
    COLUMN_DTYPES,
    DataError,
    DataSource,
    IdMap,
    Interactions,
    Sequences,
    event_codes,
    event_names,
)
from attnrec.data.signals import Signal, register_signal, unregister_signal
from attnrec.data.sniff import detect_format
from attnrec.data.split import (
    SPLITS,
    EvalSet,
    Split,
    SplitSettings,
    leave_one_out,
    make_split,
    parse_split,
    temporal_split,
)
from attnrec.data.titles import read_titles, with_titles

__all__ = [
    "from_columns",
    "from_frame",
    "DataError",
    "DataSource",
    "IdMap",
    "Interactions",
    "Sequences",
    "EvalSet",
    "Split",
    "SPLITS",
    "SplitSettings",
    "leave_one_out",
    "make_split",
    "parse_split",
    "temporal_split",
    "make_demo",
    "DATASETS",
    "FORMATS",
    "NamedDataset",
    "detect_format",
    "list_datasets",
    "load_dataset",
    "describe",
    "format_description",
    "read_amazon_json",
    "read_json_lines",
    "read_ml20m",
    "read_ml100k",
    "read_movielens_dat",
    "read_otto_jsonl",
    "read_pairs",
    "read_steam_json",
    "read_table",
    "read_titles",
    "read_user_lines",
    "with_titles",
    "AlignedFeatures",
    "FeatureTable",
    "read_features",
    "with_features",
    "COLUMN_DTYPES",
    "event_codes",
    "event_names",
    "Signal",
    "register_signal",
    "unregister_signal",
]
