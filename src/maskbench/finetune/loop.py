"""Fine-tune one pretrained run on one task with one seed, over the task's hyperparameter grid.

    maskbench finetune --run mlm --task rotten_tomatoes --seed 1

For every grid point (params.yaml `finetune.grid`, or the task's own `grid`): train, keep the
epoch with the best dev score, and score that epoch on dev, test and the task's
`extra_eval_splits` (MNLI's mismatched dev set). All points go into
`metrics.json`; `maskbench aggregate` later picks the point with the best median dev score over
seeds, as the papers' grid searches do. The predictions of this seed's best point are written
beside it.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import AutoTokenizer

from maskbench.config import finetune_settings
from maskbench.eval.metrics import higher_is_better
from maskbench.finetune.qa import QATask
from maskbench.finetune.sequence import SequenceTask
from maskbench.finetune.view import EncoderView
from maskbench.io import atomic_path, read_json, read_jsonl, write_json
from maskbench.model import Encoder
from maskbench.objectives import finetune_max_length
from maskbench.train.optim import build_optimizer, polynomial_schedule
from maskbench.train.pretrain import pick_device
from maskbench.train.tracking import Tracker, git_commit

SPLITS = ("train", "dev", "test")


def grid_points(config: dict, task: str) -> list[dict]:
    """Settings for every point of the task's grid (the cartesian product of its lists)."""
    base = finetune_settings(config, task)
    grid = config["tasks"][task].get("grid", config["finetune"].get("grid", {}))
    keys = sorted(grid)
    return [{**base, **dict(zip(keys, values))} for values in itertools.product(*(grid[k] for k in keys))]


def eval_subset(rows: list[dict], limit: int | None) -> list[dict]:
    """At most `limit` rows, in file order, drawn with a fixed seed: every run and fine-tuning
    seed is scored on the same rows, so their scores stay comparable."""
    if limit is None or len(rows) <= limit:
        return rows
    keep = np.sort(np.random.default_rng(0).choice(len(rows), limit, replace=False))
    return [rows[i] for i in keep]


def build_task(spec: dict, splits: dict, tokenizer, settings: dict, card: dict, max_len: int):
    if spec["kind"] == "qa":
        return QATask(spec["metric"], splits, tokenizer, max_len, settings["doc_stride"], settings["max_answer_tokens"])
    return SequenceTask(spec["kind"], spec["metric"], splits, tokenizer, max_len, card.get("label_names"))


def train_one(task, settings: dict, model_dir: Path, seed: int, device, tracker: Tracker, label: str,
              extra_splits: list[str]) -> dict:
    """Train one grid point; return its best-dev-epoch scores and predictions."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = task.build_model(EncoderView(Encoder.from_pretrained(model_dir)), settings["pooler_dropout"]).to(device)
    n_train = task.n_train
    if settings["max_train_examples"]:
        n_train = min(n_train, settings["max_train_examples"])
    batches = math.ceil(n_train / settings["batch_size"])
    total = settings["epochs"] * batches
    optimizer = build_optimizer(model, settings["lr"], settings["weight_decay"])
    schedule = polynomial_schedule(optimizer, int(settings["warmup_ratio"] * total), total)
    sign = 1 if higher_is_better(task.metric) else -1
    subset = np.sort(rng.choice(task.n_train, n_train, replace=False))
    best = None
    step = 0
    bar = tqdm(total=total, desc=label, unit="step")
    for epoch in range(1, settings["epochs"] + 1):
        model.train()
        order = rng.permutation(subset)
        for b in range(batches):
            loss = task.loss(model, order[b * settings["batch_size"]:(b + 1) * settings["batch_size"]], device)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), settings["clip_norm"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", epoch=epoch)
            if step % 20 == 0:
                tracker.log_metrics({f"{label}.loss": loss.item(), f"{label}.lr": schedule.get_last_lr()[0]}, step=step)
        model.eval()
        dev, dev_pred = task.evaluate(model, "dev", 2 * settings["batch_size"], device)
        tracker.log_metrics({f"{label}.dev_{task.metric}": dev[task.metric]}, step=step)
        if best is None or sign * dev[task.metric] > best["dev_score"]:  # a NaN score never wins
            scored = {split: task.evaluate(model, split, 2 * settings["batch_size"], device)
                      for split in ("test", *extra_splits) if task.labelled(split)}
            test, test_pred = scored.pop("test", ({}, []))
            best = {"dev_score": sign * dev[task.metric], "epoch": epoch, "dev": dev, "test": test,
                    "extra": {split: metrics for split, (metrics, _) in scored.items()},
                    "predictions": {"dev": dev_pred, "test": test_pred,
                                    **{split: pred for split, (_, pred) in scored.items()}}}
    bar.close()
    return best


def finetune(config: dict, run: str, task: str, seed: int, model_dir: Path, task_dir: Path, card_path: Path,
             data_card: Path, out_dir: Path) -> dict:
    spec = config["tasks"][task]
    points = grid_points(config, task)
    device = pick_device(points[0]["device"])
    torch.set_num_threads(points[0]["threads"])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    card = read_json(card_path)
    extra_splits = spec.get("extra_eval_splits", [])
    for split in extra_splits:
        if not (task_dir / f"{split}.jsonl").exists():
            raise FileNotFoundError(f"tasks.{task}.extra_eval_splits: {task_dir} has no {split}.jsonl; its dataset "
                                    f"{spec['dataset']!r} gives {sorted(p.stem for p in task_dir.glob('*.jsonl'))}")
    splits = {s: read_jsonl(task_dir / f"{s}.jsonl") for s in (*SPLITS, *extra_splits)}
    splits = {s: rows if s == "train" else eval_subset(rows, points[0]["max_eval_examples"])
              for s, rows in splits.items()}
    encoder_config = Encoder.config_class.from_pretrained(model_dir)
    pretraining = encoder_config.pretraining
    longest = finetune_max_length(pretraining, encoder_config.max_position)
    tracker = Tracker(
        config["tracking"]["experiment"], f"finetune/{run}/{task}/seed{seed}",
        tags={"stage": "finetune", "run": run, "task": task, "seed": str(seed), "profile": config["profile"],
              "pretrain_run_id": pretraining.get("mlflow_run_id", ""),
              "mlflow.parentRunId": pretraining.get("mlflow_run_id", ""), "git_commit": git_commit()},
        params={"grid": {str(i): p for i, p in enumerate(points)}, "task": spec, "seed": seed,
                "pretraining": pretraining, "data": card},
        data_cards=[data_card],
    )
    start = time.perf_counter()
    try:
        max_len = min(points[0]["max_len"], longest)  # inputs longer than pretraining blocks are cut
        task_data = build_task(spec, splits, tokenizer, points[0], card, max_len)
        unlabelled = [s for s in extra_splits if not task_data.labelled(s)]
        if unlabelled:
            raise ValueError(f"tasks.{task}.extra_eval_splits: {unlabelled} of {task_dir} have no labels to score "
                             "(GLUE's test labels are not public); list only labelled splits such as dev_mismatched")
        results = []
        for i, settings in enumerate(points):
            label = f"{run}/{task}/seed{seed}" + (f"/grid{i}" if len(points) > 1 else "")
            results.append({"settings": settings, **train_one(task_data, settings, model_dir, seed, device,
                                                                tracker, label, extra_splits)})
        chosen = max(range(len(results)), key=lambda i: results[i]["dev_score"])
        reported = "test" if results[chosen]["test"] else "dev"
        metrics = {
            "run": run, "task": task, "seed": seed, "metric": spec["metric"], "dataset_label": spec["label"],
            "reported_split": reported, "grid_point": chosen,
            "dev": results[chosen]["dev"][spec["metric"]],
            "test": results[chosen]["test"].get(spec["metric"]),
            "extra": {split: scores[spec["metric"]] for split, scores in results[chosen]["extra"].items()},
            "grid": [{"settings": {k: r["settings"][k] for k in ("lr", "batch_size", "epochs", "warmup_ratio")},
                      "best_epoch": r["epoch"], "dev": r["dev"], "test": r["test"], "extra": r["extra"]}
                     for r in results],
            "train_examples": task_data.n_train,
            "eval_examples": {s: len(rows) for s, rows in splits.items() if s != "train"},
            "seconds": round(time.perf_counter() - start, 1),
        }
        _write_predictions(out_dir / "predictions.jsonl", results[chosen]["predictions"])
        write_json(out_dir / "metrics.json", metrics)
        tracker.log_metrics({"dev": metrics["dev"], **({"test": metrics["test"]} if metrics["test"] is not None else {})})
        tracker.log_artifact(out_dir / "metrics.json")
        tracker.finish()
    except BaseException:
        tracker.finish("KILLED")
        raise
    return metrics


def _write_predictions(path: Path, predictions: dict[str, list[dict]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        for split, records in predictions.items():
            fh.writelines(json.dumps({"split": split, **r}) + "\n" for r in records)
