"""The one ``load``: a saved model directory back as a :class:`Recommender` or an :class:`Explainer`."""

from __future__ import annotations

from pathlib import Path

from attnrec.checkpoint import LoadLimits
from attnrec.recommend.explainer import Explainer
from attnrec.recommend.persistence import EXPLAIN, load_policy, open_model_dir
from attnrec.recommend.recommender import Recommender


def load(
    path: str | Path,
    device: str = "auto",
    *,
    allow_unsigned: bool = False,
    manifest_key: str | bytes | None = None,
    limits: LoadLimits | None = None,
) -> Recommender | Explainer:
    """Load a saved model directory: a :class:`Recommender`, or an :class:`Explainer` when its
    ``config.json`` says ``"task": "explain"`` (PETER). Never unpickles.

    Every file is checked before it is read (a regular file inside the directory, of the size its
    ``manifest.json`` gives and at most ``limits.max_file_bytes``), the model ``config.json``
    describes is sized against ``limits`` before it is built, and every tensor must be finite.
    A directory without ``manifest.json`` is refused unless ``allow_unsigned`` (nothing tells an
    edited file from the saved one). With ``manifest_key``, the manifest's signature must verify
    (a directory saved with that key and not edited since); an unsigned one is refused unless
    ``allow_unsigned``. Any refusal is one :class:`~attnrec.checkpoint.CheckpointError` line.
    """
    saved = open_model_dir(path, policy=load_policy(allow_unsigned, manifest_key, limits))
    if saved.task == EXPLAIN:
        return Explainer.from_saved(saved, device)
    return Recommender.from_saved(saved, device)


__all__ = ["load"]
