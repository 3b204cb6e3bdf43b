"""Present fine-tuning inputs to an encoder the way it saw tokens in pretraining.

The objective that trained the encoder (recorded in `config.pretraining`) says how, through
`maskbench.objectives.finetune_inputs`: MLM-family encoders (mlm, varlen_mlm, MAE-LM's encoder)
read the batch as is and pool [CLS], as BERT/RoBERTa fine-tuning; ExLM expands every [CLS] and
[SEP] into k states, as in pretraining, and pools the first [CLS] state; Repeated MLM repeats
every token k times (ExLM App. B.2); AR and DAR keep causal attention and pool the last real
token, the only state that has seen the whole input (the GPT choice; "Look Ahead or Look
Around?" does not say how it pools). Heads get one state per input token (the state the
objective's `token_index` says it reads), the pooled state, and the pooled position in
input-token coordinates (QA reads its no-answer score there). Frozen-feature probes read every
layer of the encoder's own input instead (`EncoderView.layer_states`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from maskbench.model import Encoder
from maskbench.objectives import finetune_inputs
from maskbench.objectives.masking import gather_rows


class ViewOutput(NamedTuple):
    states: torch.Tensor  # (B, T, C), aligned with input_ids
    pooled: torch.Tensor  # (B, C)
    pool_position: torch.Tensor  # (B,), the input token whose state is `pooled`


class LayerStates(NamedTuple):
    hidden_states: tuple[torch.Tensor, ...]  # every layer's (B, T', C), embeddings first
    attention_mask: torch.Tensor  # (B, T'), 1 on real states, 0 on padding


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
        if inputs.token_index is not None:
            states = gather_rows(states, inputs.token_index)
        pooled = states[torch.arange(states.shape[0], device=states.device), inputs.pool_position]
        return ViewOutput(states, pooled, inputs.pool_position)

    def layer_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> LayerStates:
        """Every layer's states of the input the encoder is given (embeddings first, the last
        after the final layer norm) and that input's attention mask, for frozen-feature probes,
        which mean-pool a layer over its real states: `(h * m[..., None]).sum(1) / m.sum(1,
        keepdim=True)`. These are the encoder's own T' states (ExLM's k states of each [CLS] and
        [SEP], Repeated MLM's k copies of every token), not aligned with the input ids."""
        inputs = finetune_inputs(self.pretraining, input_ids, attention_mask)
        out = self.encoder(**inputs.encoder_kwargs, output_hidden_states=True)
        return LayerStates(out.hidden_states, inputs.encoder_kwargs["attention_mask"])
