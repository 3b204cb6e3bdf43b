"""Random masking with an exact count per sequence, and expansion of chosen tokens into copies.

As in MAE's `random_masking`: rank uniform noise and take the lowest `n` per row, so every
sequence has the same number of masked positions and shapes stay static. For the same reason
`expand_tokens` pads rows that expand fewer tokens than the batch's most.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from maskbench.objectives.cost import mask_count  # the count the cost model (maskbench.resources) takes too


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


class Expansion(NamedTuple):
    source: torch.Tensor  # (B, T'): the original position each slot copies
    clone: torch.Tensor   # (B, T'): the copy's index 1..k for flagged tokens, 0 for the others and padding
    first: torch.Tensor   # (B, T): each token's first slot
    real: torch.Tensor    # (B, T'): False on the padding slots that end a row with fewer flagged tokens


def expand_tokens(expand: torch.Tensor, k: int, most: int | None = None) -> Expansion:
    """Replace each token flagged in `expand` (B, T) by k consecutive copies.

    T' = T + (k - 1) · `most`, the most tokens a row flags (read back from the device when not
    given). A row that flags fewer ends with padding slots (copies of its last token, clone
    index 0, `real` False), so a batch of rows with different counts keeps one shape.
    """
    B, T = expand.shape
    repeats = torch.where(expand, k, 1)
    first = repeats.cumsum(dim=1) - repeats
    lengths = repeats.sum(dim=1)
    expanded_length = int(lengths.max()) if most is None else T + (k - 1) * most
    slot = torch.arange(expanded_length, device=expand.device).expand(B, -1).contiguous()
    source = torch.searchsorted(first, slot, right=True) - 1
    real = slot < lengths[:, None]
    clone = torch.where(expand.gather(1, source) & real, slot - first.gather(1, source) + 1, 0)
    return Expansion(source, clone, first, real)


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
