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
import torch.nn.functional as F

from maskbench.analysis import not_applicable, why_unmasked
from maskbench.analysis.corruption import copies_per_token
from maskbench.objectives.registry import ExLM, Objective


def entropy_bits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in bits of the softmax of each row of `logits` (..., V)."""
    log_p = logits.float().log_softmax(dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1) / math.log(2)


def predicted_tokens(objective: Objective, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The original token (B, n') each of the objective's predictions (in the order `inspect`
    gives them) is of, and how many predictions a fully masked token gets."""
    if isinstance(objective, ExLM):  # the states of each masked token, k in a row, tokens in order
        return masked_at.repeat_interleave(objective.k, dim=1), objective.k
    k = copies_per_token(objective)
    return masked_at // k, k


@torch.no_grad()
def fully_masked_predictions(objective: Objective, blocks: torch.Tensor,
                             draws: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(entropy in bits, cross-entropy of the original token in nats) of every fully masked
    token of `blocks` (B, T) under `draws`, each averaged over the token's predictions: two 1-D
    tensors in the same token order."""
    seen = objective.inspect(blocks, draws)
    token, k = predicted_tokens(objective, draws["masked_at"])
    counts = torch.zeros(blocks.shape, dtype=torch.long, device=token.device).scatter_add_(1, token,
                                                                                         torch.ones_like(token))
    nats = F.cross_entropy(seen.logits.float(), seen.labels, reduction="none")

    def per_token(values: torch.Tensor) -> torch.Tensor:
        sums = torch.zeros(blocks.shape, dtype=torch.float64, device=token.device)
        return (sums.scatter_add_(1, token, values.view(token.shape).double())[counts == k] / k).cpu()

    return per_token(entropy_bits(seen.logits)), per_token(nats)


def mean_std(values: torch.Tensor) -> tuple[float, float]:
    return float(values.mean()), float(values.std()) if values.numel() > 1 else 0.0


def entropy(objective: Objective, batches) -> dict:
    """The entropy record over `batches`, an iterable of (blocks, draws)."""
    why = why_unmasked(objective)
    if why:
        return not_applicable(why)
    bits, nats = (torch.cat(parts) for parts in zip(*(fully_masked_predictions(objective, blocks, draws)
                                                       for blocks, draws in batches)))
    if bits.numel() == 0:
        return not_applicable("no token had all its copies masked in the analysis blocks (p**k too small for them)")
    (mean_bits, std_bits), (nll, std_nll) = mean_std(bits), mean_std(nats)
    return {"applies": True, "bits": mean_bits, "std_bits": std_bits, "nll": nll, "std_nll": std_nll,
            "tokens": int(bits.numel())}
