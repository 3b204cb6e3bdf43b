"""Present fine-tuning inputs to an encoder the way it saw tokens in pretraining.

The objective that trained the encoder (recorded in `config.pretraining`) says how, through
`maskbench.objectives.registry.finetune_inputs`: MLM-family encoders (mlm, varlen_mlm, MAE-LM's encoder)
read the batch as is and pool [CLS], as BERT/RoBERTa fine-tuning; ExLM expands every [CLS] and
[SEP] into k states, as in pretraining, and pools the first [CLS] state; Repeated MLM repeats
every token k times (ExLM App. B.2); AR and DAR keep causal attention and pool the last real
token, the only state that has seen the whole input (the GPT choice; "Look Ahead or Look
Around?" does not say how it pools). Heads get one state per input token (the state the
objective's `token_index` says it reads), the pooled state, and the pooled position in
input-token coordinates (QA reads its no-answer score there). Frozen-feature probes read every
layer of the encoder's own input instead (`EncoderView.layer_states`).

What whole-sequence heads read is the fine-tuning setting `pooling`: `first`, the state at the
objective's pool position ([CLS], or AR's last token) as BERT does, or `mean`, the mean of the
encoder's real final states. MLM never trains [CLS] (it is never masked nor predicted), so a
pretrained encoder's [CLS] state is an arbitrary function of its input, while in a random
encoder it is close to an average of the input's embeddings: pooling [CLS] handicaps exactly the
pretrained arms. Measured on Rotten Tomatoes (docs/notes/2026-11-23-transfer.md), mean pooling closes part
of that gap, so it is the default.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn as nn

from maskbench.model.encoder import Encoder
from maskbench.objectives.registry import finetune_inputs
from maskbench.objectives.masking import gather_rows


class ViewOutput(NamedTuple):
    states: torch.Tensor  # (B, T, C), aligned with input_ids
    pooled: torch.Tensor  # (B, C)
    pool_position: torch.Tensor  # (B,), the input token whose state is `pooled`


class LayerStates(NamedTuple):
    hidden_states: tuple[torch.Tensor, ...]  # every layer's (B, T', C), embeddings first
    attention_mask: torch.Tensor  # (B, T'), 1 on real states, 0 on padding


POOLINGS = ("mean", "first")


class EncoderView(nn.Module):
    def __init__(self, encoder: Encoder, pooling: str = "mean"):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"finetune pooling={pooling!r}; expected one of {list(POOLINGS)}")
        self.encoder = encoder
        self.pooling = pooling
        self.pretraining = dict(encoder.config.pretraining or {})

    @property
    def width(self) -> int:
        return self.encoder.config.n_embd

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> ViewOutput:
        inputs = finetune_inputs(self.pretraining, input_ids, attention_mask)
        states = self.encoder(**inputs.encoder_kwargs).last_hidden_state
        if self.pooling == "mean":
            pooled = mean_over_real(states, inputs.encoder_kwargs["attention_mask"])
        if inputs.token_index is not None:
            states = gather_rows(states, inputs.token_index)
        if self.pooling == "first":
            pooled = states[torch.arange(states.shape[0], device=states.device), inputs.pool_position]
        return ViewOutput(states, pooled, inputs.pool_position)

    def layer_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> LayerStates:
        """Every layer's states of the input the encoder is given (embeddings first, the last
        after the final layer norm) and that input's attention mask, for frozen-feature probes,
        which mean-pool a layer over its real states (`mean_over_real`). These are the encoder's own T' states (ExLM's k
        states of each [CLS] and
        [SEP], Repeated MLM's k copies of every token), not aligned with the input ids."""
        inputs = finetune_inputs(self.pretraining, input_ids, attention_mask)
        out = self.encoder(**inputs.encoder_kwargs, output_hidden_states=True)
        return LayerStates(out.hidden_states, inputs.encoder_kwargs["attention_mask"])


def mean_over_real(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, C) states averaged over the positions where `attention_mask` (B, T) is 1."""
    weights = attention_mask.to(states.dtype).unsqueeze(-1)
    return (states * weights).sum(1) / weights.sum(1).clamp(min=1.0)
