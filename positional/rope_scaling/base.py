"""The settings every RoPE frequency method shares (see __init__.py for the registry)."""
from dataclasses import dataclass
from typing import ClassVar

from ..base import Settings, setting


@dataclass
class ScalingSettings(Settings):
    rope_factor: float = setting(1.0, above=0, why="1: no scaling")   # s: target length / original length
    rope_original_max_position: int = setting(0, at_least=0, length=True)  # L; 0: the training length
    length_dependent: ClassVar[bool] = False  # True: frequencies follow the current length (keys cached raw)
