"""What ExLM's validation loss costs before its transitions have learned anything.

ExLM scores the m masked tokens of a block by summing over the paths through its DAG of
L = k·(m + 2) states that visit exactly m interior states (`maskbench.align.dag_loss`). With
emissions that carry no information (log P = 0 for every state and token) that sum is the
probability that a walk along the transitions has exactly the right length. Under uniform
transitions (every later state equally likely, as at initialisation and as `transitions: none`
keeps them) a walk jumps far ahead and is usually too short, so that probability is small:
-log of it, per masked token, is what ExLM's validation loss carries above its emissions' own
cross-entropy until the transitions learn to step from one [MASK]'s states to the next one's.

    PYTHONPATH=src python benchmarks/dag_length_prior.py

Writes results/dag_length_prior.json (docs/notes/2026-11-24-a-recipe-that-learns.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from maskbench.align import dag_loss
from maskbench.objectives.masking import mask_count

# (corpus, block length, k, mask ratio): table1's text and SMILES ExLM and the grid's ExLM cells
CELLS = [("text", 128, 2, 0.15), ("smiles", 64, 2, 0.15), ("smiles", 64, 4, 0.15), ("smiles", 64, 8, 0.15),
         ("smiles", 64, 2, 0.387), ("smiles", 64, 4, 0.387), ("smiles", 64, 8, 0.387)]


def uniform_forward_transitions(L: int) -> torch.Tensor:
    """log E (1, L, L): from each state, every later state with the same probability."""
    later = torch.ones(L, L, dtype=torch.bool).triu(1)
    successors = later.sum(dim=1, keepdim=True).clamp(min=1)
    return torch.where(later, -successors.double().log(), torch.tensor(float("-inf"), dtype=torch.float64))[None]


def length_cost_per_token(L: int, m: int) -> float:
    """-log P(a walk from the first to the last state visits exactly m states between) / m."""
    log_z = dag_loss(torch.zeros(1, m, L, dtype=torch.float64), uniform_forward_transitions(L), backend="reference")
    return -float(log_z[0]) / m


def main() -> None:
    rows = []
    for corpus, seq_len, k, ratio in CELLS:
        m = mask_count(seq_len - 2, ratio)
        L = k * (m + 2)
        rows.append({"corpus": corpus, "seq_len": seq_len, "k": k, "mask_ratio": ratio, "masked": m, "states": L,
                     "nats_per_masked_token": length_cost_per_token(L, m)})
        print(f"{corpus:6} k={k} p={ratio:<5} m={m:2} L={L:3}  {rows[-1]['nats_per_masked_token']:.2f} nats per masked "
              "token")
    out = Path(__file__).parent / "results" / "dag_length_prior.json"
    out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
