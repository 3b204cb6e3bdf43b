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
  pretraining's validation loss scores ExLM: the [SEP]s between documents, targets of the DAG,
  stay in the joint), in nats per masked token, on the run's own masks:
  whether it learned the input it trains on, which for p other than 15 % the validation loss's
  masks are not;
- `transition_floor`: the same DAG's negative log-likelihood if every state emitted every target
  with probability 1, in nats per masked token: the part of `dag_nll` that the transitions alone
  cost and no emission can lower. A state that emits the unigram distribution scores the
  unigram loss plus this floor, so a DAG whose transitions cannot learn (`transitions: none`,
  uniform over the forward edges) has learned its emissions when `dag_nll` is below that sum,
  even where it stays above the unigram loss alone (docs/learning-failures.md).
"""

from __future__ import annotations

from collections import Counter

import torch

from maskbench.align import dag_loss
from maskbench.analysis import not_applicable
from maskbench.objectives.registry import ExLM, Objective
from maskbench.objectives.exlm import transitions_only_log_z


def alignment_posterior(log_emit: torch.Tensor, log_trans: torch.Tensor, target_lengths: torch.Tensor | None = None,
                        node_counts: torch.Tensor | None = None) -> torch.Tensor:
    """(B, M, L): the posterior that the DAG's paths emit target i at state u, d log Z / d log P_u(y_i)."""
    with torch.enable_grad():
        leaf = log_emit.detach().requires_grad_()
        (posterior,) = torch.autograd.grad(dag_loss(leaf, log_trans.detach(), target_lengths, node_counts).sum(), leaf)
    return posterior


def alignment_totals(log_emit: torch.Tensor, log_trans: torch.Tensor, state_group: torch.Tensor,
                     target_is_masked: torch.Tensor) -> dict[str, float]:
    """Sums and counts behind the record's numbers, for emissions `log_emit` (B, M, L) of the
    DAG's targets and transitions `log_trans` (B, L, L, -inf off the DAG's edges); `state_group`
    (B, L) is each state's expanded token (0 the first [CLS], i target i, -1 padding) and
    `target_is_masked` (B, M) says which targets are masked tokens (the others are [CLS]/[SEP]
    between documents, left out of the token measures)."""
    M = log_emit.shape[1]
    node_counts = (state_group >= 0).sum(dim=1)
    expanded = state_group.max(dim=1).values + 1
    posterior = alignment_posterior(log_emit, log_trans, expanded - 2, node_counts)
    transitions_only = transitions_only_log_z(log_emit.detach(), log_trans.detach(), state_group)
    target = torch.arange(1, M + 1, device=log_emit.device)
    own = (state_group[:, None, :] == target[None, :, None]) & target_is_masked[..., None]      # (B, M, L)
    state_is_masked = torch.cat([target_is_masked.new_zeros(len(target_is_masked), 1), target_is_masked,
                                 target_is_masked.new_zeros(len(target_is_masked), 1)], dim=1)
    state_is_masked = state_is_masked.gather(1, state_group.clamp(0, M + 1)) & (state_group >= 0)
    others = ~own & state_is_masked[:, None, :] & target_is_masked[..., None]
    to_next = state_group[:, None, :] == state_group[:, :, None] + 1                            # (B, L, L) v -> u
    has_successor = (state_group >= 0) & (state_group < expanded[:, None] - 1)
    return {
        "masked_tokens": float(target_is_masked.sum()),
        "own_posterior": float((posterior * own).sum()),
        "next_transition": float((log_trans.exp() * to_next).sum(-1)[has_successor].sum()),
        "with_successor": float(has_successor.sum()),
        "own_log_prob": float(log_emit[own].sum()), "own_pairs": float(own.sum()),
        "other_log_prob": float(log_emit[others].sum()), "other_pairs": float(others.sum()),
        "transition_floor": float(-transitions_only.double().sum()),
    }


def alignment_record(totals: dict[str, float], k: int, blocks: int) -> dict:
    """The record's numbers from `alignment_totals` summed over `blocks` blocks."""
    masked = totals["masked_tokens"]
    return {
        "masked_tokens": int(masked), "k": k,
        "own_posterior": totals["own_posterior"] / masked,
        "even_share": blocks / masked,
        "next_transition": totals["next_transition"] / totals["with_successor"],
        "own_log_prob": totals["own_log_prob"] / totals["own_pairs"],
        # none when each block masks one token
        "other_log_prob": totals["other_log_prob"] / totals["other_pairs"] if totals["other_pairs"] else None,
        "transition_floor": totals["transition_floor"] / masked,
    }


@torch.no_grad()
def alignment(objective: Objective, batched: list[tuple[torch.Tensor, dict]]) -> dict:
    """The alignment record of `objective` on `batched` (blocks, draws) batches."""
    if not isinstance(objective, ExLM):
        return not_applicable(f"{objective.name} predicts each masked token at its own position: only ExLM "
                              "aligns states to masked tokens through a DAG")
    if objective.transitions == "ctc":
        return not_applicable("transitions: ctc aligns each masked token with its own [MASK]'s states only: no DAG")
    totals, log_z, blocks = Counter(), [], 0
    for tokens, draws in batched:
        seen = objective.inspect(tokens, draws)
        totals.update(alignment_totals(seen.log_emissions, seen.log_transitions.float(), seen.state_group,
                                       seen.target_is_masked))
        log_z.append(seen.log_z.double())
        blocks += len(tokens)
    measures = alignment_record(totals, objective.k, blocks)
    return {"applies": True, **measures, "dag_nll": float(-torch.cat(log_z).sum() / measures["masked_tokens"])}
