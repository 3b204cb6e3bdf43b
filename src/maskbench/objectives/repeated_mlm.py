"""Repeated MLM (ExLM §3.1, Fig. 2): every token is repeated k times before p of the repeated
tokens are masked, so the share of [MASK] in the input stays p while the share of tokens whose
meaning is lost — all k copies masked — falls to p^k (App. C). Positions run over the repeated
sequence (k·T of them), and fine-tuning repeats its inputs the same way (§3.2)."""

from __future__ import annotations

import torch

from maskbench.objectives.base import (FinetuneInputs, Inspection, Objective, ObjectiveOutput, SpecialTokens,
                                      check_int, check_ratio)
from maskbench.objectives.cards import card
from maskbench.objectives.masking import indices_of, mask_at, mask_count, random_mask
from maskbench.objectives.mlm import score_masked


DEFAULTS = card("repeated_mlm").defaults


def repeat_each(x: torch.Tensor, k: int) -> torch.Tensor:
    """[a, b] -> [a, a, b, b] along the last dimension (k = 2)."""
    return x.repeat_interleave(k, dim=-1)


class RepeatedMLM(Objective):
    name = "repeated_mlm"
    valid_loss_measures = ("nats per masked token: cross-entropy of the original tokens at the fixed masked "
                           "positions, all k copies of each masked, averaged over the copies")

    def __init__(self, encoder, specials: SpecialTokens, k: int = DEFAULTS["k"],
                 mask_ratio: float = DEFAULTS["mask_ratio"]):
        super().__init__(encoder, specials)
        self.k = check_int("k", k, 1)
        self.mask_ratio = check_ratio("mask_ratio", mask_ratio)

    @classmethod
    def encoder_settings(cls, seq_len: int, knobs: dict, scheme: str) -> dict:
        return {"max_position": seq_len * knobs.get("k", DEFAULTS["k"]), "position_scheme": scheme}

    def pretraining_info(self) -> dict:
        return {"objective": self.name, "k": self.k, "mask_ratio": self.mask_ratio}

    def draw(self, tokens: torch.Tensor, generator: torch.Generator | None) -> dict:
        B, T = tokens.shape
        # the k copies of [CLS] and of [SEP] are never masked
        masked = random_mask(B, T * self.k, self.mask_ratio, generator, device=tokens.device, margin=self.k)
        return {"masked_at": indices_of(masked, mask_count(T * self.k - 2 * self.k, self.mask_ratio))}

    def _step(self, tokens: torch.Tensor, draws: dict,
              hidden_states: bool = False) -> tuple[ObjectiveOutput, Inspection]:
        repeated = repeat_each(tokens, self.k)
        masked_at = draws["masked_at"]
        inputs = repeated.masked_fill(mask_at(masked_at, repeated.shape[1]), self.specials.mask)
        return score_masked(self.encoder, inputs, repeated, masked_at, hidden_states)

    def masked_nll(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Every copy of a chosen token masked (no copy gives it away), each copy scored."""
        copies = (masked_at[..., None] * self.k + torch.arange(self.k, device=masked_at.device)).flatten(1)
        out = self(tokens, {"masked_at": copies})
        return out.loss * out.num_predictions / self.k, masked_at.numel()

    @classmethod
    def finetune_inputs(cls, info: dict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> FinetuneInputs:
        k = info["k"]
        B, T = input_ids.shape
        return FinetuneInputs({"input_ids": repeat_each(input_ids, k),
                               "attention_mask": repeat_each(attention_mask, k)},
                              torch.zeros(B, dtype=torch.long, device=input_ids.device),
                              token_index=(torch.arange(T, device=input_ids.device) * k).expand(B, T))  # first copies

    @classmethod
    def finetune_max_length(cls, info: dict, max_position: int) -> int:
        return max_position // info["k"]
