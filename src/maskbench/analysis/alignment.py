"""How sharply ExLM aligns its states to the masked tokens: the measure behind its plateau.

ExLM's loss sums over every path through the DAG (App. H), so the gradient that teaches state u
to predict masked token y_i is weighted by the posterior that a path emits y_i at u. Only when
that posterior sits on the k states expanded from y_i's own [MASK] does u learn from its own
context; spread over the other masked tokens' states, every state is taught a mixture of the
block's masked tokens, which a unigram predictor already fits. The posterior sharpens only
once the emissions tell positions apart, and the emissions tell positions apart only once the
posterior is sharp: a plateau MLM does not have (its prediction at a position is always scored
against that position's token).

Three numbers per run, on the analysis blocks and masks:
- `own_posterior`: the share of each masked token's alignment posterior on its own [MASK]'s k
  states, averaged over the masked tokens (1 when every path aligns token i with [MASK] i;
  `even_share` = 1/m when it is spread evenly over the m masks' states);
- `next_transition`: the transition mass from each state to the states of the next expanded
  token (the path that visits one state per [MASK], in order), averaged over the states that
  have a successor;
- `own_log_prob` and `other_log_prob`: the mean log-probability, in nats, of a masked token at
  its own [MASK]'s states and at the other masks' states (null when one token is masked); their
  difference says how much the emissions tell positions apart;
- `dag_nll`: the DAG's negative log-likelihood of the masked tokens (all alignments summed, as
  pretraining's validation loss scores ExLM), in nats per masked token, on the run's own masks:
  whether it learned the input it trains on, which for p other than 15 % the validation loss's
  masks are not.
"""

from __future__ import annotations

import torch

from maskbench.align import dag_loss
from maskbench.analysis import not_applicable
from maskbench.objectives import ExLM, Objective


def alignment_posterior(log_emit: torch.Tensor, log_trans: torch.Tensor) -> torch.Tensor:
    """(B, m, L): the posterior that the DAG's paths emit target i at state u, d log Z / d log P_u(y_i)."""
    with torch.enable_grad():
        leaf = log_emit.detach().requires_grad_()
        (posterior,) = torch.autograd.grad(dag_loss(leaf, log_trans.detach()).sum(), leaf)
    return posterior


def expanded_token(m: int, k: int) -> torch.Tensor:
    """(L,): which expanded token each state belongs to: 0 for [CLS], i for masked token i, m + 1 for [SEP]."""
    return torch.arange(k * (m + 2)) // k


def own_states(m: int, k: int) -> torch.Tensor:
    """(m, L) boolean: masked token i's own states, k(i + 1) .. k(i + 2) - 1 (the [CLS]'s k come first)."""
    return expanded_token(m, k)[None, :] == torch.arange(1, m + 1)[:, None]


def alignment_measures(log_emit: torch.Tensor, log_trans: torch.Tensor, k: int) -> dict:
    """The record's numbers for emissions `log_emit` (B, m, L) and transitions `log_trans`
    (B, L, L, -inf off the DAG's edges) of states laid out as ExLM expands a block."""
    B, m, L = log_emit.shape
    if L != k * (m + 2):
        raise ValueError(f"{L} states for {m} masked tokens and k={k}; ExLM lays out k(m + 2) = {k * (m + 2)}")
    own = own_states(m, k).to(log_emit.device)
    group = expanded_token(m, k).to(log_emit.device)
    to_next = group[None, :] == group[:, None] + 1                            # (L, L) v -> u: u's token follows v's
    has_successor = group < m + 1
    interior = (group >= 1) & (group <= m)
    posterior = alignment_posterior(log_emit, log_trans)
    transitions = log_trans.exp()
    others = ~own & interior[None, :]
    return {
        "masked_tokens": B * m, "k": k,
        "own_posterior": float((posterior * own).sum(-1).mean()),
        "even_share": 1.0 / m,
        "next_transition": float((transitions * to_next).sum(-1)[:, has_successor].mean()),
        "own_log_prob": float(log_emit[:, own].mean()),
        "other_log_prob": float(log_emit[:, others].mean()) if others.any() else None,  # none when m = 1
    }


@torch.no_grad()
def alignment(objective: Objective, batched: list[tuple[torch.Tensor, dict]]) -> dict:
    """The alignment record of `objective` on `batched` (blocks, draws) batches."""
    if not isinstance(objective, ExLM):
        return not_applicable(f"{objective.name} predicts each masked token at its own position: only ExLM "
                              "aligns states to masked tokens through a DAG")
    log_emit, log_trans, log_z = [], [], []
    for blocks, draws in batched:
        out = objective.step(blocks, draws)
        log_emit.append(out.log_emissions)
        log_trans.append(out.log_transitions.float())
        log_z.append(out.log_z.double())
    measures = alignment_measures(torch.cat(log_emit), torch.cat(log_trans), objective.k)
    return {"applies": True, **measures, "dag_nll": float(-torch.cat(log_z).sum() / measures["masked_tokens"])}
