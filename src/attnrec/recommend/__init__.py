"""The user-level API: fit, evaluate, recommend or explain, save and load.

* :class:`Recommender` (``recommender.py``): any sequential model on an interaction log, its jobs
  in ``recommender_state.py`` (the state its parts share), ``recommender_scoring.py``,
  ``recommender_answers.py``, ``recommender_similar.py`` (similar items) and ``recommender_saving.py``;
* :class:`Explainer` (``explainer.py``): PETER's explainable recommendation on review data, generated
  as a :class:`Decoding` says;
* :func:`load` (``loader.py``): the one loader of a saved model directory, whichever it holds;
* ``persistence.py``: the one model-directory format both of them write and read;
* ``settings.py`` (a preset's settings under the caller's), ``model_core.py`` (building and fitting a
  model core), ``requests.py`` (requests to internal indices, every value checked), ``topk.py`` (the
  chunked top-k engine), ``explain_rec.py`` (a recommendation with what drove it).
"""

from attnrec.recommend.explainer import Decoding, Explainer
from attnrec.recommend.loader import load
from attnrec.recommend.recommender import Recommender
from attnrec.recommend.topk import Recommendation, topk_chunked

__all__ = ["Decoding", "Explainer", "Recommendation", "Recommender", "load", "topk_chunked"]
