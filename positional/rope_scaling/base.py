"""The settings every RoPE frequency method shares (see __init__.py for the registry)."""
from dataclasses import dataclass, field
from typing import ClassVar

from ..base import Settings


@dataclass
class ScalingSettings(Settings):
    rope_factor: float = 1.0                  # s: target length / original length
    rope_original_max_position: int = field(default=0, metadata={"length": True})  # L; 0: the training length
    length_dependent: ClassVar[bool] = False  # True: frequencies follow the current length (keys cached raw)

    def check(self, cfg):
        if not self.rope_factor > 0:
            raise ValueError(f"rope_factor must be > 0, got {self.rope_factor}; 1 means no scaling")
        if self.rope_original_max_position < 0:
            raise ValueError(f"rope_original_max_position must be >= 0 (0: block_size), got "
                             f"{self.rope_original_max_position}")
