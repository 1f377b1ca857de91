"""Scoring and evaluating a :class:`~attnrec.recommend.recommender.Recommender` in internal indices.

:class:`Scoring` scores whole catalogs or given candidates of internal-index histories (what
:func:`~attnrec.evaluation.protocol.evaluate` calls, during
:meth:`~attnrec.recommend.recommender.Recommender.fit`'s validation and after it) and evaluates under a
protocol, keeping each result with the model.
"""

from __future__ import annotations

import numpy as np
import torch

from attnrec.data.schema import Sequences
from attnrec.data.split import EvalSet
from attnrec.evaluation.protocol import FULL, EvalResult, Protocol, evaluate
from attnrec.recommend.recommender_state import RecommenderState


class Scoring(RecommenderState):
    """Full-catalog and candidate scores of internal-index histories, and evaluation."""

    def _batch(
        self, users: np.ndarray, histories: Sequences, when: np.ndarray | None = None
    ) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in self.core.score_inputs(users, histories, when).items()}

    def score_histories(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> torch.Tensor:
        """Scores ``(B, n_items + 1)`` of internal-index histories (column 0 is padding) at ``request_time``
        ``(B,)``."""
        core = self._inference_view().core
        batch = self._batch(users, histories, request_time)
        with torch.no_grad():
            return core.score(batch)

    def score_candidates(
        self,
        users: np.ndarray,
        histories: Sequences,
        items: torch.Tensor,
        request_time: np.ndarray | None = None,
    ) -> torch.Tensor:
        """Scores ``(B, C)`` of the internal ``items`` ``(B, C)`` only, equal to the matching columns
        of :meth:`score_histories`. Factorised models and candidate scorers score just those items,
        so sampled-negative evaluation over a large catalog costs ``C`` scores per case, not the
        whole catalog."""
        view = self._inference_view()
        if view.factorised is None and view.candidates is None:
            return self.score_histories(users, histories, request_time).gather(1, items.to(self.device))
        batch = self._batch(users, histories, request_time)
        with torch.no_grad():
            if view.factorised is None:  # the model scores (user, item) pairs itself, e.g. NCF's MLP
                assert view.candidates is not None
                return view.candidates.score_items(batch, items.to(self.device))
            query = view.factorised.query_vectors(batch)  # (B, D)
            idx = items.to(query.device)  # (B, C)
            scores = (view.factorised.item_vectors()[idx] @ query[:, :, None]).squeeze(-1)  # (B, C)
            if view.item_bias is not None:
                scores = scores + view.item_bias.item_bias()[idx]  # (B, C)
        return scores

    def evaluate(
        self, cases: EvalSet, protocol: Protocol = FULL, *, split: str = "leave-one-out", target: str = "test"
    ) -> EvalResult:
        """Evaluate on ``cases`` under ``protocol``; the result is also kept with the model."""
        self._require_fitted()
        res = evaluate(
            self.score_histories,
            cases,
            protocol,
            popularity=self.popularity_,
            data=self.source_,
            split=split,
            target=target,
            candidate_scorer=self.score_candidates,
        )
        self.evaluations_.append(res.to_dict())
        return res


__all__ = ["Scoring"]
