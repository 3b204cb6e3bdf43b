"""A pretrained run's objective, rebuilt from what pretraining saved: the encoder directory
(`runs/pretrain/R/model`, which fine-tuning reads) and the objective's other weights beside it
(`objective.safetensors`: ExLM's transition projections, MAE-LM's decoder)."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import load_file
from transformers import AutoTokenizer

from maskbench.io import reading
from maskbench.model.encoder import Encoder
from maskbench.objectives.registry import Objective, SpecialTokens, build_objective


def load_objective(run_spec: dict, model_dir: Path, weights: Path) -> tuple[Objective, object]:
    """(objective in eval mode, tokenizer) of a run (`run_spec` its params.yaml entry)."""
    with reading(model_dir):
        encoder = Encoder.from_pretrained(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    objective = build_objective(run_spec, encoder, SpecialTokens.from_tokenizer(tokenizer))
    with reading(weights):
        heads = load_file(weights)
    missing, unexpected = objective.load_state_dict(heads, strict=False)
    lacking = [name for name in missing if not name.startswith("encoder.")]
    if lacking or unexpected:
        raise ValueError(f"{weights}: does not match objective {run_spec['objective']!r} with knobs "
                         f"{run_spec.get('knobs', {})} (missing {lacking}, unexpected {unexpected}); re-run its "
                         "pretraining")
    return objective.eval(), tokenizer
