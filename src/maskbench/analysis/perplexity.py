"""Generation perplexity (Look Around Eq. 2, Tab. 7): how well a pretrained model predicts each
next token of held-out text from the tokens before it, exp of the mean negative log-likelihood.

A causal model (`ar`) reads the prefix under its causal mask and predicts the next token at the
prefix's last position. A masked model (`mlm`, `varlen_mlm`) has no next-token head: as the paper
evaluates it, the next token is a [MASK] appended to the prefix, and the model's prediction at
that [MASK] is the next-token distribution; the tokens after it are cut off (keys masked out), so
the model sees exactly "prefix [MASK]". Every token of a block's body (between its [CLS] and
[SEP]) is predicted once, from all the tokens of the block before it.

Named `generation_perplexity` everywhere, never the pretraining loss's `valid_perplexity` (the
exponential of each objective's own validation loss, which scores masked positions with both
sides visible). `maskbench perplexity --run R` writes `runs/perplexity/{run}/metrics.json` on
the first `generation_perplexity.blocks` validation blocks of the run's corpus.

Memory is bounded by one batch, not by the number of blocks measured: the logits of every body
token at once grow with it (64 blocks x 512 tokens x 32,768 words at paper scale: 4 GB, and as
much again for their log-softmax). `generation_perplexity.rows` sets how many tokens an encoder
call predicts: the masked reading reads `rows` "prefix [MASK]" sequences, one prediction each;
the causal one as many whole blocks as hold `rows` body tokens, one block at least, so it holds
the logits of max(`rows`, T - 2) tokens, T the block length (paper scale: 510 x 32,768 floats,
67 MB). Only the per-token NLL, (blocks, T - 2), is kept.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from maskbench.analysis import not_applicable
from maskbench.align import use_backend
from maskbench.analysis.load import load_objective
from maskbench.config import run_settings
from maskbench.data.corpus import load_stream
from maskbench.device import compute_device, precision
from maskbench.io import write_json
from maskbench.provenance import arithmetic
from maskbench.objectives.cards import CARDS
from maskbench.objectives.registry import Objective
from maskbench.objectives.ar import causal_mask
from maskbench.train.validation import validation_set

log = logging.getLogger(__name__)


def why_not_generative(objective: Objective) -> str | None:
    """Why generation perplexity does not apply (None for AR and the MLMs: MLM, variable-length
    MLM). DAR predicts groups, the other masked objectives other inputs than "prefix [MASK]"."""
    if objective.card.generation:
        return None
    masked = ", ".join(name for name, card in CARDS.items() if card.generation == "masked")
    return (f"{objective.name}: Look Around Tab. 7 measures generation perplexity of an autoregressive model and of "
            f"masked models read as 'prefix [MASK]' ({masked}) only")


@torch.no_grad()
def causal_nll(encoder, blocks: torch.Tensor) -> torch.Tensor:
    """(B, T - 2) negative log-likelihoods of each body token from the tokens before it, in one
    encoder call holding (B, T - 2, V) logits: `batched_causal_nll` bounds B."""
    hidden = encoder(blocks, attn_mask=causal_mask(blocks.shape[1], blocks.device)).last_hidden_state
    logits = encoder.lm_logits(hidden[:, :-2]).float()
    return -F.log_softmax(logits, dim=-1).gather(-1, blocks[:, 1:-1, None])[..., 0]


def batched_causal_nll(encoder, blocks: torch.Tensor, rows: int) -> torch.Tensor:
    """`causal_nll` of `blocks` (B, T), as many blocks a call as hold `rows` body tokens (one
    block at least): a call then predicts about as many tokens as one of `masked_nll`'s, and
    never reads more than `rows` sequences, however many blocks are measured."""
    per_call = max(1, rows // (blocks.shape[1] - 2))
    return torch.cat([causal_nll(encoder, batch) for batch in blocks.split(per_call)])


@torch.no_grad()
def masked_nll(encoder, blocks: torch.Tensor, mask_id: int, rows: int) -> torch.Tensor:
    """(B, T - 2) negative log-likelihoods of each body token i predicted at a [MASK] put in its
    place, the keys after it masked out ("prefix [MASK]"), in batches of `rows` sequences."""
    B, T = blocks.shape
    targets = torch.arange(1, T - 1, device=blocks.device)                      # the body positions
    keys = torch.arange(T, device=blocks.device)[None, :] <= targets[:, None]     # (T - 2, T)
    nll = torch.empty(B, T - 2, device=blocks.device)
    flat = torch.arange(B * (T - 2), device=blocks.device)  # one sequence per (block, body position)
    for chunk in flat.split(rows):
        b, j = chunk // (T - 2), chunk % (T - 2)
        inputs = blocks[b].scatter(1, targets[j, None], mask_id)
        hidden = encoder(inputs, attention_mask=keys[j].long()).last_hidden_state
        logits = encoder.lm_logits(hidden[torch.arange(len(chunk)), targets[j]]).float()
        nll[b, j] = F.cross_entropy(logits, blocks[b, targets[j]], reduction="none")
    return nll


def generation_perplexity(objective: Objective, blocks: torch.Tensor, rows: int) -> dict:
    """{"generation_perplexity", "nll_nats" (mean), "nll_std" (over tokens), "tokens",
    "block_nll" (each block's mean, the unit a comparison resamples: tokens of one block are not
    independent)} of `objective` on `blocks` (B, T): every body token predicted from its prefix."""
    encoder = objective.encoder.eval()
    if objective.card.generation == "causal":
        nll = batched_causal_nll(encoder, blocks, rows)
    else:
        nll = masked_nll(encoder, blocks, objective.specials.mask, rows)
    nll = nll.double()
    mean = nll.mean().item()
    return {"generation_perplexity": math.exp(mean), "nll_nats": mean, "nll_std": nll.std().item(),
            "tokens": nll.numel(), "block_nll": nll.mean(dim=1).tolist()}


def measure(config: dict, run: str, inputs: dict, outputs: dict) -> dict:
    """The stage job: load the run, measure it on the first held-out blocks, write its record."""
    settings, spec, asked = run_settings(config, run), config["runs"][run], config["generation_perplexity"]
    device = compute_device(settings["device"], settings["threads"])
    use_backend(config["align"]["backend"])
    objective, _ = load_objective(spec, Path(inputs["model"]), Path(inputs["objective"]))
    objective.to(device)
    why = why_not_generative(objective)
    if why:
        record = not_applicable(why)
    else:
        valid = validation_set(load_stream(Path(inputs["tokens"]), "valid"), settings["seq_len"], objective.specials,
                               asked["blocks"])
        with precision(device, settings["precision"]):
            measured = generation_perplexity(objective, valid.blocks.to(device), asked["rows"])
        record = {"applies": True, "objective": spec["objective"], **measured}
    write_json(outputs["metrics"], {"run": run, **record, "arithmetic": arithmetic(device)})
    log.info("generation perplexity of %s: %s", run, record)
    return record
