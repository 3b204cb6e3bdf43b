"""ExLM's case study (ExLM §5.4, Fig. 7 and 10): what the expanded states and the DAG between
them learn, on one input with two [MASK] tokens.

For every state of the DAG (the k states of [CLS], of each [MASK] and of [SEP], in order) the
record gives the token it was expanded from, its clone index and its three most probable
tokens; the transition matrix E between the states (row v: the probabilities of moving from
state v to each later state; the last state has no successor, so its row is all 0); and the
best path. The masked words are unknown, so the path is decoded as DA-Transformer-style DAGs
decode: `dag_best_path` with every state emitting its own most probable token, i.e. the path
from the first to the last state through one state per [MASK]-count step that maximises
transitions times those tokens' probabilities; `decoded` are those tokens.
"""

from __future__ import annotations

import torch

from maskbench.align import dag_best_path
from maskbench.analysis import not_applicable
from maskbench.objectives.registry import ExLM, Objective
from maskbench.objectives.masking import indices_of, mask_at

TOP = 3


@torch.no_grad()
def case_study(objective: Objective, tokenizer, text: str, where: str) -> dict:
    """The case-study record of `objective` on `text`, which holds [MASK] tokens (`where`
    names the params.yaml key it comes from, for the error when it holds none)."""
    if not isinstance(objective, ExLM):
        return not_applicable(f"{objective.name} has no expanded states nor DAG transitions: the case study is "
                              "ExLM's (Fig. 10)")
    if objective.transitions == "ctc":
        return not_applicable("transitions: ctc has no DAG transitions: the case study is of ExLM's DAG (Fig. 10)")
    device = next(objective.parameters()).device
    ids = torch.tensor([tokenizer(text)["input_ids"]], device=device)
    is_mask = ids == objective.specials.mask
    m = int(is_mask.sum())
    if m == 0:
        raise ValueError(f"{where}: {text!r} holds no {tokenizer.mask_token}; write the tokens to predict as "
                         f"{tokenizer.mask_token}")
    masked_at = indices_of(is_mask, m)
    seen = objective.inspect(ids, {"masked_at": masked_at})

    _, layout = objective.expand(ids, mask_at(masked_at, ids.shape[1]), objective.expanded_positions(ids, masked_at))
    L = seen.state_logits.shape[1]
    nodes = indices_of(layout.clone > 0, L)
    state_token, state_clone = layout.source.gather(1, nodes)[0], layout.clone.gather(1, nodes)[0]
    top_ids, top_probs = ExLM.top_tokens(seen.state_logits[0], TOP)
    log_p = seen.state_logits.float().log_softmax(dim=-1)
    best_log_p, best_id = log_p.max(dim=-1)                                   # (1, L)
    M = seen.log_emissions.shape[1]                                            # targets: masks and inner [SEP]s
    _, path = dag_best_path(best_log_p[:, None, :].expand(1, M, L).contiguous(), seen.log_transitions.float())

    names = tokenizer.convert_ids_to_tokens
    path = path[0].tolist()
    return {
        "applies": True, "text": text, "tokens": names(ids[0].tolist()),
        "states": [{"masked_index": int(t), "clone": int(c),
                    "top3": [[name, float(p)] for name, p in zip(names(i.tolist()), probs.tolist())]}
                   for t, c, i, probs in zip(state_token, state_clone, top_ids, top_probs)],
        "transitions": seen.log_transitions[0].float().exp().tolist(),
        "best_path": path,
        "decoded": names(best_id[0, path].tolist()),
        "note": "masked_index: the position in `tokens` each state was expanded from; the last state's "
                "transition row is all 0 (no successor)",
    }
