"""`maskbench probe --run R --task T`: how much of a whole-sequence task a pretrained encoder
already encodes, layer by layer, without fine-tuning it.

The encoder is frozen (eval mode, no dropout) and reads the task's rows the way fine-tuning
presents them (`EncoderView.layer_states`: repeated MLM repeats every token, ExLM expands its
[CLS] and [SEP], AR and DAR keep causal attention). A row's features at layer l are the mean of that layer's states
over its real tokens (attention mask 1); layer 0 is the embeddings, the last layer the final
(layer-normed) output. Per layer, the features are standardised with the train rows' mean and
std and a linear model is fitted (`maskbench.controls.linear`, regularisation chosen on dev);
the best layer is chosen on dev. Rows are those fine-tuning uses (`maskbench.controls.rows`).
QA is not probed: its answers are spans, not one label per row.

`runs/probe/{run}/{task}/metrics.json`:
    {"run": R, "task": T, "metric": headline metric, "split": the split reported ("test", or
     "dev" where test has no labels), "layers": [{"layer": l, "dev": d, "test": score on
     `split`, "chosen": {"C": ...} or {"alpha": ...}}, ...], "best_layer": l,
     "value": the best layer's score on `split`, "dev": its dev score}
`runs/probe/{run}/{task}/predictions.jsonl`: the best layer's predictions in fine-tuning's
shape, {"split", "index", "prediction", "label"}. Undefined scores are null.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from maskbench.config import finetune_settings
from maskbench.controls.linear import fit_on_dev
from maskbench.controls.rows import read_task
from maskbench.device import compute_device
from maskbench.eval.metrics import selection_key
from maskbench.finetune.inputs import batches_by_length, collate, encode, row_order
from maskbench.io import atomic_path, write_json
from maskbench.model import Encoder
from maskbench.finetune.view import EncoderView, mean_over_real
from maskbench.objectives import finetune_max_length
from maskbench.stages import reading


@torch.no_grad()
def layer_features(encoder: Encoder, ids: list[list[int]], pad: int, batch: int, device) -> np.ndarray:
    """(layers + 1, N, C): every layer's states averaged over each row's real tokens."""
    view = EncoderView(encoder)
    batches, pooled = batches_by_length(ids, batch), []
    for positions in batches:
        input_ids, mask = collate([ids[i] for i in positions], pad)
        states, real = view.layer_states(input_ids.to(device), mask.to(device))
        pooled.append(torch.stack([mean_over_real(h.float(), real) for h in states]).cpu())
    return torch.cat(pooled, dim=1).numpy()[:, row_order(batches)]


def probe(config: dict, run: str, task: str, model_dir: Path, task_dir: Path, card_path: Path, metrics_path: Path,
          predictions_path: Path) -> dict:
    """Probe every layer of `run`'s encoder on `task`; write the metrics and the best layer's
    predictions; return the metrics."""
    data = read_task(config, task, task_dir, card_path)
    if data.kind == "qa":
        raise ValueError(f"tasks.{task}: kind 'qa' is not probed (answers are spans); probe a whole-sequence task")
    settings = finetune_settings(config, task)
    device = compute_device(settings["device"], settings["threads"])
    with reading(model_dir):
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        encoder = Encoder.from_pretrained(model_dir).to(device).eval()
    max_len = min(settings["max_len"], finetune_max_length(encoder.config.pretraining or {}, encoder.config.max_position))
    features = {split: layer_features(encoder, encode(rows, tokenizer, max_len), tokenizer.pad_token_id,
                                      2 * settings["batch_size"], device)
                for split, rows in data.rows.items()}
    layers, fits = [], []
    for layer in range(len(features["train"])):
        x = {split: f[layer] for split, f in features.items()}
        mean, std = x["train"].mean(0), x["train"].std(0)
        std[std == 0] = 1.0
        fit = fit_on_dev(data.kind, data.metric, {s: (f - mean) / std for s, f in x.items()}, data.y,
                         config["controls"], data.n_classes)
        fits.append(fit)
        layers.append({"layer": layer, "dev": fit.dev, "chosen": fit.chosen,
                       "test": data.scores(data.reported, fit.outputs[data.reported])[data.metric]})
    best = max(range(len(layers)), key=lambda i: selection_key(data.metric, layers[i]["dev"]))
    metrics = {"run": run, "task": task, "metric": data.metric, "split": data.reported, "layers": layers,
               "best_layer": best, "value": layers[best]["test"], "dev": layers[best]["dev"]}
    with atomic_path(predictions_path) as tmp, open(tmp, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for split in data.scored
                      for r in data.records(split, fits[best].outputs[split]))
    write_json(metrics_path, metrics)
    return metrics
