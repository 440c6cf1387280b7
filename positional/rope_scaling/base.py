"""Settings shared by the RoPE frequency methods (the settings API of issue #10).

Stand-in until the lead's settings API lands in main: same names and fields, so
yarn.py and ntk_by_parts.py are written in their final shape. On merge, main's
version of this file wins.
"""
from dataclasses import dataclass
from typing import ClassVar


@dataclass
class ScalingSettings:
    rope_factor: float = 1.0                  # s = target length / original length
    rope_original_max_position: int = 0       # L; 0: the model's block_size (resolved before the call)
    length_dependent: ClassVar[bool] = False  # True for dynamic NTK (frequencies follow the current length)

    def check(self, cfg):
        """Raise ValueError with one actionable line if a value cannot work."""
        if not self.rope_factor > 0:
            raise ValueError(f"rope_factor must be > 0, got {self.rope_factor}; 1 means no scaling")
