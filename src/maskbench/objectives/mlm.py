"""Masked language modelling, RoBERTa-style but as in MAE-LM and ExLM: a fixed fraction of
tokens is replaced by [MASK] (no 80/10/10 replacement) and only masked positions are scored."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from maskbench.objectives.base import Inspection, Objective, ObjectiveOutput, SpecialTokens, check_ratio
from maskbench.objectives.cards import card
from maskbench.objectives.masking import gather_rows, indices_of, mask_count, mask_at, random_mask


def score_masked(encoder, inputs: torch.Tensor, targets: torch.Tensor, masked_at: torch.Tensor,
                 hidden_states: bool = False) -> tuple[ObjectiveOutput, Inspection]:
    """Encode `inputs` and take the cross-entropy of `targets` at the masked positions only,
    `masked_at` (B, n) in increasing order per row (the order of boolean indexing, without its
    data-dependent shape)."""
    out = encoder(inputs, output_hidden_states=hidden_states)
    logits = encoder.lm_logits(gather_rows(out.last_hidden_state, masked_at).flatten(0, 1))
    labels = targets.gather(1, masked_at).flatten()
    loss = F.cross_entropy(logits.float(), labels)
    return (ObjectiveOutput(loss=loss, num_predictions=labels.numel()),
            Inspection(logits=logits, labels=labels, hidden_states=out.hidden_states,
                       input_is_mask=mask_at(masked_at, inputs.shape[1])))


class MaskedLM(Objective):
    name = "mlm"
    valid_loss_measures = ("nats per masked token: cross-entropy of the original tokens at the fixed masked "
                           "positions, [MASK] in their place")

    def __init__(self, encoder, specials: SpecialTokens, mask_ratio: float = card("mlm").defaults["mask_ratio"]):
        super().__init__(encoder, specials)
        self.mask_ratio = check_ratio("mask_ratio", mask_ratio)

    def pretraining_info(self) -> dict:
        return {"objective": self.name, "mask_ratio": self.mask_ratio}

    def draw_ratio(self, generator: torch.Generator | None, device) -> float:
        """The mask ratio of this batch."""
        return self.mask_ratio

    def draw(self, tokens: torch.Tensor, generator: torch.Generator | None) -> dict:
        B, T = tokens.shape
        ratio = self.draw_ratio(generator, tokens.device)
        masked = random_mask(B, T, ratio, generator, device=tokens.device)
        return {"masked_at": indices_of(masked, mask_count(T - 2, ratio))}

    def _step(self, tokens: torch.Tensor, draws: dict,
              hidden_states: bool = False) -> tuple[ObjectiveOutput, Inspection]:
        masked_at = draws["masked_at"]
        inputs = tokens.masked_fill(mask_at(masked_at, tokens.shape[1]), self.specials.mask)
        return score_masked(self.encoder, inputs, tokens, masked_at, hidden_states)

    def masked_nll(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """MLM's own loss at those positions; needs only the encoder and its tied LM head, so
        it measures any encoder (the untrained one of the `none` control too)."""
        out, _ = MaskedLM._step(self, tokens, {"masked_at": masked_at})
        return out.loss * out.num_predictions, out.num_predictions
