"""`maskbench analyse --run R`: every measure of `maskbench.analysis` for one pretrained run, on
the first `analysis.blocks` validation blocks of its corpus (framed as pretraining's validation
loss frames them, `maskbench.train.validation`) with masks the objective draws from `analysis.seed`,
the same for every run. Writes one JSON file per measure (`maskbench.paths.ANALYSIS_*`).

The rank after fine-tuning (MAE-LM Fig. 5b) needs a fine-tuned encoder: for a run that a rank
table shows (table6), the fine-tuning stage's job of the run on `analysis.finetune_task` (per
modality) with the task's first seed keeps its encoder (`paths.FINETUNE_ENCODER`, an input of
this job: `maskbench.stages.analysis_finetune_job`), which this job measures on the same blocks;
it fine-tunes nothing itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from maskbench.align import use_backend
from maskbench.analysis import not_applicable, why_unmasked
from maskbench.analysis.alignment import alignment
from maskbench.analysis.case_study import case_study
from maskbench.analysis.corruption import corruption
from maskbench.analysis.entropy import entropy
from maskbench.analysis.load import load_objective
from maskbench.analysis.rank import masked_input_states, ranks_by_layer, same_rows, unmasked_states
from maskbench.config import analysis_finetune_task, run_settings, task_seeds
from maskbench.data.corpus import load_stream
from maskbench.device import compute_device, precision
from maskbench.io import damaged, reading, write_json
from maskbench.provenance import arithmetic
from maskbench.model.encoder import Encoder
from maskbench.objectives.base import draws_of_rows
from maskbench.objectives.registry import Objective
from maskbench.train.validation import validation_set

log = logging.getLogger(__name__)
RANK_KINDS = ("with_mask", "real_with_mask", "real_without_mask", "mask")


def batches(blocks: torch.Tensor, draws: dict, size: int, device) -> list[tuple[torch.Tensor, dict]]:
    """(blocks, draws) in batches of `size` blocks, on `device`."""
    return [(blocks[i:i + size].to(device), draws_of_rows(draws, slice(i, i + size), device))
            for i in range(0, len(blocks), size)]


def concat_layers(parts: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """Per-layer row matrices of several batches, stacked per layer."""
    return [torch.cat(layer) for layer in zip(*parts)]


def finetuned_encoder(path: Path) -> Encoder:
    """The fine-tuned encoder the fine-tuning stage kept at `path`; a missing or damaged one
    stops with its path and the job that rebuilds it."""
    if not (path / "config.json").is_file():
        raise damaged(path, "no fine-tuned encoder there (its config.json is missing)")
    with reading(path):
        return Encoder.from_pretrained(path)


def finetuned_states(config: dict, run: str, inputs: dict, blocks: list[torch.Tensor], objective: Objective,
                     device) -> tuple[dict, list[torch.Tensor]]:
    """({"task", "seed"}, per-layer states of the blocks without [MASK]) of the run's encoder
    fine-tuned on its analysis task with the task's first seed, as its fine-tuning job kept it."""
    task = analysis_finetune_task(config, run)
    encoder = finetuned_encoder(Path(inputs["encoder"])).to(device).eval()
    states = concat_layers([unmasked_states(encoder, objective.pretraining_info(), type(objective), b) for b in blocks])
    return {"task": task, "seed": task_seeds(config, task)[0]}, states


def rank_record(config: dict, run: str, inputs: dict, objective: Objective, batched: list, device) -> dict:
    """The effective-rank record of `run` (see `maskbench.analysis.rank`)."""
    why = why_unmasked(objective)
    if why:
        return not_applicable(why)
    settings = config["analysis"]
    masked = [masked_input_states(objective, blocks, draws) for blocks, draws in batched]
    matrices = {kind: concat_layers([m[kind] for m in masked]) for kind in ("with_mask", "real_with_mask", "mask")}
    matrices["real_without_mask"] = concat_layers(
        [unmasked_states(objective.encoder, objective.pretraining_info(), type(objective), b) for b, _ in batched])
    finetuned = None
    if analysis_finetune_task(config, run):
        finetuned, matrices["finetuned"] = finetuned_states(config, run, inputs, [b for b, _ in batched], objective,
                                                            device)
    matrices, rows = same_rows(matrices, settings["rows"], settings["seed"])
    threshold = settings["rank_threshold"]
    if finetuned is not None:
        finetuned["layers"] = [{"layer": r["layer"], "real_without_mask": r["finetuned"]}
                               for r in ranks_by_layer(matrices, ("finetuned",), threshold)]
    return {"applies": True, "threshold": threshold, "rows": rows, "centred": True, "layer_normalised": True,
            "layers": ranks_by_layer(matrices, RANK_KINDS, threshold), "finetuned": finetuned}


def analyse(config: dict, run: str, inputs: dict, outputs: dict) -> dict[str, dict]:
    """Measure `run` and write its five records; `inputs` and `outputs` are the stage job's
    files (`maskbench.stages`). Returns the records."""
    settings, spec, analysis = run_settings(config, run), config["runs"][run], config["analysis"]
    device = compute_device(settings["device"], settings["threads"])
    use_backend(config["align"]["backend"])
    objective, tokenizer = load_objective(spec, Path(inputs["model"]), Path(inputs["objective"]))
    objective.to(device)
    valid = validation_set(load_stream(Path(inputs["tokens"]), "valid"), settings["seq_len"], objective.specials,
                           analysis["blocks"])
    masks = why_unmasked(objective) is None
    draws = objective.draw(valid.blocks, torch.Generator().manual_seed(analysis["seed"])) if masks else {}
    batched = batches(valid.blocks, draws, settings["micro_batch_size"], device)
    where = {"run": run, "blocks": len(valid.blocks), "seed": analysis["seed"], "arithmetic": arithmetic(device)}
    with precision(device, settings["precision"]):
        records = {
            "corruption": corruption(objective, valid.blocks, draws),
            "entropy": entropy(objective, batched),
            "rank": rank_record(config, run, inputs, objective, batched, device),
            "case_study": case_study(objective, tokenizer, analysis["case_study"][spec["modality"]],
                                     f"analysis.case_study.{spec['modality']}"),
            "alignment": alignment(objective, batched),
        }
    for name, record in records.items():
        write_json(outputs[name], {**where, **record})
        log.info("%s of %s: %s", name, run, {k: v for k, v in record.items() if not isinstance(v, list)})
    return records
