"""Corrupted semantics (ExLM §3.1, Fig. 4, App. C): the share of original tokens whose meaning
the input loses entirely, because every one of its k copies is [MASK].

Repeated MLM masks p of the k·T copies, so a token is lost with probability p^k (App. C). The
share is measured on the masks the objective itself draws (`Objective.draw`), and set beside
p^k and the interval a binomial count of that many tokens at p^k falls in 95 % of the time:
the central interval of Binomial(n, p^k) (scipy's `binom.interval`), divided by n. The
objective draws an exact number of masks per block (`maskbench.objectives.masking`), so copies
are drawn without replacement, and that number is round(p · maskable copies): in short blocks
the rounding moves the share of masked copies away from p (`drawn_p` gives the share really
drawn). The binomial is App. C's model, and a share outside its interval says the draw departs
from it.

MLM and MAE-LM mask each original token once: k = 1, the share is p. ExLM masks original tokens
too, and expands each masked one into k [MASK] states, none of which carries it: its k here is
also 1 (the states are not copies of the token).
"""

from __future__ import annotations

import torch
from scipy.stats import binom

from maskbench.analysis import not_applicable, why_unmasked
from maskbench.objectives.registry import Objective, RepeatedMLM, VariableLengthMLM

CONFIDENCE = 0.95


def copies_per_token(objective: Objective) -> int:
    """How many input copies each original token has: Repeated MLM's k, else 1."""
    return objective.k if isinstance(objective, RepeatedMLM) else 1


def why_not_measured(objective: Objective) -> str | None:
    """Why corruption does not apply to `objective` (None when it does)."""
    if isinstance(objective, VariableLengthMLM):
        return (f"{objective.name} draws its mask ratio per batch, so there is no single p**k to compare the share "
                "with")
    return why_unmasked(objective)


def fully_masked(masked_at: torch.Tensor, k: int, length: int) -> torch.Tensor:
    """(B, length) boolean: original tokens all of whose k copies are among the input positions
    `masked_at` (B, n); copy c of token i is input position i·k + c."""
    counts = torch.zeros(masked_at.shape[0], length, dtype=torch.long, device=masked_at.device)
    counts.scatter_add_(1, masked_at // k, torch.ones_like(masked_at))
    return counts == k


def binomial_interval(tokens: int, probability: float, confidence: float = CONFIDENCE) -> list[float]:
    """The share interval [lo, hi] that a Binomial(tokens, probability) count falls in with
    `confidence`, as shares of `tokens`."""
    lo, hi = binom.interval(confidence, tokens, probability)
    return [float(lo) / tokens, float(hi) / tokens]


def corruption(objective: Objective, blocks: torch.Tensor, draws: dict) -> dict:
    """The corrupted-semantics record of `objective`'s `draws` on `blocks` (N, T), the [CLS]
    and [SEP] of each block not counted (never masked)."""
    why = why_not_measured(objective)
    if why:
        return not_applicable(why)
    k, p = copies_per_token(objective), objective.mask_ratio
    lost = fully_masked(draws["masked_at"], k, blocks.shape[1])[:, 1:-1]
    drawn_p = draws["masked_at"].shape[1] / (k * (blocks.shape[1] - 2))
    tokens, fully = lost.numel(), int(lost.sum())
    expected = p ** k
    interval = binomial_interval(tokens, expected)
    share = fully / tokens
    note = ("ExLM: each masked token becomes k [MASK] states, none of which carries it, so a masked token is lost "
            "(k = 1 here; the run's k counts its states)" if objective.name == "exlm" else
            f"{objective.name}: every token has {k} cop{'y' if k == 1 else 'ies'} in the input")
    return {"applies": True, "k": k, "p": p, "tokens": tokens, "fully_masked": fully, "share": share,
            "drawn_p": drawn_p, "expected": expected, "interval": interval,
            "within": interval[0] <= share <= interval[1], "note": note}
