"""Masked language modelling, RoBERTa-style but as in MAE-LM and ExLM: a fixed fraction of
tokens is replaced by [MASK] (no 80/10/10 replacement) and only masked positions are scored."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from maskbench.objectives.base import Objective, ObjectiveOutput, SpecialTokens, check_ratio
from maskbench.objectives.masking import random_mask


def score_masked(encoder, inputs: torch.Tensor, targets: torch.Tensor, masked: torch.Tensor,
                 output_hidden_states: bool = False) -> ObjectiveOutput:
    """Encode `inputs` and take the cross-entropy of `targets` at the `masked` positions only."""
    out = encoder(inputs, output_hidden_states=output_hidden_states)
    logits = encoder.lm_logits(out.last_hidden_state[masked])
    labels = targets[masked]
    loss = F.cross_entropy(logits.float(), labels)
    return ObjectiveOutput(loss=loss, num_predictions=labels.numel(), logits=logits, labels=labels,
                           hidden_states=out.hidden_states, input_is_mask=masked)


class MaskedLM(Objective):
    name = "mlm"

    def __init__(self, encoder, specials: SpecialTokens, mask_ratio: float = 0.15):
        super().__init__(encoder, specials)
        self.mask_ratio = check_ratio("mask_ratio", mask_ratio)

    def pretraining_info(self) -> dict:
        return {"objective": self.name, "mask_ratio": self.mask_ratio}

    def draw_ratio(self, generator: torch.Generator | None, device) -> float:
        """The mask ratio of this batch."""
        return self.mask_ratio

    def forward(self, tokens: torch.Tensor, generator: torch.Generator | None = None,
                output_hidden_states: bool = False) -> ObjectiveOutput:
        B, T = tokens.shape
        masked = random_mask(B, T, self.draw_ratio(generator, tokens.device), generator, device=tokens.device)
        inputs = tokens.masked_fill(masked, self.specials.mask)
        return score_masked(self.encoder, inputs, tokens, masked, output_hidden_states)
