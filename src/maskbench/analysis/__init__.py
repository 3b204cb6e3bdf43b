"""The papers' mechanisms, measured on a pretrained run (`maskbench analyse --run R`).

One module per measure, each a function of an objective and fixed inputs: corrupted semantics
(`corruption`, ExLM App. C), prediction entropy (`entropy`, ExLM App. E), the 0.9-effective rank
of token representations (`rank`, MAE-LM §2), ExLM's DAG case study (`case_study`, ExLM
Fig. 10) and how sharply ExLM aligns its states to the masked tokens (`alignment`); `load`
rebuilds a run's objective from what pretraining saved, and `stage` runs every measure for one
run on the validation blocks of its corpus and writes one JSON file per measure
(docs/analyses.md). A measure that does not apply to the run's objective writes
`{"applies": false, "why": ...}`.
"""

from __future__ import annotations

from maskbench.objectives.registry import ExLM, MaskedAutoencoderLM, MaskedLM, Objective, RepeatedMLM

MASKED = (MaskedLM, RepeatedMLM, MaskedAutoencoderLM, ExLM)  # MLM's subclasses: none, varlen_mlm


def why_unmasked(objective: Objective) -> str | None:
    """Why the masked-LM measures do not apply to `objective` (None when it masks tokens)."""
    if isinstance(objective, MASKED):
        return None
    return f"{objective.name} masks no input token: it predicts the next token(s) of a causal context"


def not_applicable(why: str) -> dict:
    """What a measure writes for a run it does not apply to."""
    return {"applies": False, "why": why}
