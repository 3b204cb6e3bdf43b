"""The objectives' classes, built from their cards: `build_objective(run, encoder, specials)`
instantiates the class the card of a run's `objective` names (`maskbench.objectives.cards`);
`encoder_settings` tells pretraining what encoder the objective needs (position scheme, longest
position) and `finetune_inputs` tells fine-tuning how to present a batch to an encoder it trained.
"""

from __future__ import annotations

import importlib

import torch

from maskbench.model.schemes import scheme_for
from maskbench.objectives.ar import CausalLM
from maskbench.objectives.base import FinetuneInputs, Inspection, Objective, ObjectiveOutput, SpecialTokens
from maskbench.objectives.cards import CARDS, card
from maskbench.objectives.dar import GroupAutoregressiveLM
from maskbench.objectives.exlm import ExLM, ExLMInspection
from maskbench.objectives.mae_lm import MaskedAutoencoderLM
from maskbench.objectives.mlm import MaskedLM
from maskbench.objectives.none import NoPretraining
from maskbench.objectives.repeated_mlm import RepeatedMLM
from maskbench.objectives.varlen_mlm import VariableLengthMLM


def objective_class(name: str) -> type[Objective]:
    """The class the card of `name` names (`module:Class`); ValueError for an unknown name."""
    module, cls = card(name).implementation.split(":")
    return getattr(importlib.import_module(module), cls)


OBJECTIVES: dict[str, type[Objective]] = {name: objective_class(name) for name in CARDS}


def build_objective(run: dict, encoder, specials: SpecialTokens) -> Objective:
    """Instantiate the objective of a run (a params.yaml `runs.<name>` entry)."""
    cls = objective_class(run["objective"])
    knobs = run.get("knobs", {})
    try:
        return cls(encoder, specials, **knobs)
    except TypeError as err:
        raise ValueError(f"objective {run['objective']!r}: bad knobs {sorted(knobs)} ({err})") from err


def encoder_settings(run: dict, seq_len: int, positions: str) -> dict:
    """`EncoderConfig` fields of a run's encoder (a params.yaml `runs.<name>` entry) for blocks of
    `seq_len` tokens under the pretraining setting `positions`: the position scheme
    (`maskbench.model.schemes`) and what the objective needs (longest position)."""
    objective, knobs = run["objective"], run.get("knobs", {})
    return objective_class(objective).encoder_settings(seq_len, knobs, scheme_for(objective, knobs, positions))


def _trained_by(pretraining_info: dict) -> type[Objective]:
    # encoders saved before objectives recorded themselves were trained by MLM
    return objective_class(pretraining_info.get("objective", "mlm"))


def finetune_inputs(pretraining_info: dict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> FinetuneInputs:
    """Present a right-padded fine-tuning batch the way the encoder saw text in pretraining.

    `pretraining_info` is `encoder.config.pretraining`. Returns `Encoder.forward` keyword
    arguments (`encoder(**result.encoder_kwargs)`), the input token per sequence whose final
    state the pooler should read (`result.pool_position`, (B,)) and the state each input token
    reads (`result.token_index`, (B, T); None = the identity): repeated MLM repeats every token k
    times and reads the first copies; ExLM expands every [CLS] and [SEP] into k states as in
    pretraining; AR and DAR keep causal attention and pool the last real token; everything else
    pools [CLS].
    """
    return _trained_by(pretraining_info).finetune_inputs(pretraining_info, input_ids, attention_mask)


def finetune_max_length(pretraining_info: dict, max_position: int) -> int:
    """The longest fine-tuning input, in tokens before any repetition, the encoder can take."""
    return _trained_by(pretraining_info).finetune_max_length(pretraining_info, max_position)


__all__ = ["OBJECTIVES", "CausalLM", "ExLM", "ExLMInspection", "FinetuneInputs", "GroupAutoregressiveLM", "Inspection",
           "MaskedAutoencoderLM", "MaskedLM", "NoPretraining", "Objective", "ObjectiveOutput", "RepeatedMLM",
           "SpecialTokens", "VariableLengthMLM", "build_objective", "encoder_settings", "finetune_inputs",
           "finetune_max_length", "objective_class"]
