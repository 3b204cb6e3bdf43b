"""What every objective shares: the special token ids it needs and the shape of its output."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass(frozen=True)
class SpecialTokens:
    pad: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialTokens":
        return cls(
            pad=tokenizer.pad_token_id,
            cls=tokenizer.cls_token_id,
            sep=tokenizer.sep_token_id,
            mask=tokenizer.mask_token_id,
        )


@dataclass
class ObjectiveOutput:
    loss: torch.Tensor
    num_predictions: int
    # For analyses: logits and gold ids at the predicted positions (N, V) and (N,).
    logits: torch.Tensor | None = None
    labels: torch.Tensor | None = None


class Objective(nn.Module):
    """An encoder plus whatever the objective adds (heads, decoders), trained end to end.

    Subclasses implement `forward(tokens, generator) -> ObjectiveOutput`, where `tokens` are
    (B, T) blocks that start with [CLS] and end with [SEP], and `pretraining_info() -> dict`,
    the name and knobs saved into the encoder config for fine-tuning to read back. `encoder`
    is what fine-tuning keeps.
    """

    def __init__(self, encoder: nn.Module, specials: SpecialTokens):
        super().__init__()
        self.encoder = encoder
        self.specials = specials
