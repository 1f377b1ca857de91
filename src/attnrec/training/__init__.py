"""Training: the one loop and its settings."""

from attnrec.training.loop import train
from attnrec.training.result import TrainResult
from attnrec.training.train_config import TrainConfig

__all__ = ["TrainConfig", "TrainResult", "train"]
