"""Variable-length masked objective (Look Around, Eq. 5 and Table 7): MLM whose mask ratio is
drawn uniformly from [mask_ratio_min, mask_ratio_max] (Table 7: [0.15, 0.3]), so the length of
the visible text varies between batches as it does between downstream prompts. The ratio is
drawn once per batch, so every sequence of a batch still masks the same number of tokens."""

from __future__ import annotations

import torch

from maskbench.objectives.base import SpecialTokens, check_ratio
from maskbench.objectives.cards import card
from maskbench.objectives.mlm import MaskedLM

DEFAULTS = card("varlen_mlm").defaults


class VariableLengthMLM(MaskedLM):
    name = "varlen_mlm"

    def __init__(self, encoder, specials: SpecialTokens, mask_ratio_min: float = DEFAULTS["mask_ratio_min"],
                 mask_ratio_max: float = DEFAULTS["mask_ratio_max"]):
        low = check_ratio("mask_ratio_min", mask_ratio_min)
        high = check_ratio("mask_ratio_max", mask_ratio_max)
        if low > high:
            raise ValueError(f"mask_ratio_min={low} exceeds mask_ratio_max={high}")
        super().__init__(encoder, specials, mask_ratio=(low + high) / 2)  # the mean ratio, for reference
        self.mask_ratio_min, self.mask_ratio_max = low, high

    def pretraining_info(self) -> dict:
        return {"objective": self.name, "mask_ratio_min": self.mask_ratio_min, "mask_ratio_max": self.mask_ratio_max}

    def draw_ratio(self, generator: torch.Generator | None, device) -> float:
        u = torch.rand(1, generator=generator, device=device).item()
        return self.mask_ratio_min + u * (self.mask_ratio_max - self.mask_ratio_min)
