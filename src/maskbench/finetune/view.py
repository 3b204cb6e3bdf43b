"""Present fine-tuning inputs to an encoder the way it saw tokens in pretraining.

Whatever the objective, the heads get one state per input token and one pooled state:
- MLM-family encoders (mlm, varlen_mlm, mae_lm's encoder, exlm with clone index 0): bidirectional
  attention, the [CLS] (first) state is pooled (BERT/RoBERTa fine-tuning);
- the objective's own presentation, when it defines one (`maskbench.objectives.finetune_inputs`),
  e.g. repeated tokens for Repeated MLM or causal attention and the last real token for AR/DAR.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from maskbench.model import Encoder


class EncoderView(nn.Module):
    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder = encoder
        self.pretraining = dict(encoder.config.pretraining or {})

    @property
    def width(self) -> int:
        return self.encoder.config.n_embd

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(token states (B, T, C) aligned with `input_ids`, pooled state (B, C))."""
        states = self.encoder(input_ids, attention_mask=attention_mask).last_hidden_state
        return states, states[:, 0]
