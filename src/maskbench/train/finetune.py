"""Fine-tune a pretrained encoder on one task with one seed; select on dev, score on test.

    maskbench finetune --run mlm --task rotten_tomatoes --seed 1

The encoder is loaded from the pretraining run's Hugging Face directory; a pooler
(dropout → dense → tanh → dropout → linear) reads the first ([CLS]) state, as BERT/RoBERTa
fine-tuning does. The epoch with the best dev score is kept and scored on test.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm import tqdm
from transformers import AutoTokenizer

from maskbench.config import finetune_settings
from maskbench.data.tasks import load_split
from maskbench.eval.metrics import score
from maskbench.io import atomic_path, read_json, write_json
from maskbench.model import Encoder
from maskbench.train.optim import build_optimizer, polynomial_schedule
from maskbench.train.pretrain import pick_device
from maskbench.train.tracking import Tracker, git_commit


class SequenceHead(nn.Module):
    """Encoder + [CLS] pooler + output layer (n_labels logits, or 1 value for regression)."""

    def __init__(self, encoder: Encoder, n_outputs: int, dropout: float):
        super().__init__()
        width = encoder.config.n_embd
        self.encoder = encoder
        self.pooler = nn.Sequential(nn.Dropout(dropout), nn.Linear(width, width), nn.Tanh(), nn.Dropout(dropout))
        self.out = nn.Linear(width, n_outputs)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids, attention_mask=attention_mask).last_hidden_state
        return self.out(self.pooler(hidden[:, 0]))


def encode(rows: list[dict], tokenizer, max_len: int) -> list[list[int]]:
    texts = [r["text"] for r in rows]
    pairs = [r["text_pair"] for r in rows]
    if any(p is not None for p in pairs):
        return tokenizer(texts, pairs, truncation="longest_first", max_length=max_len)["input_ids"]
    return tokenizer(texts, truncation=True, max_length=max_len)["input_ids"]


def collate(ids: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), length), pad, dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = torch.tensor(x)
    return input_ids, (input_ids != pad).long()


@torch.no_grad()
def predict(model, ids: list[list[int]], batch: int, pad: int, device, kind: str) -> np.ndarray:
    model.eval()
    outputs = []
    for start in range(0, len(ids), batch):
        input_ids, mask = collate(ids[start:start + batch], pad)
        logits = model(input_ids.to(device), mask.to(device)).float()
        outputs.append(logits.squeeze(-1) if kind == "regression" else logits.softmax(-1))
    model.train()
    return torch.cat(outputs).cpu().numpy()


def finetune(config: dict, run: str, task: str, seed: int, model_dir: Path, task_dir: Path, card_path: Path,
             data_card: Path, out_dir: Path) -> dict:
    settings = finetune_settings(config, task)
    spec = config["tasks"][task]
    device = pick_device(settings["device"])
    torch.set_num_threads(settings["threads"])
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    encoder = Encoder.from_pretrained(model_dir)
    card = read_json(card_path)
    n_outputs = 1 if spec["kind"] == "regression" else len(card["label_names"])
    model = SequenceHead(encoder, n_outputs, settings["pooler_dropout"]).to(device)

    splits = {s: load_split(task_dir, s) for s in ("train", "dev", "test")}
    if settings["max_train_examples"] and len(splits["train"]) > settings["max_train_examples"]:
        keep = np.sort(rng.choice(len(splits["train"]), settings["max_train_examples"], replace=False))
        splits["train"] = [splits["train"][i] for i in keep]
    max_len = min(settings["max_len"], encoder.config.max_position)
    ids = {s: encode(rows, tokenizer, max_len) for s, rows in splits.items()}
    labels = {s: np.array([r["label"] for r in rows]) for s, rows in splits.items()}

    batches_per_epoch = math.ceil(len(ids["train"]) / settings["batch_size"])
    total = settings["epochs"] * batches_per_epoch
    optimizer = build_optimizer(model, settings["lr"], settings["weight_decay"])
    schedule = polynomial_schedule(optimizer, int(settings["warmup_ratio"] * total), total)
    pretraining = encoder.config.pretraining
    tracker = Tracker(
        config["tracking"]["experiment"], f"finetune/{run}/{task}/seed{seed}",
        tags={"stage": "finetune", "run": run, "task": task, "seed": str(seed), "profile": config["profile"],
              "pretrain_run_id": pretraining.get("mlflow_run_id", ""),
              "mlflow.parentRunId": pretraining.get("mlflow_run_id", ""), "git_commit": git_commit()},
        params={"settings": settings, "task": spec, "seed": seed, "pretraining": pretraining, "data": card},
        data_cards=[data_card],
    )
    pad = tokenizer.pad_token_id
    best = {"dev": -math.inf}
    step, start = 0, time.perf_counter()
    try:
        bar = tqdm(total=total, desc=f"finetune {run}/{task}/seed{seed}", unit="step")
        for epoch in range(1, settings["epochs"] + 1):
            order = rng.permutation(len(ids["train"]))
            for b in range(batches_per_epoch):
                idx = order[b * settings["batch_size"]:(b + 1) * settings["batch_size"]]
                input_ids, mask = collate([ids["train"][i] for i in idx], pad)
                target = torch.as_tensor(labels["train"][idx]).to(device)
                out = model(input_ids.to(device), mask.to(device))
                loss = (F.mse_loss(out.squeeze(-1), target.float()) if spec["kind"] == "regression"
                        else F.cross_entropy(out, target.long()))
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), settings["clip_norm"])
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                schedule.step()
                step += 1
                bar.update(1)
                bar.set_postfix(loss=f"{loss.item():.3f}", epoch=epoch)
                if step % 20 == 0:
                    tracker.log_metrics({"loss": loss.item(), "lr": schedule.get_last_lr()[0]}, step=step)
            dev_pred = predict(model, ids["dev"], 2 * settings["batch_size"], pad, device, spec["kind"])
            dev_score = score(spec["metric"], labels["dev"], dev_pred)
            tracker.log_metrics({f"dev_{spec['metric']}": dev_score}, step=step)
            if dev_score > best["dev"]:
                test_pred = predict(model, ids["test"], 2 * settings["batch_size"], pad, device, spec["kind"])
                best = {"dev": dev_score, "epoch": epoch, "dev_pred": dev_pred, "test_pred": test_pred}
        bar.close()
        metrics = {
            "run": run, "task": task, "seed": seed, "metric": spec["metric"], "dataset_label": spec["label"],
            "dev": best["dev"], "test": score(spec["metric"], labels["test"], best["test_pred"]),
            "best_epoch": best["epoch"], "train_examples": len(ids["train"]),
            "seconds": round(time.perf_counter() - start, 1),
        }
        _write_predictions(out_dir / "predictions.jsonl", best, labels)
        write_json(out_dir / "metrics.json", metrics)
        tracker.log_metrics({k: metrics[k] for k in ("dev", "test", "best_epoch")})
        tracker.log_artifact(out_dir / "metrics.json")
        tracker.finish()
    except BaseException:
        tracker.finish("KILLED")
        raise
    return metrics


def _write_predictions(path: Path, best: dict, labels: dict) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        for split in ("dev", "test"):
            for i, (pred, gold) in enumerate(zip(best[f"{split}_pred"], labels[split])):
                fh.write(json.dumps({"split": split, "index": i, "prediction": np.asarray(pred).tolist(),
                                     "label": gold.item()}) + "\n")
