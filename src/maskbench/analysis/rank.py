"""The 0.9-effective rank of token representations per layer (MAE-LM §2, Fig. 1 and 5): the
smallest number of singular values of a representation matrix (one row per token) whose
squared sum reaches 90 % of the total, i.e. how many directions hold 90 % of its energy.

MAE-LM's argument: in MLM, [MASK] representations take dimensions that real-token
representations then lack, so the representations of an input with [MASK] span more dimensions
than those of the same input without, and MAE-LM, whose encoder never sees [MASK], closes that
gap. Four matrices per layer (layer 0 = the embeddings' output):
- `with_mask`: MAE-LM §2's H^l, every token state of the input the objective builds in
  pretraining with its own masks (15 % in every default run), real and [MASK] alike (ExLM: the
  k states of each [MASK]). For MAE-LM that input has no [MASK] (δ = 0): the masked positions
  are left out of its encoder, so its H^l is the real tokens of a masked sentence;
- `real_with_mask`: this project's variant, the real-token rows of that matrix only ([MASK]
  rows dropped), which asks whether real tokens themselves lose dimensions;
- `real_without_mask`: MAE-LM §2's H̃^l, the same blocks with nothing masked, presented as
  fine-tuning presents them (`Objective.finetune_inputs`), at each input token's state;
- `mask`: the [MASK] states of the first input (null where the encoder sees none).
[CLS] and [SEP] (and their copies) are left out: they are no text.

Every layer's states are layer-normalised before their rank is taken (`comparable_states`):
the papers' encoders (RoBERTa, BERT) are post-LN, so each layer's output they measure is a
LayerNorm's output, while this encoder is pre-LN, whose states below the last layer are the raw
residual stream, with norms that grow with depth and differ between tokens, and a few dimensions
of large magnitude that can hold most of the energy on their own.

The matrix is centred (each column's mean subtracted) before its singular values are taken.
Uncentred, the common offset that all of a layer's states share (the well-known anisotropy of
Transformer representations) is one direction that can hold most of the energy and says
nothing about how many dimensions tell tokens apart; MAE-LM does not say, and its code is not
public. Centring measures the spread of the representations, which is what "dimensions taken
from real tokens" is about. All matrices of a record have the same number of rows, drawn from
a fixed seed, so their ranks compare.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from maskbench.analysis.corruption import copies_per_token
from maskbench.objectives.registry import Objective
from maskbench.objectives.masking import gather_rows


def effective_rank(matrix: np.ndarray | torch.Tensor, threshold: float = 0.9) -> int:
    """The number of singular values of the centred `matrix` (rows = tokens) whose squared sum
    first reaches `threshold` of the total; 0 for a matrix without spread."""
    x = np.asarray(matrix, dtype=np.float64)
    x = x - x.mean(axis=0, keepdims=True)
    energy = np.linalg.svd(x, compute_uv=False) ** 2
    total = energy.sum()
    if total <= 0.0:
        return 0
    return int(np.searchsorted(np.cumsum(energy) / total, threshold - 1e-12) + 1)


def frame_states(objective: Objective) -> int:
    """Input states of each block end (the [CLS] copies first, the [SEP] copies last) of an
    objective whose inspection does not mark them (ExLM's does: `input_is_frame`)."""
    return copies_per_token(objective)


def comparable_states(hidden_states: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """The encoder's states per layer as a post-LN encoder's layers output them: a LayerNorm
    without parameters (each state minus its own mean, over its own standard deviation) on every
    layer below the last, and the last layer as the encoder returns it, after its own final
    LayerNorm (`ln_f`, which already is what the heads read).

    Why not `ln_f` on every layer: its gain and bias were learned for the last layer's stream
    only; its bias is a common offset that centring removes anyway, but its gain would weight the
    dimensions of every other layer by a scale learned elsewhere, which changes singular values.
    A post-LN encoder gives each layer its own learned LayerNorm, which a pre-LN one has no
    counterpart of; the parameter-free part (each state centred and scaled to unit variance) is
    what every such LayerNorm shares, and it keeps a few tokens of large norm or a few dimensions
    of large magnitude in the residual stream from holding the energy on their own."""
    *below, last = hidden_states
    return [F.layer_norm(h.float(), h.shape[-1:]) for h in below] + [last.float()]


@torch.no_grad()
def masked_input_states(objective: Objective, blocks: torch.Tensor, draws: dict) -> dict[str, list[torch.Tensor]]:
    """Per layer, the rows (n, C) of the input the objective builds from `blocks` and `draws`,
    [CLS] and [SEP] left out: every state (`with_mask`, MAE-LM §2's H^l), the real tokens'
    (`real_with_mask`) and the [MASK] states (`mask`)."""
    seen = objective.inspect(blocks, draws, hidden_states=True)
    is_mask = seen.input_is_mask
    if seen.input_is_frame is not None:
        body = ~seen.input_is_frame
    else:
        ends = frame_states(objective)
        body = torch.zeros_like(is_mask)
        body[:, ends:is_mask.shape[1] - ends] = True
    states = comparable_states(seen.hidden_states)
    return {"with_mask": [h[body].cpu() for h in states],
            "real_with_mask": [h[body & ~is_mask].cpu() for h in states],
            "mask": [h[body & is_mask].cpu() for h in states]}


@torch.no_grad()
def unmasked_states(encoder, info: dict, objective_class: type[Objective], blocks: torch.Tensor) -> list[torch.Tensor]:
    """Per layer, the rows (n, C) of `encoder`'s state of every body token of `blocks`, fed as
    fine-tuning feeds the encoder an objective trained (`info` its pretraining record)."""
    inputs = objective_class.finetune_inputs(info, blocks, torch.ones_like(blocks))
    out = encoder(**inputs.encoder_kwargs, output_hidden_states=True)
    index = inputs.token_index if inputs.token_index is not None else torch.arange(blocks.shape[1],
                                                                                  device=blocks.device).expand_as(blocks)
    return [gather_rows(h, index)[:, 1:-1].flatten(0, 1).cpu() for h in comparable_states(out.hidden_states)]


def same_rows(matrices: dict[str, list[torch.Tensor]], rows: int,
              seed: int) -> tuple[dict[str, list[torch.Tensor]], int]:
    """Every non-empty matrix cut to the same number of rows: `rows`, or the fewest any has;
    each kind's rows drawn with `seed` and taken at every layer (the same tokens). Each kind
    draws from a generator of its own, so two kinds of as many rows (MAE-LM's `with_mask` and
    `real_with_mask`, the same matrix) keep the same rows."""
    kept = {kind: layers for kind, layers in matrices.items() if layers[0].shape[0] > 0}
    n = min(rows, *(layers[0].shape[0] for layers in kept.values()))
    picked = {kind: torch.from_numpy(np.sort(np.random.default_rng(seed).choice(layers[0].shape[0], n, replace=False)))
              for kind, layers in kept.items()}
    return {kind: [layer[picked[kind]] for layer in layers] for kind, layers in kept.items()}, n


def ranks_by_layer(matrices: dict[str, list[torch.Tensor]], kinds: tuple[str, ...], threshold: float) -> list[dict]:
    """[{"layer": i, kind: rank or None (no such rows)}] over the layers."""
    layers = len(next(iter(matrices.values())))
    return [{"layer": i, **{kind: effective_rank(matrices[kind][i], threshold) if kind in matrices else None
                            for kind in kinds}} for i in range(layers)]
