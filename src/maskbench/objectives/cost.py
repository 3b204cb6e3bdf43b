"""What one training sequence of an objective costs, in the matrix products' floating-point
operations and bytes, without torch: each objective's card (`maskbench.objectives.cards`) states
its sequences as `Passes`, and `maskbench.resources` turns them into a job's runtime and memory.

A Transformer block of width d and inner width f holds 4d² + 2df weights; a training step costs
6 FLOPs per weight and position (2 forward, 4 backward) plus attention's QKᵀ and AV, 12·d·P per
position over P positions (Kaplan et al. 2020). Memory: weights, gradients and AdamW's moments
(16 bytes a parameter), one micro-batch's activations (Korthikanti et al. 2022) and its logits.
"""

from __future__ import annotations

from dataclasses import dataclass

ADAMW_BYTES = 16   # a trained parameter: float32 weight and gradient, AdamW's two moments
WEIGHT_BYTES = 4   # a parameter that is only read (forward passes)
LOGIT_BYTES = 12   # a vocabulary logit: its output, the float32 copy the loss takes, its gradient


def block_params(size: dict) -> int:
    """Weights of one Transformer block: Q, K, V, output projections and the MLP (biases and
    norms, under 0.5 % of them, left out)."""
    d = size["n_embd"]
    return d * (4 * d + 2 * size["n_inner"])


def encoder_params(size: dict, vocab: int) -> int:
    """The encoder's blocks, its token embedding (tied with the LM head) and the head's dense
    transform."""
    return size["n_layer"] * block_params(size) + (vocab + size["n_embd"]) * size["n_embd"]


def stack_flops(size: dict, positions: float, layers: int) -> float:
    """A training step's FLOPs (forward and backward) through `layers` blocks over one sequence
    of `positions` positions: 6 per weight and position, and 12·d·P per position for attention."""
    return layers * (6 * block_params(size) * positions + 12 * size["n_embd"] * positions ** 2)


def head_flops(size: dict, vocab: int, predictions: float) -> float:
    """A training step's FLOPs of the LM head over `predictions` positions: its d x d dense
    transform and the tied d x V projection."""
    return 6 * size["n_embd"] * (size["n_embd"] + vocab) * predictions


def activation_bytes(size: dict, half: bool) -> float:
    """Activations one position keeps per block for the backward pass: 18d + 4f bytes in 16-bit
    (Korthikanti et al. 2022, Eq. 2, without the attention scores, which a fused attention
    kernel does not keep); twice that in float32."""
    per_position = 18 * size["n_embd"] + 4 * size["n_inner"]
    return per_position if half else 2 * per_position


def mask_count(maskable_length: int, ratio: float) -> int:
    """Masked positions per sequence: round(ratio · length), at least one (every objective's
    masking, `maskbench.objectives.masking`, counts with this one function)."""
    return max(1, int(round(ratio * maskable_length)))


@dataclass(frozen=True)
class Passes:
    """What one training sequence of an objective runs: Transformer stacks as (positions, blocks),
    LM-head predictions, and what lies outside both (ExLM's transition projections and
    states-alignment DP): their FLOPs, parameters and activation bytes."""

    stacks: tuple[tuple[float, int], ...]
    predictions: float
    other_flops: float = 0.0
    other_params: int = 0
    other_bytes: float = 0.0
    alignment: tuple[int, int] | None = None   # ExLM's DP: (targets M, states L) of one sequence

    def alignment_flops(self) -> float:
        """The DP's forward α, backward β and transition gradient: about 1.5·M·L² (step, edge)
        pairs (benchmarks/README.md), 2 FLOPs each. A GPU plan prices it from its recorded time
        instead (maskbench.resources): it is not matrix-product work."""
        return 3 * self.alignment[0] * self.alignment[1] ** 2 if self.alignment else 0.0

    def flops(self, size: dict, vocab: int) -> float:
        """FLOPs of a training step (forward and backward) over one sequence."""
        return (sum(stack_flops(size, p, layers) for p, layers in self.stacks)
                + head_flops(size, vocab, self.predictions) + self.other_flops + self.alignment_flops())

    def training_bytes(self, size: dict, vocab: int, sequences: int, half: bool) -> float:
        """Peak memory of training on `sequences` sequences at a time: parameters with their
        gradients and AdamW state, and the activations and logits of the sequences."""
        per_sequence = (sum(p * layers for p, layers in self.stacks) * activation_bytes(size, half)
                        + LOGIT_BYTES * vocab * self.predictions + self.other_bytes)
        return ADAMW_BYTES * (encoder_params(size, vocab) + self.other_params) + sequences * per_sequence
