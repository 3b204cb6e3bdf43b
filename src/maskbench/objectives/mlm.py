"""Masked language modelling, RoBERTa-style but as in MAE-LM and ExLM: a fixed fraction of
tokens is replaced by [MASK] (no 80/10/10 replacement) and only masked positions are scored."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from maskbench.objectives.base import Objective, ObjectiveOutput, SpecialTokens
from maskbench.objectives.masking import random_mask


class MaskedLM(Objective):
    def __init__(self, encoder, specials: SpecialTokens, mask_ratio: float = 0.15):
        super().__init__(encoder, specials)
        if not 0.0 < mask_ratio < 1.0:
            raise ValueError(f"mask_ratio={mask_ratio}; expected 0 < mask_ratio < 1")
        self.mask_ratio = mask_ratio

    def pretraining_info(self) -> dict:
        return {"objective": "mlm", "mask_ratio": self.mask_ratio}

    def forward(self, tokens: torch.Tensor, generator: torch.Generator | None = None) -> ObjectiveOutput:
        B, T = tokens.shape
        masked = random_mask(B, T, self.mask_ratio, generator, device=tokens.device)
        inputs = tokens.masked_fill(masked, self.specials.mask)
        hidden = self.encoder(inputs).last_hidden_state
        logits = self.encoder.lm_logits(hidden[masked])  # score masked positions only
        labels = tokens[masked]
        loss = F.cross_entropy(logits.float(), labels)
        return ObjectiveOutput(loss=loss, num_predictions=labels.numel(), logits=logits, labels=labels)
