"""Autoregressive SSL (Look Around §3, the GPT-style baseline): each token is predicted from the
tokens before it under a causal attention mask. Fine-tuning keeps the causal mask and pools the
last real token's state, the only one that has read the whole input (GPT fine-tuning)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from maskbench.model.encoder import causal_mask
from maskbench.objectives.base import FinetuneInputs, Inspection, Objective, ObjectiveOutput


def last_real_token(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last non-padding token of each right-padded row."""
    return attention_mask.long().sum(dim=1) - 1


class CausalLM(Objective):
    name = "ar"
    valid_loss_measures = ("nats per predicted token: AR's own next-token cross-entropy on the validation blocks; "
                           "not comparable with the masked objectives' values, only through the unigram gap")

    def pretraining_info(self) -> dict:
        return {"objective": self.name}

    def _step(self, tokens: torch.Tensor, draws: dict,
              hidden_states: bool = False) -> tuple[ObjectiveOutput, Inspection]:
        out = self.encoder(tokens, attn_mask=causal_mask(tokens.shape[1], tokens.device),
                           output_hidden_states=hidden_states)
        logits = self.encoder.lm_logits(out.last_hidden_state[:, :-1]).flatten(0, 1)
        labels = tokens[:, 1:].flatten()
        loss = F.cross_entropy(logits.float(), labels)
        return (ObjectiveOutput(loss=loss, num_predictions=labels.numel()),
                Inspection(logits=logits, labels=labels, hidden_states=out.hidden_states))

    def masked_nll(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Its own loss (DAR's too, its group sizes drawn from a fixed seed): a causal model has
        no masked positions to score, so `masked_at` goes unused."""
        out = self(tokens, self.draw(tokens, torch.Generator(device=tokens.device).manual_seed(0)))
        return out.loss * out.num_predictions, out.num_predictions

    @classmethod
    def finetune_inputs(cls, info: dict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> FinetuneInputs:
        return FinetuneInputs({"input_ids": input_ids, "attention_mask": attention_mask,
                               "attn_mask": causal_mask(input_ids.shape[1], input_ids.device)},
                              last_real_token(attention_mask))
