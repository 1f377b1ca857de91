"""Item features inside SASRec and BERT4Rec: what a model reads besides item IDs, and how.

A model trained with ``item_features`` other than ``"none"`` builds its item **table** (the
``(n_items + 1, D)`` matrix that is both its input embedding and its output layer) from the ID
embedding and a feature vector per item (:class:`ItemContext`), so scoring uses the features too:

* :class:`FeatureEmbedding`: one vector per item from its aligned feature codes (held as buffers,
  so they travel in ``weights.safetensors``): per field a categorical embedding, the mean of a
  multi field's value embeddings (code 0 ignored), or a linear map of a standardised numeric value
  times its present mask; the fields' vectors are summed.
* fusion (``item_features``): ``sum`` = id + feat, ``concat`` = Linear([id; feat]), ``gate`` =
  g * id + (1 - g) * feat with g = sigmoid(W[id; feat]).
* ``id_dropout``: in training, every call of the table zeroes the ID vector of each item with this
  probability (one draw per item and call: SASRec/BERT4Rec draw once for the inputs and once for the
  output layer of a step), so the model learns to score from features alone. A cold item added later
  (:meth:`ItemContext.add_rows`) has an all-zero ID vector: exactly what a dropped ID looks like.
* DIF-SR (SASRec ``difsr``): :class:`DecoupledAttention` adds each field's own ``Q_a K_a^T`` to the ID
  stream's attention logits; values stay the ID stream's.

:class:`ItemFeatures` keeps the value vocabularies and numeric statistics next to the codes, so new
items can be encoded with the training codes (``item_features.json`` of a model directory).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any, Protocol, runtime_checkable  # Any: JSON values

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.features import AlignedFeatures, FeatureTable, NumericField
from attnrec.data.schema import IdMap
from attnrec.models.event_context import EventFields
from attnrec.models.nn.layers import MultiHeadAttention

FEATURE_MODES = ("none", "sum", "concat", "gate")


@dataclass(frozen=True, kw_only=True)
class ItemFeatureFields:
    """The item-feature settings SASRecConfig and BERT4RecConfig share; all off."""

    # "none", "sum", "concat" or "gate" fusion of ID and feature vectors in the item table
    item_features: str = "none"
    # The fields used, comma-separated (a string, not a tuple, so that the settings survive JSON round
    # trips unchanged); empty: all of the data's item feature fields.
    feature_fields: str = ""
    # Training: the probability of zeroing an item's ID vector (what lets features alone rank cold items).
    id_dropout: float = 0.0

    def check_item_features(self, sparse: bool = False) -> None:
        """Reject inconsistent settings with a one-line ``ValueError`` (called by the configs'
        ``__post_init__``; ``sparse``: the config's item embedding has sparse gradients)."""
        if self.item_features not in FEATURE_MODES:
            raise ValueError(
                f"item_features must be one of {', '.join(FEATURE_MODES)}, not {self.item_features!r}"
            )
        if not 0.0 <= self.id_dropout < 1.0:
            raise ValueError(f"id_dropout must be in [0, 1), not {self.id_dropout}")
        if self.id_dropout > 0 and self.item_features == "none":
            raise ValueError(
                "id_dropout drops ID embeddings in favour of features: it needs item_features sum/concat/gate"
            )
        if sparse and self.item_features != "none":
            raise ValueError(
                "sparse_embedding cannot be combined with item_features (the feature table is dense)"
            )


def feature_settings(config: object) -> tuple[str, tuple[str, ...], bool]:
    """``(item_features, feature_fields, difsr)`` of a model config; models without them:
    ``("none", (), False)``."""
    d = asdict(config) if is_dataclass(config) and not isinstance(config, type) else {}
    fields = d.get("feature_fields", "")
    names = fields.split(",") if isinstance(fields, str) else list(fields)  # "genres,year"
    return (
        str(d.get("item_features", "none")),
        tuple(n.strip() for n in names if n.strip()),
        bool(d.get("difsr", False)),
    )


@dataclass(frozen=True)
class ItemFeatures:
    """The item features a model reads: ``aligned`` rows ``0..n_items`` (row 0 padding), the external
    values of each categorical/multi field (code = position + 1) and each numeric field's
    ``(mean, std)`` (values are standardised with them)."""

    aligned: AlignedFeatures
    vocab: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    stats: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def fields(self) -> list[str]:
        return list(self.aligned.kinds)

    @classmethod
    def from_table(cls, table: FeatureTable, items: IdMap, fields: Sequence[str] = ()) -> ItemFeatures:
        """``table`` aligned to the log's ``items`` (its own missing-ID policy), only ``fields`` if given."""
        unknown = [f for f in fields if f not in table.fields]
        if unknown:
            raise ValueError(
                f"feature_fields: unknown field(s) {', '.join(unknown)}; the item features have "
                f"{', '.join(table.fields) or 'none'}"
            )
        keep = list(fields) or list(table.fields)
        if not keep:
            raise ValueError(f"{table.source}: the item feature table has no fields")
        a = table.align(items, standardise=True)
        aligned = AlignedFeatures(
            a.n_rows,
            {k: a.kinds[k] for k in keep},
            {k: v for k, v in a.categorical.items() if k in keep},
            {k: v for k, v in a.multi.items() if k in keep},
            {k: v for k, v in a.numeric.items() if k in keep},
            {k: v for k, v in a.present.items() if k in keep},
            {k: v for k, v in a.vocab_sizes.items() if k in keep},
            a.missing_ids,
            a.extra_ids,
            {k: v for k, v in a.truncated.items() if k in keep},
        )
        vocab = {
            k: tuple(str(v) for v in f.vocab.external)
            for k, f in table.fields.items()
            if k in keep and not isinstance(f, NumericField)
        }
        stats = {k: f.stats() for k, f in table.fields.items() if k in keep and isinstance(f, NumericField)}
        return cls(aligned, vocab, stats)

    def encode(self, table: FeatureTable) -> AlignedFeatures:
        """Rows for ``table``'s IDs (in table order) in this model's codes: values it never saw get code
        0, multi rows are cut to the trained width, numeric values standardised with the trained stats."""
        missing = [k for k in self.fields if k not in table.fields]
        if len(missing) == len(self.fields):
            raise ValueError(
                f"{table.source}: none of the model's item feature fields ({', '.join(self.fields)})"
            )
        for k in self.fields:
            if k in table.fields and (table.fields[k].kind == "numeric") != (
                self.aligned.kinds[k] == "numeric"
            ):
                raise ValueError(
                    f"{table.source}: field {k!r} is {table.fields[k].kind} here but "
                    f"{self.aligned.kinds[k]} in the model"
                )
        a = table.align(IdMap(table.ids.external, 0))
        n = a.n_rows
        out = AlignedFeatures(
            n, dict(self.aligned.kinds), {}, {}, {}, {}, dict(self.aligned.vocab_sizes), (), (), {}
        )
        for k, kind in self.aligned.kinds.items():
            if kind == "numeric":
                mean, std = self.stats[k]
                present = a.present[k] if k in a.present else np.zeros(n, dtype=bool)
                raw = a.numeric[k] if k in a.numeric else np.zeros(n, dtype=np.float32)
                out.numeric[k] = np.where(present, (raw - mean) / std, 0.0).astype(np.float32)
                out.present[k] = present
                continue
            lookup = {v: i + 1 for i, v in enumerate(self.vocab[k])}
            src = table.fields.get(k)
            remap = np.zeros(1, dtype=np.int64)
            if src is not None and not isinstance(src, NumericField):
                remap = np.array([0] + [lookup.get(str(v), 0) for v in src.vocab.external], dtype=np.int64)
            if kind == "categorical":
                out.categorical[k] = remap[a.categorical.get(k, np.zeros(n, dtype=np.int64))]
            else:
                width = self.aligned.multi[k].shape[1]
                codes = remap[a.multi.get(k, np.zeros((n, 1), dtype=np.int64))][:, :width]  # (n, <= width)
                out.multi[k] = np.pad(codes, ((0, 0), (0, width - codes.shape[1])))
        return out

    def to_json(self) -> dict[str, Any]:
        """What rebuilds the spec without the data (the codes themselves are buffers of the weights)."""
        return {
            "fields": [
                {
                    "name": k,
                    "kind": kind,
                    "vocab": list(self.vocab.get(k, ())),
                    "width": int(self.aligned.multi[k].shape[1]) if k in self.aligned.multi else None,
                    "stats": list(self.stats[k]) if k in self.stats else None,
                }
                for k, kind in self.aligned.kinds.items()
            ]
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], n_rows: int) -> ItemFeatures:
        """The spec of :meth:`to_json` with all-zero codes of ``n_rows`` rows (the weights fill them)."""
        kinds: dict[str, str] = {}
        a = AlignedFeatures(n_rows, kinds, {}, {}, {}, {}, {}, (), (), {})
        vocab, stats = {}, {}
        for f in obj["fields"]:
            name, kind = str(f["name"]), str(f["kind"])
            kinds[name] = kind
            if kind == "numeric":
                a.numeric[name], a.present[name] = np.zeros(n_rows, np.float32), np.zeros(n_rows, bool)
                mean, std = f["stats"]
                stats[name] = (float(mean), float(std))
                continue
            vocab[name] = tuple(str(v) for v in f["vocab"])
            a.vocab_sizes[name] = len(vocab[name])
            if kind == "categorical":
                a.categorical[name] = np.zeros(n_rows, np.int64)
            else:
                a.multi[name] = np.zeros((n_rows, int(f["width"])), np.int64)
        return cls(a, vocab, stats)


@dataclass(frozen=True)
class ModelContext:
    """What a model is built with besides its config and sizes: item features, the log's event vocabulary."""

    item_features: ItemFeatures | None = None
    events: IdMap | None = None  # event names -> codes 1..E (event_input's size, target_events' names)
    vocabularies: Mapping[str, IdMap] = field(
        default_factory=dict
    )  # categorical signals read: values -> codes


class FieldEmbedding(nn.Module):
    """One field's vector per item ``(n_rows, D)``, its codes held as buffers."""

    def __init__(
        self,
        kind: str,
        codes: np.ndarray,
        hidden: int,
        vocab_size: int = 0,
        present: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.proj: nn.Module = (
            nn.Linear(1, hidden) if kind == "numeric" else nn.Embedding(vocab_size + 1, hidden, padding_idx=0)
        )
        self.register_buffer("codes", torch.as_tensor(codes))  # (n,), (n, W) codes, or (n,) values
        self.register_buffer(
            "present", torch.as_tensor(present if present is not None else np.zeros(0), dtype=torch.float32)
        )
        self.codes: torch.Tensor
        self.present: torch.Tensor

    def forward(self) -> torch.Tensor:
        """``(n_rows, D)``: code 0 (missing, unknown, padding) contributes nothing."""
        if self.kind == "numeric":
            out: torch.Tensor = self.proj(self.codes[:, None]) * self.present[:, None]  # (n, D)
            return out
        if self.kind == "categorical":
            e: torch.Tensor = self.proj(self.codes)  # (n, D); row 0 of the embedding is zero
            return e
        assert isinstance(self.proj, nn.Embedding)
        # mean over the row's values, code 0 left out of sum and count (an empty row gives zeros);
        # embedding_bag never holds the (n, W, D) gather
        return F.embedding_bag(self.codes, self.proj.weight, mode="mean", padding_idx=0)  # (n, D)

    def reset_padding(self) -> None:
        if isinstance(self.proj, nn.Embedding):
            with torch.no_grad():
                self.proj.weight[0].zero_()

    def add_rows(self, codes: np.ndarray, present: np.ndarray | None) -> None:
        self.codes = torch.cat([self.codes, torch.as_tensor(codes, device=self.codes.device)])
        if present is not None:
            self.present = torch.cat(
                [self.present, torch.as_tensor(present, dtype=torch.float32, device=self.present.device)]
            )


def _field_arrays(a: AlignedFeatures, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    kind = a.kinds[name]
    if kind == "numeric":
        return a.numeric[name], a.present[name]
    return (a.categorical[name] if kind == "categorical" else a.multi[name]), None


class ItemContext(nn.Module):
    """An item table fused from ID and feature vectors (see the module docstring)."""

    def __init__(self, mode: str, features: ItemFeatures, hidden: int, id_dropout: float) -> None:
        super().__init__()
        self.mode, self.id_dropout, self.spec = mode, id_dropout, features
        a = features.aligned
        self.fields = nn.ModuleList()
        for name, kind in a.kinds.items():
            codes, present = _field_arrays(a, name)
            self.fields.append(
                FieldEmbedding(
                    "multi" if kind == "text" else kind, codes, hidden, a.vocab_sizes.get(name, 0), present
                )
            )
        self.fuse = nn.Linear(2 * hidden, hidden) if mode in ("concat", "gate") else None
        self.n_rows = a.n_rows  # padding + items; grows with add_rows
        self._cached: tuple[tuple[tuple[int, int], ...], torch.Tensor] | None = None  # see table()

    def field_tables(self) -> torch.Tensor:
        """``(F, n_rows, D)``: each field's vector per item."""
        return torch.stack([f() for f in self.fields])

    def table(self, id_weight: torch.Tensor) -> torch.Tensor:
        """The fused item table ``(n_rows, D)`` from the ID embedding rows ``id_weight[:n_rows]``; row 0 zero.

        Without gradients (scoring, serving) the table is computed once per state of its inputs and kept:
        one tensor while the weights stay, as a plain ID embedding is (similar-item caches key on it), and
        not recomputed per request. It is a normal tensor even when first asked for in inference mode.
        """
        if self.mode == "none" or self.training or torch.is_grad_enabled():
            return self._table(id_weight)
        key = tuple((t.data_ptr(), t._version) for t in (id_weight, *self.parameters(), *self.buffers()))
        if self._cached is None or self._cached[0] != key:
            with torch.inference_mode(False), torch.no_grad():
                self._cached = (key, self._table(id_weight))
        return self._cached[1]

    def _table(self, id_weight: torch.Tensor) -> torch.Tensor:
        n = self.n_rows
        ids = id_weight[:n]  # (n, D)
        if self.mode == "none":  # DIF-SR alone: features only inside attention
            return ids
        if self.training and self.id_dropout > 0:
            keep = torch.rand(n, 1, device=ids.device) >= self.id_dropout  # (n, 1) one draw per item
            ids = ids * keep
        feat = self.field_tables().sum(0)  # (n, D)
        if self.mode == "sum":
            out = ids + feat
        elif self.fuse is not None and self.mode == "concat":
            out = self.fuse(torch.cat([ids, feat], -1))  # (n, D)
        else:
            assert self.fuse is not None
            g = torch.sigmoid(self.fuse(torch.cat([ids, feat], -1)))  # (n, D)
            out = g * ids + (1 - g) * feat
        return torch.cat([torch.zeros_like(out[:1]), out[1:]])  # (n, D) the padding row stays zero

    def side(self, seq: torch.Tensor) -> torch.Tensor:
        """DIF-SR attribute streams ``(F, B, T, D)`` of a padded item matrix ``seq`` ``(B, T)``
        (tokens past the table, e.g. BERT4Rec's [mask], get padding features)."""
        idx = seq.masked_fill(seq >= self.n_rows, 0)
        return self.field_tables()[:, idx]  # (F, B, T, D)

    def reset_padding(self) -> None:
        for f in self.fields:
            f.reset_padding()  # type: ignore[operator]

    def add_rows(self, rows: AlignedFeatures) -> None:
        """Append new items' encoded features (:meth:`ItemFeatures.encode`) as rows ``n_rows ..``."""
        for f, name in zip(self.fields, rows.kinds, strict=True):
            f.add_rows(*_field_arrays(rows, name))  # type: ignore[operator]
        self.n_rows += rows.n_rows


def item_context(
    mode: str, difsr: bool, context: ModelContext | None, hidden: int, id_dropout: float, model: str
) -> ItemContext | None:
    """The model's :class:`ItemContext`, or ``None`` when it reads no item features (nothing is created)."""
    if mode == "none" and not difsr:
        return None
    if context is None or context.item_features is None:
        raise ValueError(
            f"{model}: item_features={mode!r}{' with difsr' if difsr else ''} needs item features, "
            "but the data has none (attach a feature table, e.g. --item-features FILE)"
        )
    return ItemContext(mode, context.item_features, hidden, id_dropout)


def grown_embedding(emb: nn.Embedding, n_new: int, at: int) -> nn.Embedding:
    """``emb`` with ``n_new`` all-zero rows inserted before row ``at`` (later rows, e.g. [mask], move up)."""
    w = emb.weight.detach()
    new = nn.Embedding(
        w.shape[0] + n_new,
        w.shape[1],
        padding_idx=emb.padding_idx,
        sparse=emb.sparse,
        device=w.device,
        dtype=w.dtype,
    )
    with torch.no_grad():
        new.weight.copy_(torch.cat([w[:at], w.new_zeros(n_new, w.shape[1]), w[at:]]))
    return new


def require_fused(ctx: ItemContext | None, model: str) -> ItemContext:
    """``ctx`` when its item table uses features; otherwise why new items cannot be added."""
    if ctx is None or ctx.mode == "none":
        raise ValueError(
            f"{model}: adding items needs a model trained with item_features sum/concat/gate "
            "(and preferably id_dropout > 0); this one scores items by their IDs only"
        )
    return ctx


@runtime_checkable
class ItemExtensible(Protocol):
    """A model that takes new (cold-start) items with their encoded features, without retraining."""

    def add_items(self, rows: AlignedFeatures) -> None:
        """Append ``rows.n_rows`` items as internal indices ``n_items + 1 ...``."""
        ...


class DecoupledAttention(MultiHeadAttention):
    """DIF-SR attention: logits = (Q K^T + sum_a Q_a K_a^T) / sqrt(d_h), values from the ID stream only."""

    def __init__(self, hidden: int, n_heads: int, dropout: float, n_side: int) -> None:
        super().__init__(hidden, n_heads, dropout)
        self.side_q = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(n_side))
        self.side_k = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(n_side))

    def forward(
        self,
        x_q: torch.Tensor,
        x_kv: torch.Tensor,
        allowed: torch.Tensor,
        need_weights: bool = False,
        side: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As :class:`MultiHeadAttention`, plus ``side`` ``(F, B, T, D)``: one stream per field."""
        if side is None:
            return super().forward(x_q, x_kv, allowed, need_weights)
        b, tq, d = x_q.shape
        t, h = x_kv.shape[1], self.n_heads

        def heads(x: torch.Tensor, n: int) -> torch.Tensor:
            return x.view(b, n, h, d // h).transpose(1, 2)  # (B, H, n, D/H)

        logits = heads(self.q(x_q), tq) @ heads(self.k(x_kv), t).transpose(-1, -2)  # (B, H, Tq, T)
        for s, pq, pk in zip(side, self.side_q, self.side_k, strict=True):
            logits = logits + heads(pq(s[:, t - tq :]), tq) @ heads(pk(s), t).transpose(
                -1, -2
            )  # (B, H, Tq, T)
        probs = (logits / math.sqrt(d // h) + allowed).softmax(-1)  # (B, H, Tq, T); allowed: an additive mask
        y = F.dropout(probs, self.dropout, self.training) @ heads(self.v(x_kv), t)  # (B, H, Tq, D/H)
        return self.out(y.transpose(1, 2).reshape(b, tq, d)), probs if need_weights else None  # (B, Tq, D)


def context_for(
    config: object,
    table: FeatureTable | None,
    items: IdMap,
    events: IdMap | None = None,
    vocabularies: Mapping[str, IdMap] | None = None,
) -> ModelContext | None:
    """The :class:`ModelContext` a model with ``config`` needs for a log with ``items``, item feature
    ``table``, event vocabulary ``events`` and signal ``vocabularies``; ``None`` when the config reads
    none of them."""
    mode, fields, difsr = feature_settings(config)
    per_event = config if isinstance(config, EventFields) else None
    events = events if per_event is not None and (per_event.event_input or per_event.target_events) else None
    listed = per_event.signal_names() if per_event is not None else ()
    read = {k: v for k, v in (vocabularies or {}).items() if k in listed}
    if mode == "none" and not difsr:
        return None if events is None and not read else ModelContext(events=events, vocabularies=read)
    if table is None:
        raise ValueError(
            f"item_features={mode!r}{' with difsr' if difsr else ''} needs item features, but the "
            "data has none (attach a feature table, e.g. --item-features FILE)"
        )
    return ModelContext(ItemFeatures.from_table(table, items, fields), events, read)


__all__ = [
    "FEATURE_MODES",
    "DecoupledAttention",
    "FieldEmbedding",
    "ItemContext",
    "ItemExtensible",
    "ItemFeatureFields",
    "ItemFeatures",
    "ModelContext",
    "context_for",
    "feature_settings",
    "grown_embedding",
    "item_context",
    "require_fused",
]
