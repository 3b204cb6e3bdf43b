"""How the encoder knows where a token is: the position schemes an `EncoderConfig` can select.

- `absolute`: a learned embedding per position added to the token embedding (BERT, RoBERTa).
- `rope`: rotary position embedding (Su et al., 2021) on queries and keys, no learned table.
- `rope2d`: ExLM's 2-D RoPE (ExLM §4.2): the head dimension is split in half; the first half is
  rotated by the token's position in the original sequence, the second half by its clone index
  (1..k for the k expanded states of a [MASK], 0 for ordinary tokens), so the clones of one
  [MASK] share a position yet stay distinguishable.
- `relative_bias`: a T5-style bucketed relative position bias (Raffel et al., 2020), one scalar
  per head and bucket, shared across layers and added to the attention logits.
- `absolute+relative_bias`: both, as MAE-LM's encoder learns them (MAE-LM App. C).
- `rope+relative_bias`, `rope2d+relative_bias`: a rotary frame and the bias, so an objective's
  encoder can take the bias under the RoPE every run shares (see `maskbench.model.schemes`).

A scheme is its `+`-joined parts; the encoder adds whichever parts a scheme names.

Rotations pair neighbouring channels (2i, 2i+1), so a rotary frame is just a vector of angles
per position: `rope2d` concatenates the angles of its two halves and applies them in one go.

Saved beside every checkpoint with `encoder.py` (see there): it imports only torch.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

POSITION_SCHEMES = ("absolute", "rope", "rope2d", "relative_bias", "absolute+relative_bias", "rope+relative_bias",
                    "rope2d+relative_bias")


def scheme_parts(scheme: str) -> frozenset[str]:
    """The components of a scheme name, e.g. {"absolute", "relative_bias"}."""
    if scheme not in POSITION_SCHEMES:
        raise ValueError(f"position_scheme={scheme!r}; expected one of {POSITION_SCHEMES}")
    return frozenset(scheme.split("+"))


def _inverse_frequencies(width: int, base: float, device) -> torch.Tensor:
    """RoPE frequencies for `width` channels rotated in pairs: base^(-2i/width), i < width/2."""
    return base ** (-torch.arange(0, width, 2, device=device, dtype=torch.float32) / width)


def rotary_frame(positions: torch.Tensor, clone_index: torch.Tensor | None, head_dim: int,
                 base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotation angles, each (B, 1, T, head_dim / 2), ready for `apply_rotary`.

    With `clone_index` (2-D RoPE) the first head_dim/2 channels turn with `positions` and the
    rest with `clone_index`; without it all channels turn with `positions`.
    """
    if clone_index is None:
        angles = positions[..., None].float() * _inverse_frequencies(head_dim, base, positions.device)
    else:
        freq = _inverse_frequencies(head_dim // 2, base, positions.device)
        angles = torch.cat([positions[..., None].float() * freq, clone_index[..., None].float() * freq], dim=-1)
    angles = angles.unsqueeze(1)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, frame: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate each channel pair (2i, 2i+1) of `x` (B, H, T, D) by the frame's angle i."""
    cos, sin = frame
    even, odd = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2).type_as(x)


def relative_bucket(relative: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bidirectional buckets: half the buckets per direction; within a direction, exact
    buckets for distances below a quarter of `num_buckets`, then logarithmically wider ones up to
    `max_distance` (farther distances share the last bucket)."""
    half = num_buckets // 2
    exact = half // 2
    distance = relative.abs()
    log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (half - exact)).long()).clamp(max=half - 1)
    return (relative > 0).long() * half + torch.where(distance < exact, distance, far)


class RelativePositionBias(nn.Module):
    """Per-head additive attention bias from the bucketed distance key − query, shared by all
    layers (T5). Distances are measured between the positions passed to the encoder, so an
    encoder that sees only some tokens (MAE-LM) still measures distances in the original text.

    A forward buckets the 2·max_position − 1 distances that positions in [0, max_position) can
    have (not the B·T² pairs), looks up each one's per-head bias and gathers that straight into
    a contiguous (B, n_head, T, T) tensor, the layout fused attention kernels take a bias in.
    The values are those of the bucket formula applied to every pair; the gradient scatters into
    per-distance slots rather than into `num_buckets` slots, which spreads a GPU's atomic adds
    over many more addresses. (The distances' buckets are not a buffer: `from_pretrained` leaves
    non-persistent buffers uninitialised.)
    """

    def __init__(self, n_head: int, num_buckets: int, max_distance: int, max_position: int):
        super().__init__()
        if num_buckets < 4 or num_buckets % 2:
            raise ValueError(f"relative_buckets={num_buckets}; expected an even number >= 4")
        if max_distance <= num_buckets // 4:
            raise ValueError(f"relative_max_distance={max_distance}; expected more than relative_buckets / 4")
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.max_position = max_position
        self.bias = nn.Embedding(num_buckets, n_head)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        """(B, T) positions in [0, max_position) -> (B, n_head, T, T) bias, contiguous."""
        B, T = positions.shape
        P = self.max_position
        distances = torch.arange(-(P - 1), P, device=positions.device)   # index d + P - 1
        per_distance = self.bias(relative_bucket(distances, self.num_buckets, self.max_distance)).t()  # (H, 2P-1)
        relative = positions[:, None, :] - positions[:, :, None] + (P - 1)
        index = relative.reshape(B, 1, T * T).expand(B, per_distance.shape[0], T * T)
        return per_distance.expand(B, -1, -1).gather(2, index).view(B, -1, T, T)
