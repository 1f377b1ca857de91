"""attnrec: transformer-based recommendation (SASRec, BERT4Rec, PETER and baselines).

The public names are imported on first use (``attnrec.Recommender``, ``from attnrec import
load``), so ``import attnrec`` alone, and with it ``attnrec --version``, does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Each public name and the module it comes from.
_EXPORTS: dict[str, str] = {
    "ConfigError": "attnrec.config",
    "DataError": "attnrec.data.schema",
    "IdMap": "attnrec.data.schema",
    "Interactions": "attnrec.data.schema",
    "Sequences": "attnrec.data.schema",
    "Explainer": "attnrec.recommend",
    "Recommender": "attnrec.recommend",
    "Recommendation": "attnrec.recommend",
    "load": "attnrec.recommend",
    "get_spec": "attnrec.models.registry",
    "list_models": "attnrec.models.registry",
}

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each on first use
    from attnrec.config import ConfigError as ConfigError
    from attnrec.data.schema import DataError as DataError
    from attnrec.data.schema import IdMap as IdMap
    from attnrec.data.schema import Interactions as Interactions
    from attnrec.data.schema import Sequences as Sequences
    from attnrec.models.registry import get_spec as get_spec
    from attnrec.models.registry import list_models as list_models
    from attnrec.recommend import Explainer as Explainer
    from attnrec.recommend import Recommendation as Recommendation
    from attnrec.recommend import Recommender as Recommender
    from attnrec.recommend import load as load


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'attnrec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = ["__version__", *_EXPORTS]
