"""Random masking with an exact count per sequence.

As in MAE's `random_masking`: rank uniform noise and take the lowest `n` per row, so every
sequence has the same number of masked positions and shapes stay static.
"""

from __future__ import annotations

import torch


def mask_count(maskable_length: int, ratio: float) -> int:
    """Masked positions per sequence: round(ratio · length), at least one."""
    return max(1, int(round(ratio * maskable_length)))


def random_mask(
    batch: int, length: int, ratio: float, generator: torch.Generator | None, device=None,
    exclude_ends: bool = True,
) -> torch.Tensor:
    """Boolean (batch, length) mask with exactly `mask_count` True per row.

    With `exclude_ends`, the first and last positions ([CLS] and [SEP]) are never masked.
    """
    lo, hi = (1, length - 1) if exclude_ends else (0, length)
    n = mask_count(hi - lo, ratio)
    noise = torch.rand(batch, hi - lo, generator=generator, device=device)
    chosen = noise.argsort(dim=1)[:, :n] + lo
    mask = torch.zeros(batch, length, dtype=torch.bool, device=device)
    mask.scatter_(1, chosen, True)
    return mask
