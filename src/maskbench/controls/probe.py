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

Memory is bounded by one layer, not by the encoder's depth: all layers of all rows would not fit
at paper scale (BERT-base on MNLI: 13 layers x 393K rows x 768 floats, ~16 GB). The features
are computed batch by batch and written, float32, into one disk-backed array (numpy memmap) per
split, (layers + 1, N, C) in C order, in a temporary directory beside the metrics file that is
removed afterwards, failure or not. Each layer's (N, C) matrix is contiguous there, and the
layers are fitted one at a time from their own matrices: the process holds one layer's features
of every split (standardised) and one batch of encoder states, whatever the number of layers.

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
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from maskbench.config import finetune_settings
from maskbench.controls.linear import Fit, fit_on_dev
from maskbench.controls.rows import ControlData, read_task
from maskbench.device import compute_device, precision
from maskbench.eval.metrics import selection_key
from maskbench.finetune.inputs import batches_by_length, collate, encode
from maskbench.io import atomic_path, reading, write_json
from maskbench.provenance import arithmetic
from maskbench.model.encoder import Encoder
from maskbench.finetune.view import EncoderView, mean_over_real
from maskbench.objectives.registry import finetune_max_length


@torch.no_grad()
def layer_features(encoder: Encoder, ids: list[list[int]], pad: int, batch: int, device,
                   out: np.ndarray | None = None) -> np.ndarray:
    """(layers + 1, N, C) float32: every layer's states averaged over each row's real tokens,
    written into `out` (a new array when None) batch by batch, each batch's rows straight into
    their own positions (batches go by length): with `out` a memmap (`probe`), no more than one
    batch of features is in memory, and no pass reorders the rows."""
    view = EncoderView(encoder)
    if out is None:
        out = np.empty((encoder.config.n_layer + 1, len(ids), encoder.config.n_embd), dtype=np.float32)
    for positions in batches_by_length(ids, batch):
        input_ids, mask = collate([ids[i] for i in positions], pad)
        states, real = view.layer_states(input_ids.to(device), mask.to(device))
        out[:, positions] = torch.stack([mean_over_real(h.float(), real) for h in states]).cpu().numpy()
    return out


def write_features(encoder: Encoder, tokenizer, rows: dict[str, list[dict]], max_len: int, batch: int, device,
                   directory: Path) -> dict[str, np.memmap]:
    """Every split's `layer_features` in a memmap `directory/{split}.npy` of shape (layers + 1,
    N, C), C order, so that one layer's (N, C) matrix is contiguous on disk and reads alone."""
    features = {}
    for split, split_rows in rows.items():
        ids = encode(split_rows, tokenizer, max_len)
        store = np.lib.format.open_memmap(directory / f"{split}.npy", mode="w+", dtype=np.float32,
                                          shape=(encoder.config.n_layer + 1, len(ids), encoder.config.n_embd))
        features[split] = layer_features(encoder, ids, tokenizer.pad_token_id, batch, device, store)
    return features


def fit_layer(data: ControlData, features: dict[str, np.ndarray], layer: int, controls: dict) -> Fit:
    """The linear model of one layer, its features standardised with the train rows' mean and
    std. Reads that layer's (N, C) matrix of each split and no other layer's: with `features`
    memmaps, memory holds one layer (standardised) at a time."""
    x = {split: np.asarray(f[layer]) for split, f in features.items()}
    mean, std = x["train"].mean(0), x["train"].std(0)
    std[std == 0] = 1.0
    return fit_on_dev(data.kind, data.metric, {s: (f - mean) / std for s, f in x.items()}, data.y, controls,
                      data.n_classes)


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
    max_len = min(settings["max_len"],
                  finetune_max_length(encoder.config.pretraining or {}, encoder.config.max_position))
    # beside the outputs, on the disk that holds the runs (16 GB at MNLI size), not in a /tmp that may be small
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".features-", dir=metrics_path.parent) as directory:
        with precision(device, settings["precision"]):
            features = write_features(encoder, tokenizer, data.rows, max_len, 2 * settings["batch_size"], device,
                                      Path(directory))
        fits = [fit_layer(data, features, layer, config["controls"]) for layer in range(len(features["train"]))]
    layers = [{"layer": layer, "dev": fit.dev, "chosen": fit.chosen,
               "test": data.scores(data.reported, fit.outputs[data.reported])[data.metric]}
              for layer, fit in enumerate(fits)]
    best = max(range(len(layers)), key=lambda i: selection_key(data.metric, layers[i]["dev"]))
    metrics = {"run": run, "task": task, "metric": data.metric, "split": data.reported, "layers": layers,
               "best_layer": best, "value": layers[best]["test"], "dev": layers[best]["dev"],
               "arithmetic": arithmetic(device)}
    with atomic_path(predictions_path) as tmp, open(tmp, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for split in data.scored
                      for r in data.records(split, fits[best].outputs[split]))
    write_json(metrics_path, metrics)
    return metrics
