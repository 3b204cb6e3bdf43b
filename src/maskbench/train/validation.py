"""Validation loss during and after pretraining, comparable across objectives.

Each objective's training loss measures something of its own (ExLM's includes the [CLS]/[SEP]
emissions and divides by m + 2, repeated MLM scores k copies, variable-length MLM masks a
varying share), so pretraining reports instead, on a fixed set of validation blocks, the
negative log-likelihood in nats per masked token of the original tokens at fixed masked
positions: the same blocks (the first of the valid stream, cut as the run's `blocks` setting cuts
its training blocks: `maskbench.train.blocks`) and the same positions (`EVAL_MASK_RATIO` of each
block's body, drawn once from `EVAL_SEED`) for every objective, each scoring them its own way
(`Objective.masked_nll`). AR and DAR report their own next-token loss on the same blocks,
which does not compare with the masked ones; the gap to the unigram baseline of the token
streams (`maskbench.data.corpus.unigram_loss`) applies to both kinds.

As in nanoGPT's `estimate_loss`, the set is small (`eval_blocks` blocks), so evaluating it every
`eval_every` steps costs little.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from maskbench.device import precision as autocast_policy
from maskbench.objectives.registry import Objective, SpecialTokens
from maskbench.objectives.cards import MASK_RATIO
from maskbench.objectives.masking import indices_of, mask_count, random_mask
from maskbench.train.blocks import Documents, Windows

EVAL_MASK_RATIO = MASK_RATIO  # the papers' MLM ratio
EVAL_SEED = 0           # the masked positions are the same for every run


@dataclass(frozen=True)
class ValidationSet:
    """Validation blocks (N, T) framed as [CLS] … [SEP], and the masked positions (N, n) of each,
    in increasing order, never the frame."""

    blocks: torch.Tensor
    masked_at: torch.Tensor


def validation_sets(source: Windows | Documents, count: int) -> list[ValidationSet]:
    """The first blocks `source` cuts from the valid stream, `count` windows or the documents that
    hold as many tokens (`maskbench.train.blocks`), one set per block length (one for windows,
    several for documents), with masked positions drawn once from `EVAL_SEED`."""
    generator = torch.Generator().manual_seed(EVAL_SEED)
    sets = []
    for blocks in source.first(count):
        n, length = blocks.shape
        masked = random_mask(n, length, EVAL_MASK_RATIO, generator)
        sets.append(ValidationSet(blocks, indices_of(masked, mask_count(length - 2, EVAL_MASK_RATIO))))
    return sets


def validation_set(stream: np.ndarray, seq_len: int, specials: SpecialTokens, count: int) -> ValidationSet:
    """The first `count` consecutive non-overlapping windows of the valid stream (fewer if it is
    shorter), with their fixed masks: what the analyses and the generation perplexity measure
    every run on, whatever blocks it trained on. A stream shorter than one block is refused (the
    tokenize stage checks it against the params it ran with)."""
    body = seq_len - 2
    if stream.size < body:
        raise ValueError(f"valid token stream has {stream.size} tokens, fewer than a block of {body}: re-run the "
                         "tokenize stage, which checks it against the runs' seq_len")
    (windows,) = validation_sets(Windows(stream, seq_len, specials), count)
    return windows


def valid_loss(objective: Objective, valid: list[ValidationSet], batch: int, device, precision: str) -> float:
    """Nats per scored token of `objective` on the sets `valid` together (see the module docstring), in eval mode
    (no dropout), at the run's `precision` (`maskbench.device.precision`); the objective's mode
    is restored after."""
    return _per_token(objective.masked_nll, objective, valid, batch, device, precision)


def valid_loss_floor(objective: Objective, valid: list[ValidationSet], batch: int, device, precision: str) -> float:
    """The part of `valid_loss` no prediction can lower (`Objective.masked_nll_floor`), nats per
    scored token: 0 but for ExLM's DAG, whose transitions' cost a unigram predictor pays on top
    of the unigram loss, so an arm has learned when its loss is below the two together."""
    return _per_token(objective.masked_nll_floor, objective, valid, batch, device, precision)


@torch.no_grad()
def _per_token(score, objective: Objective, valid: list[ValidationSet], batch: int, device, precision: str) -> float:
    training = objective.training
    objective.eval()
    total, count = 0.0, 0
    for part in valid:
        for start in range(0, len(part.blocks), batch):
            with autocast_policy(device, precision):
                nll, n = score(part.blocks[start:start + batch].to(device),
                               part.masked_at[start:start + batch].to(device))
            total, count = total + nll.item(), count + n
    objective.train(training)
    return total / count
