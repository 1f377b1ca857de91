"""The causality check the causal sequence models' tests share: a later item never changes an earlier
output."""

from __future__ import annotations

from collections.abc import Callable

import torch

SEQ = torch.tensor([[0, 0, 3, 7, 1, 9, 4, 2, 8, 5, 6, 11]])  # left-padded, 12 positions


def assert_causal(
    encode: Callable[[torch.Tensor], torch.Tensor], position: int = 7, new_item: int = 20
) -> None:
    """Changing the item at ``position`` leaves every earlier position's state of ``encode`` unchanged and
    changes its own (so the check cannot pass on a model that ignores its input)."""
    changed = SEQ.clone()
    changed[0, position] = new_item
    with torch.no_grad():
        a, b = encode(SEQ), encode(changed)
    assert torch.allclose(a[0, :position], b[0, :position], atol=1e-6)
    assert not torch.allclose(a[0, position], b[0, position], atol=1e-4)
