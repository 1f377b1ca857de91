"""The user-level API: fit, evaluate, recommend or explain, save and load.

* :class:`Recommender` (``recommender.py``): any sequential model on an interaction log;
* :class:`Explainer` (``explainer.py``): PETER's explainable recommendation on review data;
* :func:`load` (``loader.py``): the one loader of a saved model directory, whichever it holds;
* ``persistence.py``: the one model-directory format both of them write and read;
* ``core.py`` (building and fitting a model core), ``requests.py`` (requests to internal
  indices), ``topk.py`` (the chunked top-k engine), ``similar.py`` (similar items),
  ``insight.py`` (a recommendation with the attention behind it).
"""

from attnrec.recommend.explainer import Explainer
from attnrec.recommend.loader import load
from attnrec.recommend.recommender import Recommender
from attnrec.recommend.topk import Recommendation, topk_chunked

__all__ = ["Explainer", "Recommendation", "Recommender", "load", "topk_chunked"]
