"""PETER: personalized transformer for explainable recommendation (Li, Zhang & Chen, ACL 2021).

The input is ``[user, item, (feature,) <bos>, w1, ..., wn]``: user and item IDs and words have
their own embeddings, all scaled by sqrt(d) plus sinusoidal positions. A small post-LayerNorm
transformer encoder (2 layers in the paper) runs under the **PETER mask**: a left-to-right
(causal) mask in which, in addition, the user position may see the item position, so the two
IDs see each other; words see the IDs (and the feature) and earlier words only. Three heads:

* explanation generation: each word position predicts the next word (NLL);
* context prediction: the item position predicts the bag of words of the explanation
  (every target word scored against the same distribution; optionally with stop words removed,
  the variant of the seed notes);
* rating prediction: an MLP (``Linear-sigmoid-Linear``) on the user position (MSE).
  attnrec's option ``rating_baseline`` adds fixed per-user and per-item offsets (damped means of
  the training ratings, set by :meth:`PETER.init_rating`), so the MLP learns the residual.

The loss is ``text_weight * L_text + context_weight * L_context + rating_weight * L_rating``
(paper 1.0 / 1.0 / 0.1). PETER+ (``use_feature=True``) inserts the record's feature word after
the IDs. Generation is greedy (paper) or beam search, stops at ``<eos>`` and never emits ``<unk>``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnrec.data.reviews import EncodedReviews
from attnrec.models.contracts import Batch, Trainable
from attnrec.models.nn.layers import MultiHeadAttention, PointWiseFeedForward
from attnrec.models.nn.masks import peter_mask
from attnrec.models.registry import register
from attnrec.models.validation import require_positive_fields, require_rates

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3  # attnrec.data.text.Vocabulary's special indices


@dataclass(frozen=True)
class PETERConfig:
    """PETER hyperparameters (defaults: the paper's)."""

    emsize: int = 512  # d, embedding and model width
    n_heads: int = 2
    ffn: int = 2048  # width of the feed-forward layer
    n_layers: int = 2
    dropout: float = 0.2
    max_words: int = 15  # explanation length used for training (and the default generation length)
    use_feature: bool = False  # PETER+: the feature word follows the IDs
    context_stopwords: bool = True  # False: context targets without stop words (the seed's variant)
    text_weight: float = 1.0
    context_weight: float = 1.0
    rating_weight: float = 0.1
    peter_mask: bool = True  # False: a plain causal mask (the paper's ablation)
    max_positions: int = 64
    # attnrec's rating options (off in the paper): fixed user/item offsets under the rating MLP, and
    # "own" = the rating keeps the weights of its best validation MSE rather than of the joint loss.
    rating_baseline: bool = False
    rating_checkpoint: str = "joint"

    def __post_init__(self) -> None:
        require_positive_fields(self, "emsize", "n_heads", "ffn", "n_layers", "max_words")
        require_rates(self, "dropout")
        if self.max_positions < self.max_words + 4:
            raise ValueError("max_positions must exceed max_words + 3")
        if min(self.text_weight, self.context_weight, self.rating_weight) < 0:
            raise ValueError("loss weights must be non-negative")
        if self.rating_checkpoint not in ("joint", "own"):
            raise ValueError(f"rating_checkpoint must be 'joint' or 'own', not {self.rating_checkpoint!r}")


def sinusoidal_positions(n: int, d: int) -> torch.Tensor:
    """``(n, d)`` sine/cosine position encodings of "Attention is all you need"."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
    return pe


class PETERLayer(nn.Module):
    """Post-LayerNorm encoder layer as in the authors' code: attention, add & norm, FFN, add & norm."""

    def __init__(self, c: PETERConfig) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(c.emsize, c.n_heads, c.dropout)
        self.drop = nn.Dropout(c.dropout)
        self.ln_attn = nn.LayerNorm(c.emsize)
        self.ffn = PointWiseFeedForward(c.emsize, c.ffn, c.dropout, "relu")
        self.ln_ffn = nn.LayerNorm(c.emsize)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """``(B, T, D)`` -> ``(B, T, D)`` under the mask ``allowed`` ``(B, 1, T, T)``."""
        a, _ = self.attn(x, x, allowed)  # (B, T, D)
        x = self.ln_attn(x + self.drop(a))  # (B, T, D)
        out: torch.Tensor = self.ln_ffn(x + self.ffn(x))  # (B, T, D)
        return out


# The paper's training: SGD at lr 1.0 with gradient clipping, the rate divided by 4 on each plateau of
# the validation loss (PETER and PETER+ alike).
_PAPER_TRAINING = {
    "optimizer": "sgd",
    "lr": 1.0,
    "grad_clip": 1.0,
    "batch_size": 128,
    "lr_decay": 0.25,
    "max_lr_decays": 5,
    "max_epochs": 100,
    "monitor": "loss",
    "mode": "min",
}


@register(
    "peter",
    config=PETERConfig,
    task="explain",
    presets={
        "paper": {
            "model": {},
            "train": _PAPER_TRAINING,
        },
        "plus": {
            "model": {"use_feature": True},
            "train": _PAPER_TRAINING,
        },
        "adam": {
            "model": {},
            "train": {
                "optimizer": "adam",
                "lr": 1e-3,
                "grad_clip": 1.0,
                "batch_size": 128,
                "lr_decay": 0.25,
                "max_lr_decays": 3,
                "max_epochs": 100,
                "monitor": "loss",
                "mode": "min",
            },
        },
    },
)
class PETER(nn.Module, Trainable[EncodedReviews]):
    """PETER: one transformer that predicts a rating and generates an explanation from IDs."""

    pos: torch.Tensor  # (max_positions, D) sinusoidal table, a non-persistent buffer
    user_offset: torch.Tensor  # (n_users,) with rating_baseline
    item_offset: torch.Tensor  # (n_items + 1,) with rating_baseline

    def __init__(self, config: PETERConfig, n_users: int, n_items: int, n_words: int = 20_004) -> None:
        super().__init__()
        c = self.config = config
        self.n_words = n_words
        self.src_len = 3 if c.use_feature else 2  # positions before <bos>
        self.user_emb = nn.Embedding(n_users, c.emsize)
        self.item_emb = nn.Embedding(n_items + 1, c.emsize)  # row 0: padding item, unused
        self.word_emb = nn.Embedding(n_words, c.emsize)
        self.register_buffer("pos", sinusoidal_positions(c.max_positions, c.emsize), persistent=False)
        self.emb_drop = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(PETERLayer(c) for _ in range(c.n_layers))
        self.hidden2token = nn.Linear(c.emsize, n_words)  # shared by generation and context heads
        self.rating_mlp = nn.Sequential(nn.Linear(c.emsize, c.emsize), nn.Sigmoid(), nn.Linear(c.emsize, 1))
        for emb in (self.user_emb, self.item_emb, self.word_emb, self.hidden2token):
            nn.init.uniform_(emb.weight, -0.1, 0.1)
        nn.init.zeros_(self.hidden2token.bias)
        for lin in self.rating_mlp:
            if isinstance(lin, nn.Linear):
                nn.init.uniform_(lin.weight, -0.1, 0.1)
                nn.init.zeros_(lin.bias)
        if c.rating_baseline:  # buffers: saved with the weights, never trained
            self.register_buffer("user_offset", torch.zeros(n_users))
            self.register_buffer("item_offset", torch.zeros(n_items + 1))

    def init_rating(
        self, mean: float, user_offset: np.ndarray | None = None, item_offset: np.ndarray | None = None
    ) -> None:
        """Start the rating head's output at ``mean`` (the training mean) rather than 0.

        With ``rating_baseline`` the fixed offsets ``user_offset`` ``(n_users,)`` and
        ``item_offset`` ``(n_items + 1,)`` are added to every prediction.
        """
        out = self.rating_mlp[-1]
        assert isinstance(out, nn.Linear)
        with torch.no_grad():
            out.bias.fill_(mean)
            if self.config.rating_baseline and user_offset is not None and item_offset is not None:
                self.user_offset.copy_(torch.as_tensor(user_offset, dtype=torch.float32))
                self.item_offset.copy_(torch.as_tensor(item_offset, dtype=torch.float32))

    def rate(self, h_user: torch.Tensor, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        """Predicted ratings ``(B,)`` from the user position's hidden state ``(B, D)``."""
        rating: torch.Tensor = self.rating_mlp(h_user).squeeze(-1)  # (B,)
        if self.config.rating_baseline:
            rating = rating + self.user_offset[user] + self.item_offset[item]  # (B,)
        return rating

    def encode(
        self, user: torch.Tensor, item: torch.Tensor, feature: torch.Tensor | None, words: torch.Tensor
    ) -> torch.Tensor:
        """Hidden states ``(B, S + T, D)`` of ``[user, item, (feature,) words]``; ``words`` ``(B, T)``."""
        parts = [self.user_emb(user)[:, None], self.item_emb(item)[:, None]]  # (B, 1, D) each
        if self.config.use_feature:
            if feature is None:
                raise ValueError("PETER+ (use_feature=True) needs a feature word")
            parts.append(self.word_emb(feature)[:, None])
        parts.append(self.word_emb(words))  # (B, T, D)
        x = torch.cat(parts, dim=1) * math.sqrt(self.config.emsize)  # (B, S+T, D)
        total = x.shape[1]
        if total > self.config.max_positions:
            raise ValueError(
                f"sequence of {total} positions exceeds max_positions={self.config.max_positions}"
            )
        x = self.emb_drop(x + self.pos[:total])
        ids_real = torch.ones(len(words), self.src_len, dtype=torch.bool, device=words.device)
        real_key = torch.cat([ids_real, words != PAD_ID], 1)  # (B, S+T)
        # (B, 1, S+T, S+T): the PETER mask, and never a padding word as a key
        allowed = (
            peter_mask(total, self.config.peter_mask).to(x.device)[None, None] & real_key[:, None, None, :]
        )
        for layer in self.layers:
            x = layer(x, allowed)  # allowed: (B, 1, S+T, S+T)
        out: torch.Tensor = x  # (B, S+T, D)
        return out

    # -- training -------------------------------------------------------------------------------
    def train_rows(self, train: EncodedReviews) -> int:
        return len(train)

    def train_batches(
        self, train: EncodedReviews, batch_size: int, rng: np.random.Generator
    ) -> Iterator[Batch]:
        order = rng.permutation(len(train))
        for start in range(0, len(order), batch_size):
            yield self.batch(train, order[start : start + batch_size])

    def batch(self, data: EncodedReviews, rows: np.ndarray) -> Batch:
        ctx = data.context if self.config.context_stopwords else data.context_content
        return {
            "user": torch.from_numpy(data.user[rows]),
            "item": torch.from_numpy(data.item[rows]),
            "feature": torch.from_numpy(data.feature[rows]),
            "rating": torch.from_numpy(data.rating[rows]),
            "text": torch.from_numpy(data.text[rows]),
            "context": torch.from_numpy(ctx[rows]),
        }

    def losses(self, batch: Batch) -> dict[str, torch.Tensor]:
        """The three unweighted losses (scalars): ``text``, ``context``, ``rating``."""
        text = batch["text"]  # (B, L+2): <bos> w.. <eos> <pad>..
        h = self.encode(batch["user"], batch["item"], batch.get("feature"), text[:, :-1])  # (B, S+L+1, D)
        rating = self.rate(h[:, 0], batch["user"], batch["item"])  # (B,)
        target = text[:, 1:]  # (B, L+1) next words
        real = target != PAD_ID
        # Next-word NLL over real positions only (the same mean as NLL with ignore_index, less work).
        t_loss = F.cross_entropy(self.hidden2token(h[:, self.src_len :][real]), target[real])  # logits (N, V)
        context = F.log_softmax(self.hidden2token(h[:, 1]), dim=-1)  # (B, V)
        ctx = batch["context"]  # (B, L)
        c_logp = context.gather(1, ctx).masked_fill(ctx == PAD_ID, 0.0)  # (B, L)
        c_loss = -c_logp.sum() / (ctx != PAD_ID).sum().clamp(min=1)
        r_loss = F.mse_loss(rating, batch["rating"].to(rating.dtype))
        return {"text": t_loss, "context": c_loss, "rating": r_loss}

    def loss(self, batch: Batch) -> torch.Tensor:
        c, parts = self.config, self.losses(batch)
        return (
            c.text_weight * parts["text"]
            + c.context_weight * parts["context"]
            + c.rating_weight * parts["rating"]
        )

    # -- inference --------------------------------------------------------------------------------
    def predict(
        self, user: torch.Tensor, item: torch.Tensor, feature: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rating ``(B,)`` and context log-probs ``(B, V)`` (``<bos>`` as the only word)."""
        h = self.encode(user, item, feature, torch.full_like(user, BOS_ID)[:, None])  # (B, S+1, D)
        context = F.log_softmax(self.hidden2token(h[:, 1]), dim=-1)  # (B, V)
        return self.rate(h[:, 0], user, item), context

    def next_logprobs(
        self, user: torch.Tensor, item: torch.Tensor, feature: torch.Tensor | None, prefix: torch.Tensor
    ) -> torch.Tensor:
        """Log-probabilities ``(B, V)`` of the word after ``prefix`` ``(B, t)`` (which starts with
        ``<bos>``)."""
        h = self.encode(user, item, feature, prefix)
        logp = F.log_softmax(self.hidden2token(h[:, -1]), dim=-1)  # (B, V)
        # <unk> is a valid training target (out-of-vocabulary words) but never a useful word to print
        logp[:, PAD_ID] = logp[:, BOS_ID] = logp[:, UNK_ID] = -torch.inf  # never generated
        return logp

    @torch.no_grad()
    def generate(
        self,
        user: torch.Tensor,
        item: torch.Tensor,
        feature: torch.Tensor | None = None,
        max_len: int | None = None,
        beam: int = 1,
        length_penalty: float = 0.0,
        no_repeat_ngram: int = 0,
    ) -> list[list[int]]:
        """Word ids of one explanation per row (without ``<bos>``/``<eos>``); greedy when ``beam == 1``.

        Decoding stops at ``<eos>`` (per row, and for the batch once every row has ended) or after
        ``max_len`` words (default ``config.max_words``). Beam scores are summed log-probabilities
        divided by ``length ** length_penalty``; beam search ends when every row's best beam has ended.
        ``no_repeat_ngram`` = n > 0 never emits a word that would repeat an n-gram already in the
        row (n-gram blocking: greedy decoding of a small model otherwise loops, "and it for a nice
        and it for a ..."); 0 is the paper's plain decoding.
        """
        max_len = max_len or self.config.max_words
        if beam > 1:
            return self._beam(user, item, feature, max_len, beam, length_penalty, no_repeat_ngram)
        b = len(user)
        seq = torch.full((b, 1), BOS_ID, dtype=torch.long, device=user.device)
        done = torch.zeros(b, dtype=torch.bool, device=user.device)
        for _ in range(max_len):
            logp = block_repeats(self.next_logprobs(user, item, feature, seq), seq, no_repeat_ngram)  # (B, V)
            tok = logp.argmax(-1)  # (B,)
            tok = tok.masked_fill(done, PAD_ID)
            seq = torch.cat([seq, tok[:, None]], 1)
            done |= tok == EOS_ID
            if bool(done.all()):
                break
        return [_strip(row) for row in seq[:, 1:].tolist()]

    def _beam(
        self,
        user: torch.Tensor,
        item: torch.Tensor,
        feature: torch.Tensor | None,
        max_len: int,
        k: int,
        alpha: float,
        no_repeat_ngram: int,
    ) -> list[list[int]]:
        b, dev = len(user), user.device

        def rep(t: torch.Tensor) -> torch.Tensor:
            return t.repeat_interleave(k, 0)  # (B,) -> (B*K,)

        u, i, f = rep(user), rep(item), None if feature is None else rep(feature)
        seq = torch.full((b * k, 1), BOS_ID, dtype=torch.long, device=dev)
        score = torch.full((b, k), -torch.inf, device=dev)
        score[:, 0] = 0.0  # all beams start identical: keep one
        done = torch.zeros(b * k, dtype=torch.bool, device=dev)
        length = torch.zeros(b * k, device=dev)
        for _ in range(max_len):
            logp = block_repeats(self.next_logprobs(u, i, f, seq), seq, no_repeat_ngram)  # (B*K, V)
            v = logp.shape[-1]
            frozen = torch.full_like(logp, -torch.inf)
            frozen[:, PAD_ID] = 0.0  # a finished beam continues with <pad> at no cost
            logp = torch.where(done[:, None], frozen, logp)
            cand = (score.reshape(-1, 1) + logp).reshape(b, k * v)  # (B, K*V)
            score, flat = cand.topk(k, dim=1)  # (B, K)
            src = (flat // v + torch.arange(b, device=dev)[:, None] * k).reshape(-1)  # (B*K,) source beams
            tok = (flat % v).reshape(-1)
            seq = torch.cat([seq[src], tok[:, None]], 1)
            done, length = done[src], length[src]
            length = length + (~done).float()
            done = done | (tok == EOS_ID)
            # Log-probabilities only fall as words are added: once every row's best beam has ended
            # (without a length penalty) nothing can overtake it.
            if bool(done.all()) or (alpha == 0 and bool(done.reshape(b, k)[:, 0].all())):
                break
        norm = score / length.reshape(b, k).clamp(min=1) ** alpha
        best = norm.argmax(1) + torch.arange(b, device=dev) * k
        return [_strip(row) for row in seq[best, 1:].tolist()]


def block_repeats(logp: torch.Tensor, seq: torch.Tensor, n: int) -> torch.Tensor:
    """``logp`` ``(B, V)`` with ``-inf`` for every word that would complete an ``n``-gram already in ``seq``
    ``(B, t)``.

    The last ``n - 1`` words of each row are looked up among the row's earlier ``(n - 1)``-grams;
    each match bans the word that followed it. ``n <= 0`` (or a row shorter than ``n``) bans nothing.
    The ``<bos>`` at the start takes part like a word (it is never generated again anyway).
    """
    t = seq.shape[1]
    if n <= 0 or t < n:
        return logp
    windows = seq.unfold(1, n, 1)  # (B, t-n+1, n): every n-gram of the row
    if n == 1:
        hit = torch.ones(windows.shape[:2], dtype=torch.bool, device=seq.device)  # every word seen is banned
    else:
        hit = (windows[:, :, :-1] == seq[:, None, t - n + 1 :]).all(
            -1
        )  # (B, t-n+1) prefixes equal to the tail
    rows, starts = hit.nonzero(as_tuple=True)  # (M,), (M,): each earlier n-gram whose prefix is the tail
    out = logp.clone()
    out[rows, windows[rows, starts, -1]] = -torch.inf  # the word that completed it
    return out


def _strip(ids: list[int]) -> list[int]:
    out = []
    for t in ids:
        if t in (EOS_ID, PAD_ID):
            break
        out.append(t)
    return out
