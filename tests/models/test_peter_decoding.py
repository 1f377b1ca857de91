"""PETER's decoding: generation stops at <eos>, never emits a special word, beam search beats greedy,
n-gram blocking stops a loop, and a Decoding out of range is refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnrec.config import ConfigError
from attnrec.models.peter import BOS_ID, EOS_ID, PAD_ID, PETER, UNK_ID, PETERConfig
from attnrec.recommend.explainer import Decoding

TINY = {"emsize": 16, "n_heads": 2, "ffn": 32, "dropout": 0.0}


class _Scripted(PETER):
    """Emits a scripted word sequence per row, then <eos>; counts decoding steps."""

    def __init__(self, scripts: list[list[int]]) -> None:
        super().__init__(PETERConfig(**TINY), 2, 2, 12)
        self.scripts, self.calls = scripts, 0

    def next_logprobs(
        self, user: torch.Tensor, item: torch.Tensor, feature: torch.Tensor | None, prefix: torch.Tensor
    ) -> torch.Tensor:
        self.calls += 1
        t = prefix.shape[1] - 1
        out = torch.full((len(user), 12), -10.0)
        for r in range(len(user)):
            script = self.scripts[int(user[r])] + [EOS_ID]
            out[r, script[min(t, len(script) - 1)]] = 0.0
        return out.log_softmax(-1)


@pytest.mark.parametrize("beam", [1, 3])
def test_generation_stops_at_eos(beam: int) -> None:
    model = _Scripted([[4, 5], [6, 7, 8, 9]]).eval()
    out = model.generate(torch.tensor([0, 1]), torch.tensor([1, 1]), max_len=10, beam=beam)
    assert out == [[4, 5], [6, 7, 8, 9]]
    assert model.calls == 5  # the longest row's <eos> came at step 5; no step after it
    model.calls = 0
    assert model.generate(torch.tensor([0]), torch.tensor([1]), max_len=10, beam=beam) == [[4, 5]]
    assert model.calls == 3
    assert model.generate(torch.tensor([1]), torch.tensor([1]), max_len=2, beam=beam) == [
        [6, 7]
    ]  # max length


def test_special_words_are_never_generated() -> None:
    torch.manual_seed(0)
    model = PETER(PETERConfig(**TINY), 2, 2, 12).eval()
    with torch.no_grad():  # make <unk> (then <pad>, <bos>) by far the likeliest next word everywhere
        model.hidden2token.bias[UNK_ID] = 50.0
        model.hidden2token.bias[PAD_ID] = model.hidden2token.bias[BOS_ID] = 40.0
        model.hidden2token.bias[EOS_ID] = -50.0
    u, i = torch.tensor([0, 1]), torch.tensor([1, 2])
    logp = model.next_logprobs(u, i, None, torch.full((2, 1), BOS_ID))
    assert torch.isinf(logp[:, [PAD_ID, BOS_ID, UNK_ID]]).all()
    for beam in (1, 3):
        for ids in model.generate(u, i, max_len=6, beam=beam):
            assert len(ids) == 6 and not set(ids) & {PAD_ID, BOS_ID, UNK_ID}


def test_beam_finds_a_better_sequence_than_greedy() -> None:
    class Trap(PETER):
        def next_logprobs(
            self, user: torch.Tensor, item: torch.Tensor, feature: torch.Tensor | None, prefix: torch.Tensor
        ) -> torch.Tensor:
            out = torch.full((len(user), 12), -30.0)
            for r, row in enumerate(prefix.tolist()):
                if len(row) == 1:  # greedy takes 4 (0.6), beam keeps 5 (0.4) whose next word is sure
                    out[r, 4], out[r, 5] = np.log(0.6), np.log(0.4)
                elif row[-1] == 4:
                    out[r, 6:11] = np.log(0.2)
                else:
                    out[r, EOS_ID] = 0.0
            return out

    model = Trap(PETERConfig(**TINY), 2, 2, 12).eval()
    u, i = torch.tensor([0]), torch.tensor([1])
    assert model.generate(u, i, max_len=2)[0][0] == 4
    assert model.generate(u, i, max_len=2, beam=2) == [[5]]


class _Looper(PETER):
    """Prefers the next word of the 8-word cycle 4 5 ... 11 4 5 ..., the ones after it less, never <eos>."""

    def next_logprobs(
        self, user: torch.Tensor, item: torch.Tensor, feature: torch.Tensor | None, prefix: torch.Tensor
    ) -> torch.Tensor:
        out = torch.full((len(user), 12), -30.0)
        for r, row in enumerate(prefix.tolist()):
            last = row[-1] if row[-1] >= 4 else 7
            for rank in range(8):
                out[r, 4 + (last - 4 + 1 + rank) % 8] = -float(rank)  # next in the cycle first
        return out.log_softmax(-1)


def _ngrams(ids: list[int], n: int) -> list[tuple[int, ...]]:
    return [tuple(ids[j : j + n]) for j in range(len(ids) - n + 1)]


@pytest.mark.parametrize("beam", [1, 3])
def test_ngram_blocking_stops_the_loop(beam: int) -> None:
    model = _Looper(PETERConfig(**TINY), 2, 2, 12).eval()
    u, i = torch.tensor([0, 1]), torch.tensor([1, 1])
    plain = model.generate(u, i, max_len=12, beam=beam)
    assert plain[0] == [
        8,
        9,
        10,
        11,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
    ]  # the paper's decoding loops through the cycle
    for n in (1, 2, 3):
        for ids in model.generate(u, i, max_len=12, beam=beam, no_repeat_ngram=n):
            grams = _ngrams(ids, n)
            assert len(grams) == len(set(grams)), (n, ids)  # no n-gram twice
    assert model.generate(u, i, max_len=12, beam=beam, no_repeat_ngram=0) == plain


def test_block_repeats_bans_exactly_the_words_that_complete_a_seen_ngram() -> None:
    from attnrec.models.peter import block_repeats

    seq = torch.tensor([[BOS_ID, 4, 5, 4, 6, 4]])  # after the final 4: bigrams (4,5) and (4,6) were seen
    logp = torch.zeros(1, 12)

    def banned(s: torch.Tensor, n: int) -> list[int]:
        return torch.isinf(block_repeats(logp, s, n))[0].nonzero().flatten().tolist()

    assert banned(seq, 2) == [5, 6]
    assert banned(seq, 1) == [BOS_ID, 4, 5, 6]  # every word already written
    assert banned(seq, 3) == []  # the tail (6, 4) came nowhere before
    assert banned(torch.tensor([[BOS_ID, 4, 5, 6, 4, 5]]), 3) == [6]  # (4, 5) was followed by 6
    assert torch.equal(block_repeats(logp, seq, 0), logp) and torch.equal(block_repeats(logp, seq, 7), logp)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"beam": 0}, "beam must be at least 1, not 0"),
        ({"max_len": 0}, "max_len must be at least 1 word, not 0"),
        ({"no_repeat_ngram": -1}, "no_repeat_ngram must be >= 0, not -1"),
    ],
)
def test_a_decoding_out_of_range_is_refused_not_replaced_by_the_default(
    settings: dict[str, int], message: str
) -> None:
    """A beam or a length of 0 once meant "the explainer's own" without a word; it is an error now."""
    with pytest.raises(ConfigError, match=message):
        Decoding(**settings)
    with pytest.raises(ConfigError, match=message):
        Decoding().but(**settings)
    assert Decoding(beam=4).but(beam=None, max_len=12) == Decoding(beam=4, max_len=12)
