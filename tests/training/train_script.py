"""Training runs that the tests start as separate processes: torchrun workers and runs killed with SIGKILL.

    python tests/training/train_script.py resume STATE_DIR [--sleep S]   # trains, saving mid-epoch
    torchrun --nproc_per_node 2 tests/training/train_script.py ddp OUT   # 2-process DDP run

The same functions run in the test process for the uninterrupted / one-process reference.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: synthetic_logs.ring_log

from attnrec import Recommender  # noqa: E402
from attnrec.data.split import leave_one_out  # noqa: E402
from attnrec.models.sasrec import SASRec  # noqa: E402
from attnrec.training import distributed  # noqa: E402
from synthetic_logs import ring_log  # noqa: E402

# Dropout > 0 and BCE (negatives drawn from the numpy generator) so that resuming has to restore
# both the data stream and torch's RNG to come out identical.
RESUME_MODEL = {"hidden": 16, "n_layers": 1, "max_len": 10, "dropout": 0.3, "loss": "bce"}
RESUME_TRAIN = {
    "batch_size": 16,
    "max_epochs": 3,
    "patience": 100,
    "seed": 5,
    "threads": 1,
    "checkpoint_every": 2,
    "device": "cpu",
}
# DDP vs one process: no dropout (its masks depend on how rows are split), 145 users so the last
# global batch of 16 has one row and rank 1 gets an empty shard.
DDP_MODEL = {"hidden": 16, "n_layers": 1, "max_len": 10, "dropout": 0.0, "loss": "ce"}
DDP_TRAIN = {"batch_size": 16, "max_epochs": 3, "patience": 100, "seed": 2, "threads": 1, "device": "cpu"}
DDP_USERS = 145


def resume_run(state_dir: Path | None, sleep: float = 0.0) -> Recommender:
    """Train SASRec on the ring log; ``sleep`` slows every batch down so a test can kill it mid-epoch."""
    data = ring_log()
    rec = Recommender("sasrec", RESUME_MODEL, RESUME_TRAIN)
    if sleep:
        original = SASRec.loss

        def slow_loss(self: SASRec, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            time.sleep(sleep)
            return original(self, batch)

        SASRec.loss = slow_loss  # type: ignore[method-assign]
    rec.fit(data, leave_one_out(data), state_dir=state_dir, progress=False)
    return rec


def ddp_run() -> Recommender:
    data = ring_log(n_users=DDP_USERS)
    rec = Recommender("sasrec", DDP_MODEL, DDP_TRAIN)
    rec.fit(data, leave_one_out(data), progress=False)
    return rec


def summary(rec: Recommender) -> dict[str, Any]:
    assert rec.train_result_ is not None
    return {"train": rec.train_result_.to_dict(), "world_size": distributed.env_world_size()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["resume", "ddp"])
    p.add_argument("path", type=Path)
    p.add_argument("--sleep", type=float, default=0.0)
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.mode == "resume":
        resume_run(a.path, a.sleep)
        return
    destroy, alive = torch.distributed.destroy_process_group, []

    def counting_destroy(*args: Any, **kwargs: Any) -> None:
        # Every object the collector tracks, garbage not yet collected included: a wrapper left for
        # the collector would be freed at interpreter shutdown, after the group (see cleanup()).
        alive.append(sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects()))
        destroy(*args, **kwargs)

    torch.distributed.destroy_process_group = counting_destroy
    rec = ddp_run()
    if distributed.is_main():
        from safetensors.torch import save_file

        a.path.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.contiguous() for k, v in rec.core.state_dict().items()}, str(a.path / "weights.safetensors")
        )
        (a.path / "summary.json").write_text(
            json.dumps({**summary(rec), "ddp_alive_at_destroy": alive}, default=float)
        )


if __name__ == "__main__":
    main()
