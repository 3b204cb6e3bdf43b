"""Pretraining objectives: each turns a batch of token blocks into model inputs and a loss.

The encoder never knows which objective trains it. `build_objective(run, encoder, specials)`
picks the module named by a run's `objective` key in params.yaml.
"""

from __future__ import annotations

from maskbench.objectives.base import Objective, ObjectiveOutput, SpecialTokens
from maskbench.objectives.mlm import MaskedLM

OBJECTIVES: dict[str, type[Objective]] = {
    "mlm": MaskedLM,
}


def build_objective(run: dict, encoder, specials: SpecialTokens) -> Objective:
    """Instantiate the objective of a run (a params.yaml `runs.<name>` entry)."""
    name = run["objective"]
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; expected one of {sorted(OBJECTIVES)}")
    return OBJECTIVES[name](encoder, specials, **run.get("knobs", {}))


__all__ = ["OBJECTIVES", "Objective", "ObjectiveOutput", "SpecialTokens", "build_objective"]
