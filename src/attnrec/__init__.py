"""attnrec: transformer-based recommendation (SASRec, BERT4Rec, PETER and baselines)."""

__version__ = "0.1.0"

from attnrec.config import ConfigError  # noqa: E402
from attnrec.data.schema import DataError, IdMap, Interactions, Sequences  # noqa: E402
from attnrec.models.registry import get_spec, list_models  # noqa: E402
from attnrec.recommend import Explainer, Recommendation, Recommender, load  # noqa: E402

__all__ = [
    "__version__",
    "ConfigError",
    "DataError",
    "IdMap",
    "Interactions",
    "Sequences",
    "Explainer",
    "Recommender",
    "Recommendation",
    "load",
    "get_spec",
    "list_models",
]
