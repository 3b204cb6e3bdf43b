"""Present fine-tuning inputs to an encoder the way it saw tokens in pretraining.

The objective that trained the encoder (recorded in `config.pretraining`) says how, through
`maskbench.objectives.finetune_inputs`: MLM-family encoders (mlm, varlen_mlm, MAE-LM's encoder,
ExLM with clone index 0) read the batch as is and pool [CLS], as BERT/RoBERTa fine-tuning;
Repeated MLM repeats every token k times (ExLM App. B.2); AR and DAR keep causal attention and
pool the last real token, the only state that has seen the whole input (the GPT choice; "Look
Ahead or Look Around?" does not say how it pools). Heads get one state per input token, the pooled state, and the pooled
position in input-token coordinates (QA reads its no-answer score there).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from maskbench.model import Encoder
from maskbench.objectives import finetune_inputs


class ViewOutput(NamedTuple):
    states: torch.Tensor  # (B, T, C), aligned with input_ids
    pooled: torch.Tensor  # (B, C)
    pool_position: torch.Tensor  # (B,), the input token whose state is `pooled`


class EncoderView(nn.Module):
    def __init__(self, encoder: Encoder):
        super().__init__()
        self.encoder = encoder
        self.pretraining = dict(encoder.config.pretraining or {})

    @property
    def width(self) -> int:
        return self.encoder.config.n_embd

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> ViewOutput:
        inputs = finetune_inputs(self.pretraining, input_ids, attention_mask)
        states = self.encoder(**inputs.encoder_kwargs).last_hidden_state
        pooled = states[torch.arange(states.shape[0], device=states.device), inputs.pool_index]
        return ViewOutput(states[:, :: inputs.token_stride], pooled, inputs.pool_index // inputs.token_stride)
