"""Random masking with an exact count per sequence, and expansion of chosen tokens into copies.

As in MAE's `random_masking`: rank uniform noise and take the lowest `n` per row, so every
sequence has the same number of masked positions and shapes stay static. For the same reason
`expand_tokens` requires every row to expand the same number of tokens.
"""

from __future__ import annotations

import torch


def mask_count(maskable_length: int, ratio: float) -> int:
    """Masked positions per sequence: round(ratio · length), at least one."""
    return max(1, int(round(ratio * maskable_length)))


def random_mask(
    batch: int, length: int, ratio: float, generator: torch.Generator | None, device=None,
    margin: int = 1,
) -> torch.Tensor:
    """Boolean (batch, length) mask with exactly `mask_count(length - 2 * margin, ratio)` True
    per row; the first and last `margin` positions (the [CLS] and [SEP] copies) are never masked."""
    lo, hi = margin, length - margin
    n = mask_count(hi - lo, ratio)
    noise = torch.rand(batch, hi - lo, generator=generator, device=device)
    chosen = noise.argsort(dim=1)[:, :n] + lo
    mask = torch.zeros(batch, length, dtype=torch.bool, device=device)
    mask.scatter_(1, chosen, True)
    return mask


def random_subset(selected: torch.Tensor, count: int, generator: torch.Generator | None) -> torch.Tensor:
    """Exactly `count` of the True entries of each row of `selected`, chosen uniformly."""
    noise = torch.rand(selected.shape, generator=generator, device=selected.device)
    noise = noise.masked_fill(~selected, 2.0)  # unselected entries rank last
    chosen = noise.argsort(dim=1)[:, :count]
    subset = torch.zeros_like(selected)
    subset.scatter_(1, chosen, True)
    return subset & selected


def expand_tokens(expand: torch.Tensor, k: int, expanded_per_row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace each token flagged in `expand` (B, T) by k consecutive copies.

    Returns `source` (B, T'), the original position each slot copies, and `clone` (B, T'), the
    copy's index 1..k (0 for tokens not expanded); T' = T + (k - 1) · expanded_per_row, and every
    row must flag exactly `expanded_per_row` tokens.
    """
    B, T = expand.shape
    expanded_length = T + (k - 1) * expanded_per_row
    repeats = torch.where(expand, k, 1)
    flat = torch.repeat_interleave(torch.arange(B * T, device=expand.device), repeats.flatten(),
                                   output_size=B * expanded_length)
    source = flat.view(B, expanded_length) % T
    first_slot = torch.cumsum(repeats, dim=1) - repeats
    offset = torch.arange(expanded_length, device=expand.device) - first_slot.gather(1, source)
    clone = torch.where(expand.gather(1, source), offset + 1, 0)
    return source, clone


def indices_of(flags: torch.Tensor, per_row: int) -> torch.Tensor:
    """Column indices (B, per_row), in order, of the True entries of `flags` (B, T), which holds
    exactly `per_row` of them in every row. A stable sort rather than `nonzero`, so the shape is
    known without a device sync."""
    return (~flags).to(torch.uint8).argsort(dim=1, stable=True)[:, :per_row]


def mask_at(indices: torch.Tensor, length: int) -> torch.Tensor:
    """Boolean (B, length) mask, True at the column `indices` (B, n) of each row."""
    mask = torch.zeros(indices.shape[0], length, dtype=torch.bool, device=indices.device)
    return mask.scatter(1, indices, True)


def gather_rows(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """x (B, T, C) at the positions `indices` (B, n) of each row: (B, n, C)."""
    return x.gather(1, indices[..., None].expand(-1, -1, x.shape[-1]))
