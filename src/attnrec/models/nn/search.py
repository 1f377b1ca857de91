"""The ranges every transformer's default search space starts from (``attnrec tune``): the network's
width, depth, heads, window and dropout, and the optimiser's rate, weight decay and schedule. Each
model adds its own settings after them (the order is the order trials sample in)."""

from __future__ import annotations

from collections.abc import Mapping

from attnrec.search_space import Choice, Dimension, Float, Int

# hidden is a multiple of every n_heads choice.
NETWORK_RANGES: Mapping[str, Dimension] = {
    "hidden": Choice((32, 64, 128)),
    "n_layers": Int(1, 3),
    "n_heads": Choice((1, 2)),
    "max_len": Choice((50, 100, 200)),
    "dropout": Float(0.0, 0.5),
}
OPTIMISER_RANGES: Mapping[str, Dimension] = {
    "lr": Float(1e-4, 1e-2, log=True),
    "weight_decay": Choice((0.0, 1e-5, 1e-4)),
    "lr_schedule": Choice(("constant", "cosine")),
}
