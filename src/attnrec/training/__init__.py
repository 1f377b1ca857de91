"""Training: the one loop and its settings."""

from attnrec.training.config import TrainConfig
from attnrec.training.loop import train
from attnrec.training.result import TrainResult

__all__ = ["TrainConfig", "TrainResult", "train"]
