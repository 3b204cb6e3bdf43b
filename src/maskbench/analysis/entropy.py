"""Prediction entropy (ExLM App. E, Fig. 5 and 12): how spread out the model's prediction of a
fully masked token is, in bits. The more of a token's context is lost, the more candidates
stay plausible (multimodality), and the higher the entropy.

Each prediction of a token that the input hides entirely is scored: MLM's and MAE-LM's
prediction at a masked position; Repeated MLM's predictions at the k copies of a token whose
copies are all masked (tokens with a visible copy are left out); ExLM's k states of a masked
token. A token's entropy is the mean over its k predictions, and the record gives the mean and
standard deviation over tokens. Dropout is off (`torch.no_grad`, eval mode set by the caller).
"""

from __future__ import annotations

import math

import torch

from maskbench.analysis import not_applicable, why_unmasked
from maskbench.analysis.corruption import copies_per_token
from maskbench.objectives import ExLM, Objective


def entropy_bits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in bits of the softmax of each row of `logits` (..., V)."""
    log_p = logits.float().log_softmax(dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1) / math.log(2)


def predicted_tokens(objective: Objective, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The original token (B, n') each of the objective's predictions (in its output order) is
    of, and how many predictions a fully masked token gets."""
    if isinstance(objective, ExLM):  # the states of each masked token, k in a row, tokens in order
        return masked_at.repeat_interleave(objective.k, dim=1), objective.k
    k = copies_per_token(objective)
    return masked_at // k, k


@torch.no_grad()
def token_entropies(objective: Objective, blocks: torch.Tensor, draws: dict) -> torch.Tensor:
    """Entropy in bits of every fully masked token of `blocks` (B, T) under `draws`, averaged
    over its predictions: a 1-D tensor."""
    out = objective.step(blocks, draws)
    token, k = predicted_tokens(objective, draws["masked_at"])
    bits = entropy_bits(out.logits).view(token.shape)
    sums = torch.zeros(blocks.shape, dtype=torch.float64, device=bits.device).scatter_add_(1, token, bits.double())
    counts = torch.zeros(blocks.shape, dtype=torch.long, device=bits.device).scatter_add_(1, token,
                                                                                         torch.ones_like(token))
    return (sums[counts == k] / k).cpu()


def entropy(objective: Objective, batches) -> dict:
    """The entropy record over `batches`, an iterable of (blocks, draws)."""
    why = why_unmasked(objective)
    if why:
        return not_applicable(why)
    bits = torch.cat([token_entropies(objective, blocks, draws) for blocks, draws in batches])
    if bits.numel() == 0:
        return not_applicable("no token had all its copies masked in the analysis blocks (p**k too small for them)")
    return {"applies": True, "bits": float(bits.mean()), "std_bits": float(bits.std()) if bits.numel() > 1 else 0.0,
            "tokens": int(bits.numel())}
