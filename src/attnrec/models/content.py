"""Content: a content-only baseline that ranks items by attribute overlap with the user's recent history.

Every item is a multi-hot vector ``x_i`` over the values of its categorical, multi and text feature
fields (each field's values are their own dimensions; numeric fields are not used), L2-normalised:
``x̂_i = x_i / |x_i|`` (an item without features is all zero). A user's profile is the recency-weighted
sum of the last ``max_len`` history items' vectors, ``p = sum_t 0.5 ** (back_t / halflife) * x̂_{i_t}``,
where ``back_t`` is 0 for the most recent item, 1 for the one before, ... The score of a candidate is
the cosine ``p · x̂_c / |p|`` (0 for an empty profile or an item without features).

Nothing is learned from the interactions (``fit`` only checks sizes): the scores depend on the item
features and the history alone, so the model ranks items never seen in training exactly as it ranks
the others. That makes it the reference for the cold-item protocol (:mod:`attnrec.data.cold`): new
items are added with :meth:`Content.add_items` (the :class:`~attnrec.models.item_context.ItemExtensible`
capability, used by ``Recommender.add_items``). Ties count against the target in evaluation, so items
with the same attributes as the target rank above it.

The feature codes are a buffer (saved in ``weights.safetensors``); the multi-hot matrix is rebuilt from
them when first needed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnrec.data.features import AlignedFeatures
from attnrec.data.schema import Sequences
from attnrec.models.batches.windows import last_items
from attnrec.models.contracts import Batch, ClosedForm, Factorised
from attnrec.models.item_context import ItemExtensible, ModelContext
from attnrec.models.registry import register

MODE = "multi-hot"  # the one way this model reads item features


@dataclass(frozen=True)
class ContentConfig:
    """Settings of the content-only baseline.

    ``item_features`` names how the features are read (only ``"multi-hot"``); having it tells the
    recommender to build the item feature context, as for SASRec. ``feature_fields``: the fields used,
    comma-separated (empty: every categorical/multi/text field). ``halflife``: history positions after
    which an item's weight halves. ``max_len``: the most recent history items read.
    """

    item_features: str = MODE
    feature_fields: str = ""
    halflife: float = 3.0
    max_len: int = 50

    def __post_init__(self) -> None:
        if self.item_features != MODE:
            raise ValueError(f"content: item_features must be {MODE!r}, not {self.item_features!r}")
        if not self.halflife > 0:
            raise ValueError(f"content: halflife must be > 0 positions, not {self.halflife}")
        if self.max_len < 1:
            raise ValueError(f"content: max_len must be at least 1, not {self.max_len}")


def attribute_codes(a: AlignedFeatures, bases: dict[str, int]) -> np.ndarray:
    """``(n_rows, W)`` codes of every categorical/multi/text value of ``a``, field ``f``'s codes shifted by
    ``bases[f]`` so each field has its own dimensions; 0 = no value."""
    parts = []
    for name, base in bases.items():
        codes = a.categorical[name][:, None] if a.kinds[name] == "categorical" else a.multi[name]  # (n, w)
        parts.append(np.where(codes > 0, codes + base, 0))
    return np.concatenate(parts, axis=1).astype(np.int64) if parts else np.zeros((a.n_rows, 1), np.int64)


@register("content", config=ContentConfig, presets={"default": {}}, needs_item_features=True)
class Content(nn.Module, ClosedForm, Factorised, ItemExtensible):
    """Content: attribute overlap of a candidate with the recency-weighted history (no interactions learned)."""  # noqa: E501  # one line: the registry takes it as the model's description

    codes: torch.Tensor

    def __init__(
        self, config: ContentConfig, n_users: int, n_items: int, context: ModelContext | None = None
    ) -> None:
        super().__init__()
        if context is None or context.item_features is None:
            raise ValueError(
                "content: needs item features, but the data has none "
                "(attach a feature table, e.g. --item-features FILE)"
            )
        self.config, self.n_users, self.n_items = config, n_users, n_items
        a = context.item_features.aligned
        self.bases: dict[str, int] = {}
        n_values = 0
        for name, kind in a.kinds.items():
            if kind != "numeric":
                self.bases[name] = n_values
                n_values += a.vocab_sizes[name]
        if not self.bases:
            raise ValueError("content: the item features have no categorical, multi or text field")
        self.n_values = n_values
        self.register_buffer("codes", torch.as_tensor(attribute_codes(a, self.bases)))  # (I+1, W)
        self._cached: tuple[tuple[int, int], torch.Tensor] | None = None

    def fit(self, train: Sequences, rng: np.random.Generator) -> Content:
        """Nothing to learn (the scores use features and histories only); checks the catalogue size."""
        if train.n_items != self.n_items:
            raise ValueError(f"training data has {train.n_items} items, the model {self.n_items}")
        return self

    def item_vectors(self) -> torch.Tensor:
        """``(I + 1, V + 1)``: each item's L2-normalised multi-hot attribute vector (row 0 and
        column 0, padding, are zero)."""
        key = (self.codes.data_ptr(), self.codes._version)
        if self._cached is None or self._cached[0] != key:
            x = torch.zeros(len(self.codes), self.n_values + 1, device=self.codes.device)  # (I+1, V+1)
            x.scatter_(1, self.codes, 1.0)
            x[:, 0] = 0.0  # code 0 is "no value"
            x[0] = 0.0
            self._cached = (key, x / x.norm(dim=1, keepdim=True).clamp(min=1e-12))
        return self._cached[1]

    def score_inputs(
        self, users: np.ndarray, histories: Sequences, request_time: np.ndarray | None = None
    ) -> Batch:
        """``{"seq": (B, max_len)}``: the last history items, left-padded."""
        return {"seq": last_items(histories, self.config.max_len)}

    def query_vectors(self, batch: Batch) -> torch.Tensor:
        """``(B, V + 1)``: the recency-weighted profile, normalised (zero for an empty one)."""
        seq = batch["seq"].to(self.codes.device)  # (B, T)
        back = torch.arange(
            seq.shape[1] - 1, -1, -1, device=seq.device, dtype=torch.float32
        )  # (T,) 0 = latest
        w = torch.pow(0.5, back / self.config.halflife) * (seq > 0)  # (B, T)
        profile: torch.Tensor = torch.einsum("bt,btv->bv", w, self.item_vectors()[seq])  # (B, V+1)
        norm: torch.Tensor = profile.norm(dim=1, keepdim=True)  # (B, 1)
        return profile / norm.clamp(min=1e-12)

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores ``(B, I + 1)``: cosine of profile and item vectors; column 0 is ``-inf``."""
        scores = self.query_vectors(batch) @ self.item_vectors().T  # (B, I+1)
        scores[:, 0] = -torch.inf
        return scores

    def add_items(self, rows: AlignedFeatures) -> None:
        """Append new items (features encoded with this model's codes) as indices ``n_items + 1 ...``."""
        new = torch.as_tensor(attribute_codes(rows, self.bases), device=self.codes.device)  # (n, W)
        self.codes = torch.cat([self.codes, new])
        self.n_items += rows.n_rows

    def num_parameters(self) -> int:
        """No trainable parameters."""
        return 0
