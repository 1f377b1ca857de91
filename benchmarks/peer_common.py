"""What the workers of the peer comparison (``benchmarks/peers.py``) share: the work folder, peak memory,
attnrec's full-ranking rule for the peers' scores, and package versions.

The workers run inside each library's own environment, so this module imports the standard library
only at import time (numpy and torch inside the functions), never attnrec.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

WORK = Path(os.environ.get("ATTNREC_PEERS_DIR", "/tmp/attnrec-peers"))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def full_ranks(scores: Any, targets: Any, hist_rows: Any, hist_cols: Any, pad: Any) -> Any:
    """attnrec's full-ranking rule (``attnrec.evaluation.protocol``), for the peers' scores.

    ``scores`` is (B, n) over a library's internal item ids; ``pad`` the columns that are no item;
    ``(hist_rows, hist_cols)`` the history entries to exclude. The target stays a candidate even
    when it repeats a history item, and ties count against it. Returns 0-based ranks; a target the
    library does not know (``targets < 0``) gets the largest int64 (a miss at every cut-off).
    """
    import torch

    b = scores.shape[0]
    rows = torch.arange(b)
    known = targets >= 0
    safe = torch.where(known, targets, torch.zeros_like(targets))
    target_scores = scores[rows, safe].clone()
    scores[:, pad] = -torch.inf
    scores[hist_rows, hist_cols] = -torch.inf
    scores[rows, safe] = -torch.inf
    ranks = (scores >= target_scores[:, None]).sum(dim=1)
    return torch.where(known, ranks, torch.full_like(ranks, torch.iinfo(ranks.dtype).max))


def ranking_metrics(ranks: Any, k: int = 10) -> dict[str, float]:
    import numpy as np

    r = np.asarray(ranks, dtype=np.float64)
    hit = r < k
    return {
        f"NDCG@{k}": float(np.where(hit, 1.0 / np.log2(r + 2.0), 0.0).mean()) if len(r) else float("nan"),
        f"HR@{k}": float(hit.mean()) if len(r) else float("nan"),
    }


def versions(*names: str) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out
