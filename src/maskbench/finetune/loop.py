"""Fine-tune one pretrained run on one task with one seed, over the task's hyperparameter grid.

    maskbench finetune --run mlm --task rotten_tomatoes --seed 1

For every grid point (params.yaml `finetune.grid`, or the task's own `grid`): train, keep the
epoch with the best dev score (an undefined, NaN, score never wins), and score that epoch on
dev, test and the task's `extra_eval_splits` (MNLI's mismatched dev set). A task needs train
and dev; a test split that is missing (SQuAD 2.0 ships train and dev only) or unlabelled (GLUE)
is not scored, and dev is reported, as the papers do. All points go into `metrics.json`;
`maskbench aggregate` later picks the point with the best median dev score over seeds, as the
papers' grid searches do. The predictions of this seed's best point are written beside it.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import AutoTokenizer

from maskbench import paths, preemption
from maskbench.config import finetune_settings, task_grid
from maskbench.data.tasks import require_labels, require_learnable
from maskbench.device import compute_device, peak_memory_gib, precision
from maskbench.eval.metrics import selection_key
from maskbench.eval.aggregate import skipped_by_split
from maskbench.finetune.inputs import epoch_order
from maskbench.finetune.qa import QATask
from maskbench.finetune.sequence import SequenceTask
from maskbench.finetune.view import EncoderView
from maskbench.io import atomic_path, damaged, read_json, read_jsonl, reading, save_torch, sha256_file, write_json
from maskbench.model.encoder import Encoder
from maskbench.objectives.registry import finetune_max_length
from maskbench.preemption import Preempted
from maskbench.train.fingerprint import FINETUNE_OPERATIONAL, check_resumable, fingerprint
from maskbench.train.optim import build_optimizer, optimizer_step, polynomial_schedule
from maskbench.provenance import arithmetic, git_commit
from maskbench.train.tracking import Tracker, pretraining_tags

REQUIRED_SPLITS = ("train", "dev")
LOG_EVERY = 20  # steps between the training loss points logged to MLflow (and every epoch's last step)
CURVE_POINTS = 10  # a shorter run logs this many points: a curve, not a dot (smoke: 8 steps an epoch)
log = logging.getLogger(__name__)


def grid_points(config: dict, task: str) -> list[dict]:
    """Settings for every point of the task's grid (the cartesian product of its lists)."""
    base = finetune_settings(config, task)
    grid = task_grid(config, task)
    keys = sorted(grid)
    return [{**base, **dict(zip(keys, values))} for values in itertools.product(*(grid[k] for k in keys))]


def eval_subset(rows: list[dict], limit: int | None) -> list[dict]:
    """At most `limit` rows, in file order, drawn with a fixed seed: every run and fine-tuning
    seed is scored on the same rows, so their scores stay comparable."""
    if limit is None or len(rows) <= limit:
        return rows
    keep = np.sort(np.random.default_rng(0).choice(len(rows), limit, replace=False))
    return [rows[i] for i in keep]


def train_subset(n_rows: int, limit: int | None, rng: np.random.Generator) -> np.ndarray:
    """The train rows a seed learns from: `limit` of them (all when None) drawn by `rng`, sorted.
    The controls (maskbench.controls) draw the subset of the task's first seed the same way."""
    return np.sort(rng.choice(n_rows, n_rows if limit is None else min(n_rows, limit), replace=False))


def read_splits(task: str, spec: dict, task_dir: Path, card: dict) -> dict[str, list[dict]]:
    """Rows of train, dev, test (where the dataset has it) and the task's extra evaluation splits,
    each label checked against the task's `card` (its class or task names)."""
    extra = spec.get("extra_eval_splits", [])
    present = sorted(p.stem for p in task_dir.glob("*.jsonl"))
    for split in REQUIRED_SPLITS:  # the task stage writes both or fails: one missing was deleted since
        if split not in present:
            raise damaged(task_dir / f"{split}.jsonl", f"missing from {task_dir} (which holds {present})")
    for split in extra:
        if split not in present:
            raise FileNotFoundError(f"tasks.{task}.extra_eval_splits: {task_dir} has no {split}.jsonl; its dataset "
                                    f"{spec['dataset']!r} gives {present}")
    wanted = dict.fromkeys([*REQUIRED_SPLITS, "test", *extra])
    splits = {}
    for split in (s for s in wanted if s in present):
        with reading(task_dir / f"{split}.jsonl"):
            splits[split] = read_jsonl(task_dir / f"{split}.jsonl")
        names = card.get("task_names") if spec["kind"] == "multitask_classification" else card.get("label_names")
        require_labels(task, spec["kind"], split, splits[split], task_dir / f"{split}.jsonl", names)
    require_learnable(task, spec["kind"], "train", splits["train"], where=str(task_dir))
    return splits


def build_task(spec: dict, splits: dict, tokenizer, settings: dict, card: dict, max_len: int):
    if spec["kind"] == "qa":
        return QATask(spec["metric"], splits, tokenizer, max_len, settings["doc_stride"], settings["max_answer_tokens"])
    names = card.get("task_names") if spec["kind"] == "multitask_classification" else card.get("label_names")
    return SequenceTask(spec["kind"], spec["metric"], splits, tokenizer, max_len, names)


def finetune_optimizer(model: torch.nn.Module, settings: dict) -> torch.optim.Optimizer:
    """Fine-tuning's AdamW: the task's lr and weight decay (on the parameters `weight_decay_on`
    names), at build_optimizer's betas (0.9, 0.98) and eps 1e-6, as MAE-LM Tab. 4-5 fine-tune."""
    return build_optimizer(model, settings["lr"], settings["weight_decay"],
                           **({"decay_on": settings["weight_decay_on"]} if "weight_decay_on" in settings else {}))


def train_one(task, settings: dict, model_dir: Path, seed: int, device, tracker: Tracker, label: str,
              extra_splits: list[str], keep_encoder: bool = False, saved: dict | None = None,
              save=lambda state: None, metric_prefix: str = "", dev_points: int = 0) -> dict:
    """Train one grid point; return its best-dev-epoch scores and predictions (and, with
    `keep_encoder`, the encoder's weights at that epoch). `label` names it on the progress bar;
    its step metrics (`train_loss`, `lr`, `examples_per_s`, the dev score after each epoch
    `epoch_dev_<metric>`, and with `dev_points` (tracking.dev_curve_points) the dev score at that
    many evenly spaced steps and each epoch's end, `running_dev_<metric>`) are named
    `metric_prefix` + quantity. A measurement for the curve alone runs the model in eval mode,
    which draws no random number: training's results are those of a run without it. `save` is
    called with the point's whole training state at the end of every epoch, and after the step
    under way when SIGTERM came (then `Preempted` is raised); given back as `saved`, training
    goes on from there as if it had never stopped."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    with reading(model_dir):
        encoder = Encoder.from_pretrained(model_dir)
    model = task.build_model(EncoderView(encoder, settings["pooling"]), settings["pooler_dropout"]).to(device)
    subset = train_subset(task.n_train, settings["max_train_examples"], rng)
    lengths = task.train_lengths
    batches = math.ceil(len(subset) / settings["batch_size"])
    total = settings["epochs"] * batches
    log_every = max(1, min(LOG_EVERY, total // CURVE_POINTS))
    dev_steps = {math.ceil(total * i / dev_points) for i in range(1, dev_points + 1)}

    def log_dev(score: float) -> None:
        if dev_points:
            tracker.log_metrics({f"{metric_prefix}running_dev_{task.metric}": score}, step=step)
    optimizer = finetune_optimizer(model, settings)
    schedule = polynomial_schedule(optimizer, int(settings["warmup_ratio"] * total), total)
    first_epoch, first_batch, step, best, order = 1, 0, 0, None, None
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        set_rng_states(saved["rngs"], rng)
        first_epoch, first_batch, step, best, order = (saved[k] for k in ("epoch", "batch", "step", "best", "order"))

    def state(epoch: int, batch: int, order: np.ndarray | None) -> dict:
        """What `saved` takes to go on before batch `batch` of epoch `epoch` (its `order`)."""
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
                "rngs": rng_states(rng), "epoch": epoch, "batch": batch, "step": step, "best": best, "order": order}

    bar = tqdm(total=total, initial=step, desc=label, unit="step")
    for epoch in range(first_epoch, settings["epochs"] + 1):
        model.train()
        throughput = Throughput()  # restarted after each evaluation, which is not training time
        if order is None:
            order = epoch_order(subset, lengths, settings["batch_size"], rng, settings["group_by_length"])
        for b in range(first_batch, batches):
            index = order[b * settings["batch_size"]:(b + 1) * settings["batch_size"]]
            with precision(device, settings["precision"]):
                loss = task.loss(model, index, device)
            loss.backward()
            lr = schedule.get_last_lr()[0]  # the step's own (after it, the next one's: 0 at the last step)
            optimizer_step(model, optimizer, schedule, settings["clip_norm"])
            step += 1
            throughput.add(len(index))
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", epoch=epoch)
            if step % log_every == 0 or b == batches - 1:  # and each epoch's last
                tracker.log_metrics({f"{metric_prefix}train_loss": loss.item(), f"{metric_prefix}lr": lr,
                                     f"{metric_prefix}examples_per_s": throughput.rate()}, step=step)
            if step in dev_steps and b < batches - 1:  # an epoch's last step is measured below
                model.eval()
                log_dev(evaluate(task, model, "dev", settings, device)[0][task.metric])
                model.train()
                throughput = Throughput()
            if preemption.requested():
                save(state(epoch, b + 1, order))
                raise Preempted(f"{label}: stopped by SIGTERM at step {step}; a re-run resumes from there")
        model.eval()
        dev, dev_pred = evaluate(task, model, "dev", settings, device)
        tracker.log_metrics({f"{metric_prefix}epoch_dev_{task.metric}": dev[task.metric]}, step=step)
        log_dev(dev[task.metric])
        dev_score = selection_key(task.metric, dev[task.metric])
        if best is None or dev_score > best["dev_score"]:
            scored = {split: evaluate(task, model, split, settings, device)
                      for split in ("test", *extra_splits) if task.labelled(split)}
            test, test_pred = scored.pop("test", ({}, []))
            best = {"dev_score": dev_score, "epoch": epoch, "step": step, "dev": dev, "test": test,
                    "extra": {split: metrics for split, (metrics, _) in scored.items()},
                    "predictions": {"dev": dev_pred, "test": test_pred,
                                    **{split: pred for split, (_, pred) in scored.items()}},
                    "encoder": {k: v.detach().clone()
                                for k, v in encoder.state_dict().items()} if keep_encoder else None}
        first_batch, order = 0, None
        save(state(epoch + 1, 0, None))
        if preemption.requested():  # SIGTERM during the evaluation
            raise Preempted(f"{label}: stopped by SIGTERM after epoch {epoch}; a re-run resumes from there")
    bar.close()
    return best


def evaluate(task, model, split: str, settings: dict, device) -> tuple[dict, list[dict]]:
    """The task's scores and predictions on `split`, at the fine-tuning `precision`."""
    with precision(device, settings["precision"]):
        return task.evaluate(model, split, 2 * settings["batch_size"], device)


def rng_states(rng: np.random.Generator) -> dict:
    """The random states training draws from: torch's (dropout, on the CPU and every GPU) and
    `rng`'s (the order of the rows)."""
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": rng.bit_generator.state}


def set_rng_states(states: dict, rng: np.random.Generator) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"]:
        torch.cuda.set_rng_state_all(states["cuda"])
    rng.bit_generator.state = states["numpy"]


class Throughput:
    """Training examples per second since the last reading, the fine-tuning counterpart of
    pretraining's tokens/s."""

    def __init__(self):
        self.examples, self.since = 0, time.perf_counter()

    def add(self, examples: int) -> None:
        self.examples += examples

    def rate(self) -> float:
        now = time.perf_counter()
        rate = self.examples / max(now - self.since, 1e-9)
        self.examples, self.since = 0, now
        return rate


def finetune(config: dict, run: str, task: str, seed: int, model_dir: Path, task_dir: Path, card_path: Path,
             data_card: Path, metrics_path: Path, predictions_path: Path, encoder_dir: Path | None = None,
             fresh: bool = False) -> dict:
    """Fine-tune and write the metrics and predictions; with `encoder_dir`, also save there the
    fine-tuned encoder of the chosen grid point at its best dev epoch (the one job an analysis
    reads it from keeps it: the rank after fine-tuning, MAE-LM Fig. 5b; `paths.KEPT`). Its
    MLflow run, `finetune/{run}/{task}/seed{seed}`, has tags that say which run, pretraining
    seed, task and seed it is; its final metrics are named by split and metric (`dev_accuracy`,
    `test_roc_auc`), and `score` is the reported split's.

    The job resumes from its checkpoint beside `metrics_path` (`paths.FINETUNE_CHECKPOINT`),
    written at the end of every epoch and when SIGTERM stops it after the step under way; the
    checkpoint goes once the outputs are written. A checkpoint made with other settings resumes
    when only `threads` or `device` changed and is refused otherwise (`maskbench.train.fingerprint`);
    `fresh` deletes it first."""
    spec = config["tasks"][task]
    points = grid_points(config, task)
    device = compute_device(points[0]["device"], points[0]["threads"])
    with reading(model_dir):
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        encoder_config = Encoder.config_class.from_pretrained(model_dir)
    with reading(card_path):
        card = read_json(card_path)
    extra_splits = spec.get("extra_eval_splits", [])
    pretraining = encoder_config.pretraining
    longest = finetune_max_length(pretraining, encoder_config.max_position)
    checkpoint_dir = metrics_path.parent / Path(paths.FINETUNE_CHECKPOINT).name
    # a checkpoint's finished points hold their encoders only where it kept them: the two do not mix
    job = job_inputs(points, spec, seed, model_dir, task_dir) | ({"keeps_encoder": True} if encoder_dir else {})
    if fresh and checkpoint_dir.exists():
        log.warning("--fresh: deleting %s", checkpoint_dir)
        shutil.rmtree(checkpoint_dir)
    saved = load_checkpoint(checkpoint_dir, job,
                            f"start afresh: `--fresh` on the job's command, or delete {checkpoint_dir}.")
    with preemption.deferred_to_step_end():
        tracker = Tracker(
            config["tracking"]["experiment"], f"finetune/{run}/{task}/seed{seed}",
            tags={"stage": "finetune", **pretraining_tags(config, run), "task": task, "seed": str(seed),
                  "profile": config["profile"],
                  "pretrain_run_id": pretraining.get("mlflow_run_id", ""),
                  "mlflow.parentRunId": pretraining.get("mlflow_run_id", ""), "git_commit": git_commit()},
            params={"grid": {str(i): p for i, p in enumerate(points)}, "task": spec, "seed": seed,
                    "pretraining": pretraining, "data": card},
            data_cards=[data_card], run_id=saved.get("mlflow_run_id"),
        )
        start = time.perf_counter() - saved.get("seconds", 0.0)
        with tracker:  # from here on, a refusal (a damaged or unlearnable split) is a FAILED run with its error
            splits = {s: rows if s == "train" else eval_subset(rows, points[0]["max_eval_examples"])
                      for s, rows in read_splits(task, spec, task_dir, card).items()}
            max_len = min(points[0]["max_len"], longest)  # inputs longer than pretraining blocks are cut
            task_data = build_task(spec, splits, tokenizer, points[0], card, max_len)
            unlabelled = [s for s in extra_splits if not task_data.labelled(s)]
            if unlabelled:
                raise ValueError(f"tasks.{task}.extra_eval_splits: {unlabelled} of {task_dir} have no labels to score "
                                 "(GLUE's test labels are not public); list only labelled splits such as "
                                 "dev_mismatched")
            results = saved.get("results", [])

            def save(point: dict) -> None:
                """The job's checkpoint: the points finished, and the one under way at `point`."""
                save_checkpoint(checkpoint_dir, {
                    "fingerprint": fingerprint(job, FINETUNE_OPERATIONAL), "inputs": job,
                    "mlflow_run_id": tracker.run_id, "results": results,
                    "point": point, "seconds": time.perf_counter() - start})

            for i in range(len(results), len(points)):
                grid = f"grid{i}/" if len(points) > 1 else ""  # the point's step metrics: grid1/train_loss
                results.append({"settings": points[i], **train_one(
                    task_data, points[i], model_dir, seed, device, tracker,
                    f"{run}/{task}/seed{seed}/{grid}".rstrip("/"),
                    extra_splits, encoder_dir is not None, saved.pop("point", None), save, metric_prefix=grid,
                    dev_points=config["tracking"]["dev_curve_points"])})
                best = chosen_point(results)  # one encoder held (and checkpointed), not one per grid point
                for j, result in enumerate(results):
                    if j != best:
                        result["encoder"] = None
            metrics = {**job_metrics(run, task, seed, spec, results, task_data, splits, time.perf_counter() - start),
                       "peak_gpu_memory_gib": peak_memory_gib(device), "arithmetic": arithmetic(device)}
            if encoder_dir is not None:
                _save_encoder(encoder_dir, model_dir, results[metrics["grid_point"]]["encoder"])
            _write_predictions(predictions_path, results[metrics["grid_point"]]["predictions"])
            write_json(metrics_path, metrics)
            tracker.log_metrics(final_scores(metrics))
            tracker.log_params({key: metrics[key] for key in ("reported_split", "grid_point", "train_examples")})
            tracker.log_artifact(metrics_path)
            chosen = results[metrics["grid_point"]]
            tracker.record_model("fine-tuned", chosen.get("step", 0), {  # a checkpoint's results may predate "step"
                "pretrained_model": str(model_dir), "grid_point": str(metrics["grid_point"]),
                "best_epoch": str(chosen["epoch"]),
                "weights": str(encoder_dir) if encoder_dir is not None else "not kept (the stage keeps the scores)"})
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return metrics


def final_scores(metrics: dict) -> dict[str, float]:
    """metrics.json's scores as MLflow metrics, named by split and metric (`dev_accuracy`,
    `test_accuracy`, `dev_mismatched_accuracy`), and the reported split's as `score`, a fraction
    as metrics.json has it; and `score_percent`, as the report tables print it (60.5, not
    0.605), but for RMSE, which the tables print as is."""
    metric = metrics["metric"]
    scores = {"dev": metrics["dev"], "test": metrics["test"], **metrics["extra"]}
    named = {f"{split}_{metric}": value for split, value in scores.items() if value is not None}
    score = scores[metrics["reported_split"]]
    percent = {} if metric == "rmse" or score is None else {"score_percent": 100 * score}
    return {**named, "score": score, **percent}


def chosen_point(results: list[dict]) -> int:
    """The grid point a job reports: the first with the best dev score."""
    return max(range(len(results)), key=lambda i: results[i]["dev_score"])


def job_metrics(run: str, task: str, seed: int, spec: dict, results: list[dict], task_data, splits: dict,
                seconds: float) -> dict:
    """metrics.json: every grid point's scores, and the point with the best dev score."""
    chosen = chosen_point(results)
    reported = "test" if results[chosen]["test"] else "dev"
    skipped = skipped_by_split(results[chosen])
    warn_skipped(task, skipped)
    return {
        "run": run, "task": task, "seed": seed, "metric": spec["metric"],
        "reported_split": reported, "grid_point": chosen,
        "dev": results[chosen]["dev"][spec["metric"]],
        "test": results[chosen]["test"].get(spec["metric"]),
        "extra": {split: scores[spec["metric"]] for split, scores in results[chosen]["extra"].items()},
        "grid": [{"settings": {k: r["settings"][k] for k in ("lr", "batch_size", "epochs", "warmup_ratio")},
                  "best_epoch": r["epoch"], "dev": r["dev"], "test": r["test"], "extra": r["extra"]}
                 for r in results],
        "train_examples": task_data.n_train,
        "eval_examples": {s: len(rows) for s, rows in splits.items() if s != "train"},
        "seconds": round(seconds, 1),  # training time, the stretches before a preemption included
        **({"roc_auc_skipped": skipped} if skipped else {}),
    }


CHECKPOINT = "state.pt"


def job_inputs(points: list[dict], spec: dict, seed: int, model_dir: Path, task_dir: Path) -> dict:
    """What a fine-tuning job computes from: its grid, task and seed, and the bytes of the
    pretrained model and of the task's rows (`maskbench.train.fingerprint` tells which of it
    may change at a resume)."""
    files = {f"{role}/{path.relative_to(root)}": sha256_file(path)
             for role, root in (("model", model_dir), ("task", task_dir))
             for path in sorted(root.rglob("*")) if path.is_file()}
    return {"points": points, "task": spec, "seed": seed, "files": files}


def load_checkpoint(directory: Path, inputs: dict, way_out: str) -> dict:
    """The checkpoint in `directory`, else {} (a fresh start). One made with other `inputs`
    resumes when only operational settings changed (logged), and raises StaleCheckpoint
    otherwise, left as it is. One that cannot be read (a truncated copy) is ignored: atomic
    writes leave a whole checkpoint or none, so that takes a damaged disk."""
    path = directory / CHECKPOINT
    if not path.exists():
        return {}
    try:
        saved = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # whatever torch.load cannot read
        log.warning("checkpoint %s cannot be read (%s); starting afresh", path, exc)
        return {}
    changes = check_resumable(saved, inputs, FINETUNE_OPERATIONAL, f"checkpoint {path}", way_out)
    if changes:
        log.warning("resuming %s with operational settings changed (the result stays): %s", path, "; ".join(changes))
    point = saved["point"]
    log.warning("resumed from checkpoint %s: grid point %d, epoch %d, batch %d", path, len(saved["results"]),
                point["epoch"], point["batch"])
    return saved


def save_checkpoint(directory: Path, saved: dict) -> None:
    save_torch(saved, directory / CHECKPOINT)


def warn_skipped(task: str, skipped: dict[str, dict[str, str]]) -> None:
    """Name the tasks ROC-AUC left out: a mean over fewer tasks than the dataset has must not
    pass for the full benchmark."""
    for split, reasons in skipped.items():
        if reasons:
            log.warning("%s: ROC-AUC on %s leaves out %d task(s): %s", task, split, len(reasons), reasons)


def _save_encoder(encoder_dir: Path, model_dir: Path, weights: dict) -> None:
    """The pretrained encoder of `model_dir` with fine-tuned `weights`, with its tokenizer."""
    encoder = Encoder.from_pretrained(model_dir)
    encoder.load_state_dict(weights)
    with atomic_path(encoder_dir, is_dir=True) as tmp:
        encoder.save_pretrained(tmp)
        AutoTokenizer.from_pretrained(model_dir).save_pretrained(tmp)


def _write_predictions(path: Path, predictions: dict[str, list[dict]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        for split, records in predictions.items():
            fh.writelines(json.dumps({"split": split, **r}) + "\n" for r in records)
