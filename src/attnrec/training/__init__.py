"""Training: the one loop and its settings."""

from attnrec.training.config import TrainConfig
from attnrec.training.loop import TrainResult, train

__all__ = ["TrainConfig", "TrainResult", "train"]
