"""The one ``load``: a saved model directory back as a :class:`Recommender` or an :class:`Explainer`."""

from __future__ import annotations

from pathlib import Path

from attnrec.recommend.explainer import Explainer
from attnrec.recommend.persistence import EXPLAIN, open_model_dir
from attnrec.recommend.recommender import Recommender


def load(path: str | Path, device: str = "auto") -> Recommender | Explainer:
    """Load a saved model directory: a :class:`Recommender`, or an :class:`Explainer` when its
    ``config.json`` says ``"task": "explain"`` (PETER). Never unpickles."""
    saved = open_model_dir(path)
    if saved.task == EXPLAIN:
        return Explainer.from_saved(saved, device)
    return Recommender.from_saved(saved, device)


__all__ = ["load"]
