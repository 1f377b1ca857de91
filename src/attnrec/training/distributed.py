"""torch.distributed plumbing for the training loop: the process group torchrun describes, batch sharding.

``torchrun --nproc_per_node N -m attnrec train ...`` starts N processes with ``WORLD_SIZE``,
``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` in their environment; :func:`init`
joins them into one process group (gloo on CPU, NCCL on CUDA). Every rank builds the same global
batch from the same seeded generator and trains on its own slice of the rows
(:func:`shard_batch`), so N processes see exactly the batches one process would.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Collection
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


def env_world_size() -> int:
    """``WORLD_SIZE`` from the environment (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def local_rank() -> int:
    """``LOCAL_RANK``: this process's index on its node (selects the GPU)."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """Global rank: of the process group when there is one, else ``RANK`` from the environment."""
    return dist.get_rank() if is_initialized() else int(os.environ.get("RANK", "0") or 0)


def world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def is_main() -> bool:
    """True on the process that evaluates, logs and writes files (rank 0)."""
    return rank() == 0


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init(device: torch.device) -> bool:
    """Join the process group described by the environment; True if this call created it.

    Does nothing (returns False) for a single process or when a group already exists. Uses
    NCCL for a CUDA ``device`` (and selects GPU ``LOCAL_RANK``), gloo otherwise. The rendezvous
    is ``env://``: ``MASTER_ADDR``/``MASTER_PORT`` as set by torchrun. Collectives time out after
    ``ATTNREC_DIST_TIMEOUT`` seconds (default 3600): the other ranks wait that long for rank 0's
    validation.
    """
    if env_world_size() <= 1 or is_initialized():
        return False
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this PyTorch build has no torch.distributed")
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=float(os.environ.get("ATTNREC_DIST_TIMEOUT", "3600")))
    dist.init_process_group(backend=backend, init_method="env://", timeout=timeout)
    return True


def cleanup(sync: bool = True) -> None:
    """Leave the process group (if any), with ``sync`` once every rank has arrived.

    The barrier matters: a rank that tears gloo down while a peer is still sending (the last
    broadcast of the run) can abort the peer with ``terminate called without an active exception``.
    So does the collection before the group goes: DistributedDataParallel sits in a reference
    cycle, so a dropped wrapper (and its reducer's hold on the group) lives until the garbage
    collector runs; left to interpreter shutdown, freeing it aborts the process with the same
    message (about one run in twenty on two cores). Callers drop their wrapper first.
    Pass ``sync=False`` when leaving because of an error, which the other ranks may never reach.
    """
    if is_initialized():
        if sync and world_size() > 1:
            dist.barrier()
        gc.collect()
        dist.destroy_process_group()


def barrier() -> None:
    if is_initialized() and world_size() > 1:
        dist.barrier()


def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` from rank ``src`` on every rank (pickled through the process group)."""
    if not is_initialized() or world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum of ``t`` over ranks, in place (and returned)."""
    if is_initialized() and world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def batch_rows(batch: dict[str, torch.Tensor]) -> int:
    """Rows of a batch: the leading dimension of its first tensor (models put a per-row tensor first)."""
    return int(next(iter(batch.values())).shape[0]) if batch else 0


def shard_bounds(rows: int, rank: int, world: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of ``rank``: ``np.array_split`` sizes (the first ``rows % world`` get one more)."""
    base, extra = divmod(rows, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def shard_batch(
    batch: dict[str, torch.Tensor], rank: int, world: int, shared: Collection[str] = ()
) -> dict[str, torch.Tensor]:
    """This rank's contiguous slice of the rows of a global batch.

    Tensors whose leading dimension is the batch's row count are sliced; the others (and the
    keys in ``shared``, e.g. negatives drawn once per batch) are kept whole on every rank.
    """
    if world == 1:
        return batch
    rows = batch_rows(batch)
    lo, hi = shard_bounds(rows, rank, world)
    return {k: v if k in shared or v.dim() == 0 or v.shape[0] != rows else v[lo:hi] for k, v in batch.items()}
