"""Pretraining objectives: each turns a batch of token blocks into model inputs and a loss.

The encoder never knows which objective trains it. Each objective has a card
(`maskbench.objectives.cards`: its knobs and defaults, cost, whether it pretrains), read without
torch by params validation, the scheduler's estimates and the reports, and a module with its
class; `build_objective(run, encoder, specials)` builds the class a run's card names
(`maskbench.objectives.registry`), `encoder_settings` tells pretraining what encoder it needs
and `finetune_inputs` how fine-tuning presents a batch to an encoder it trained.

Importing this package loads no torch: the names of `registry` are looked up on first use.
"""

from __future__ import annotations

import importlib

from maskbench.objectives.cards import CARDS, ObjectiveCard, card, run_card, run_knobs

_REGISTRY = ("OBJECTIVES", "CausalLM", "ExLM", "ExLMInspection", "FinetuneInputs", "GroupAutoregressiveLM",
             "Inspection", "MaskedAutoencoderLM", "MaskedLM", "NoPretraining", "Objective", "ObjectiveOutput",
             "RepeatedMLM", "SpecialTokens", "VariableLengthMLM", "build_objective", "encoder_settings",
             "finetune_inputs", "finetune_max_length", "objective_class")


def __getattr__(name: str):
    if name in _REGISTRY:
        return getattr(importlib.import_module("maskbench.objectives.registry"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CARDS", "ObjectiveCard", "card", "run_card", "run_knobs", *_REGISTRY]
