"""Pretraining loop shared by every objective.

    maskbench pretrain --run mlm          # reads params.yaml, writes runs/pretrain/mlm/

Batches are blocks cut from the train split's token stream, framed as [CLS] … [SEP]: windows
anywhere in it, or whole documents (the `blocks` setting, `maskbench.train.blocks`). A
step's global batch (`batch_size` sequences) and its masks are drawn from RNGs seeded by
(seed, step), and each process trains its micro-batches of it (`micro_batch_size` sequences
each), so a run resumed from a checkpoint, on this or another number of processes, continues
exactly as an uninterrupted one would (docs/scaling.md). Every `eval_every` steps and at the
end, the validation loss on fixed blocks and masks (`maskbench.train.validation`) joins the
log: MLflow's, and `valid.csv` beside the training log `log.csv`. A checkpoint (model,
optimizer, schedule, step, MLflow run id, log rows and the losses since the last row) is
written atomically every `checkpoint_every` steps into `checkpoint/`, with the logs so far as
`checkpoint/log.csv` and `checkpoint/valid.csv`; re-running the same command resumes from it.
A setting that only changes how the run is run (threads, device, cadence of logs, evaluations
and checkpoints, micro-batch) may change in between: the run resumes and logs it; one that
changes the result (the run, its data, optimizer, schedule, batch, seed...) refuses to start,
naming it, and keeps the checkpoint: `--fresh` starts afresh (`maskbench.train.fingerprint`). The stage's declared
outputs
(`model/`, `metrics.json`, `log.csv`, `valid.csv`) are written only once training has
finished, so a killed job leaves none of them behind and Snakemake re-runs it without
`--rerun-incomplete`. A finished run deletes its checkpoint. The finished encoder is
saved with its tokenizer as a Hugging Face directory (`model/`), which fine-tuning loads; what
the objective adds to it (ExLM's transition projections, MAE-LM's decoder) goes beside it into
`objective.safetensors`, which the analyses read (`maskbench.analysis.load`).

Several processes (params.yaml `launch`; `maskbench pretrain` starts them itself) train with
DDP, NCCL on GPUs, gloo on CPU; see `maskbench.train.distributed`. `compile: true` in the
pretraining settings wraps the model in `torch.compile`.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tqdm import tqdm
from transformers import AutoTokenizer

from maskbench.align import backend_used, use_backend
from maskbench.config import accumulation, run_settings
from maskbench.config.settings import PRETRAIN_OPERATIONAL
from maskbench.data.corpus import load_stream, read_train_counts, unigram_log_probs
from maskbench.device import compute_device, peak_memory_gib, precision
from maskbench import preemption
from maskbench.io import atomic_path, read_json, reading, save_torch, write_json
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import SpecialTokens, build_objective, encoder_settings
from maskbench.preemption import Preempted
from maskbench.train.blocks import block_source
from maskbench.train.distributed import World
from maskbench.train.fingerprint import check_resumable, fingerprint
from maskbench.train.optim import build_optimizer, optimizer_step, polynomial_schedule
from maskbench.provenance import arithmetic, git_commit
from maskbench.train.tracking import Tracker, pretraining_tags
from maskbench.train.validation import ValidationSet, valid_loss, valid_loss_floor, validation_sets

log = logging.getLogger(__name__)


# Slot j of a step seeds its dropout SLOT_STRIDE·j past slot 0's seed: far beyond any step, so
# no two (step, slot) pairs share a seed, and slot 0 keeps the seed a one-slot run always used.
SLOT_STRIDE = 1 << 40


def _step_rngs(seed: int, step: int, device) -> tuple[np.random.Generator, torch.Generator]:
    """The generators of step `step`'s blocks and masks, drawn for the whole global batch on
    every process: they depend only on (seed, step)."""
    batch_rng = np.random.default_rng([seed, step])
    mask_rng = torch.Generator(device=device).manual_seed(seed * 1_000_003 + step + 1)
    return batch_rng, mask_rng


def _seed_dropout(seed: int, step: int, slot: int) -> None:
    """Dropout of a micro-batch slot depends only on (seed, step, slot), not on which process
    or accumulation step trains the slot."""
    torch.manual_seed(seed * 1_000_003 + step + SLOT_STRIDE * slot)


@dataclass
class PretrainFiles:
    """Where a run writes: the stage's outputs (written only once training has finished) and
    the checkpoint directory it resumes from (not an output: the workflow tools delete outputs
    before a re-run, but not this)."""

    model: Path
    metrics: Path
    log_csv: Path
    valid_csv: Path
    checkpoint: Path
    objective: Path | None = None  # the objective's weights but the encoder's; not written when None

    @classmethod
    def of_stage(cls, outputs: dict[str, str], checkpoint: Path, root: Path = Path(".")) -> PretrainFiles:
        """The files of a pretrain stage job's `outputs` under `root` (the stage's `scores`,
        written by the CLI from the metrics, are not the loop's)."""
        return cls(**{name: root / path for name, path in outputs.items() if name != "scores"}, checkpoint=checkpoint)


@dataclass
class Pretraining:
    """Everything one run trains with, built by `setup` and advanced by `train_steps`."""

    run: str
    settings: dict
    world: World
    device: torch.device
    tokenizer: object
    specials: SpecialTokens
    encoder: Encoder
    objective: torch.nn.Module  # what is saved
    model: torch.nn.Module | None  # what trains: the objective, maybe under DDP and torch.compile
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    data_meta: dict  # the token streams' meta.json
    inputs: dict  # what the run is computed from (maskbench.train.fingerprint): run, settings, model, data
    accumulation: int  # micro-batches per process and step: batch_size / (micro_batch_size x processes)
    step: int = 0
    mlflow_run_id: str | None = None
    history: list[dict] = field(default_factory=list)
    # the log's running window: the losses of the steps since the last logged row, the seconds
    # they took and the tokens they read (under `blocks: documents` a step's block length
    # varies), checkpointed so a resumed run's next row averages the same steps
    window: list[float] = field(default_factory=list)
    window_seconds: float = 0.0
    window_tokens: int = 0
    # the operational settings changed at a resume ("threads: 1 -> 2 at step 60"), kept for metrics.json
    resumed_with: list[str] = field(default_factory=list)


def setup(config: dict, run: str, tokens_dir: Path, tokenizer_dir: Path) -> Pretraining:
    """The run's encoder, objective, optimizer and schedule, on its device, from step 0."""
    settings = run_settings(config, run)
    spec = config["runs"][run]
    world = World.from_env()  # one rank per process (see maskbench.train.distributed)
    try:
        steps_per_process = accumulation(settings, world.size)
    except ValueError as exc:
        raise ValueError(f"runs.{run}: {exc}") from None
    device = world.setup(compute_device(settings["device"], settings["threads"]))
    use_backend(config["align"]["backend"])
    torch.manual_seed(settings["seed"])

    with reading(tokenizer_dir):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    specials = SpecialTokens.from_tokenizer(tokenizer)
    size = config["model_sizes"][settings["model"]]
    encoder = Encoder(EncoderConfig(
        vocab_size=len(tokenizer), dropout=settings["dropout"], pad_token_id=specials.pad, **size,
        rope_base=settings["rope_base"],
        # where the blocks' LayerNorms sit (absent: the encoder's default, pre-LN)
        **{key: settings[key] for key in ("block_norm",) if key in settings},
        # the run's position scheme and the objective's longest position (repeated MLM: seq_len · k)
        **encoder_settings(spec, settings["seq_len"], settings["positions"]),
    ))
    init_output_bias(encoder, settings["output_bias_init"], tokens_dir)
    objective = build_objective(spec, encoder, specials)
    with torch.no_grad():
        objective.start_output_bias(encoder.lm_bias)
    objective = objective.to(device)
    model = world.wrap(objective, device)
    if settings["compile"]:
        model = torch.compile(model)
    optimizer = build_optimizer(objective, settings["lr"], settings["weight_decay"], settings["betas"], settings["eps"],
                                **({"decay_on": settings["weight_decay_on"]} if "weight_decay_on" in settings else {}))
    schedule = polynomial_schedule(optimizer, settings["warmup_steps"], settings["steps"],
                                   settings["decay_power"], settings["end_lr"] / settings["lr"])
    with reading(tokens_dir / "meta.json"):
        data_meta = read_json(tokens_dir / "meta.json")
    inputs = {"run": spec, "settings": settings, "model": size, "data": data_meta}
    return Pretraining(run, settings, world, device, tokenizer, specials, encoder, objective, model, optimizer,
                       schedule, data_meta, inputs, steps_per_process)


def init_output_bias(encoder: Encoder, how: str, tokens_dir: Path) -> None:
    """Start the LM head's output bias, which every objective predicts tokens through, at `how`:
    `unigram` = the log of the train stream's add-one smoothed token frequencies (`tokens_dir`'s
    counts), so the untrained model already predicts the unigram distribution; `zero` = as
    initialised. At zero, the first steps' largest gradient pushes every output toward that
    distribution along the same direction; at 2e-3 on SMILES this collapsed MAE-LM's encoder
    outputs to one vector and held it at the unigram loss, where the unigram bias did not
    (docs/learning-failures.md)."""
    if how == "zero":
        return
    counts = read_train_counts(tokens_dir, encoder.config.vocab_size)
    with torch.no_grad():
        encoder.lm_bias.copy_(torch.from_numpy(unigram_log_probs(counts)))


CHECKPOINTS = ("state.pt", "state.prev.pt")  # the newest checkpoint and the one before it


def resume(state: Pretraining, checkpoint_dir: Path, fresh: bool = False) -> None:
    """Continue from the newest readable checkpoint in `checkpoint_dir`. A checkpoint that
    cannot be read (a job killed while the disk was full, a truncated copy) is set aside as
    `<name>.corrupt` and the one before it is used. One made with other settings resumes when
    only operational ones changed (logged, and kept for metrics.json), and raises
    StaleCheckpoint naming the others, leaving the checkpoint untouched. `fresh` (the CLI's
    `--fresh`) deletes the checkpoint instead, saying so: the user's decision to start over."""
    if fresh:
        if checkpoint_dir.exists() and state.world.is_main:
            log.warning("--fresh: deleting %s; %s starts afresh", checkpoint_dir, state.run)
            shutil.rmtree(checkpoint_dir)
        return
    for name in CHECKPOINTS:
        path = checkpoint_dir / name
        if not path.exists():
            continue
        try:
            saved = torch.load(path, map_location=state.device, weights_only=False)
        except Exception as exc:  # a damaged zip, a truncated pickle: whatever torch.load cannot read
            path.rename(path.with_name(path.name + ".corrupt"))
            log.warning("checkpoint %s cannot be read (%s); set aside as %s.corrupt", path, exc, path.name)
            continue
        changes = check_resumable(
            saved, state.inputs, PRETRAIN_OPERATIONAL, f"checkpoint {path} (step {saved['step']})",
            f"start afresh with `maskbench pretrain --run {state.run} --fresh` (or delete {checkpoint_dir}).")
        if changes:
            log.warning("%s: resuming at step %d with operational settings changed (the result stays): %s",
                        state.run, saved["step"], "; ".join(changes))
        state.resumed_with = saved.get("resumed_with", []) + [f"{c} at step {saved['step']}" for c in changes]
        state.objective.load_state_dict(saved["objective"])
        state.optimizer.load_state_dict(saved["optimizer"])
        state.schedule.load_state_dict(saved["schedule"])
        state.step, state.mlflow_run_id, state.history = saved["step"], saved["mlflow_run_id"], saved["history"]
        # (a checkpoint written before the window was saved resumes with an empty one)
        state.window, state.window_seconds = saved.get("window", []), saved.get("window_seconds", 0.0)
        state.window_tokens = saved.get("window_tokens", 0)
        log.warning("resumed %s from checkpoint at step %d (%s)", state.run, state.step, path)
        if saved["processes"] != state.world.size:
            log.warning("%s: the checkpoint was written by %d process(es), this run has %d; the global batch stays %d "
                        "sequences: now %d micro-batch(es) of %d on each process", state.run, saved["processes"],
                        state.world.size, state.settings["batch_size"], state.accumulation,
                        state.settings["micro_batch_size"])
        return
    if any(checkpoint_dir.glob("*.corrupt")):
        log.warning("no readable checkpoint in %s; starting %s afresh", checkpoint_dir, state.run)


def open_tracker(config: dict, state: Pretraining, data_cards: list[Path]):
    """The run's MLflow run (resumed with the checkpoint); other ranks than 0 track nothing."""
    if not state.world.is_main:
        return contextlib.nullcontext()
    spec = config["runs"][state.run]
    return Tracker(
        config["tracking"]["experiment"], f"pretrain/{state.run}",
        tags={"stage": "pretrain", **pretraining_tags(config, state.run), "objective": spec["objective"],
              "modality": spec["modality"], "profile": config["profile"], "git_commit": git_commit()},
        params={"run": spec, "settings": state.settings, "model": config["model_sizes"][state.settings["model"]],
                "data": state.data_meta},
        data_cards=data_cards, run_id=state.mlflow_run_id,
    )


def train_steps(state: Pretraining, train_stream: np.ndarray, valid: list[ValidationSet], tracker: Tracker | None,
                checkpoint_dir: Path) -> None:
    """Train from `state.step` to the last step on blocks of `train_stream`, logging every
    `log_every` steps, adding the validation loss on `valid` every `eval_every` steps and at the
    last (rank 0), and writing a checkpoint every `checkpoint_every`; then leave the process
    group. SIGTERM on any rank stops every rank after the same step, which rank 0 checkpoints
    (`Preempted`). An objective that trains nothing (the `none` control) runs no step."""
    settings, world, device = state.settings, state.world, state.device
    last_step = settings["steps"] if state.objective.trains else 0
    accumulation = state.accumulation
    micro, seed = settings["micro_batch_size"], settings["seed"]
    source = block_source(settings["blocks"], train_stream, settings["seq_len"], state.specials)
    state.objective.train()
    bar = tqdm(total=last_step, initial=state.step, desc=f"pretrain {state.run}", unit="step",
               disable=not world.is_main)
    tick, stop = time.perf_counter() - state.window_seconds, False
    while state.step < last_step and not stop:
        batch_rng, mask_rng = _step_rngs(seed, state.step, device)
        blocks = source.sample(settings["batch_size"], batch_rng).to(device, non_blocking=True)
        draws = state.objective.draw(blocks, mask_rng)  # the global batch's: the same on every rank
        loss = 0.0
        for i, slot in enumerate(world.slots(accumulation)):
            rows = slice(slot * micro, (slot + 1) * micro)
            _seed_dropout(seed, state.step, slot)
            with world.accumulating(state.model, last_micro_step=i == accumulation - 1):
                with precision(device, settings["precision"]):
                    out = state.model(blocks[rows], state.objective.take(draws, rows))
                (out.loss / accumulation).backward()
            loss += out.loss.item() / accumulation
        grad_norm, lr = optimizer_step(state.objective, state.optimizer, state.schedule, settings["clip_norm"])
        loss, stop = world.step_end(loss, preemption.requested(), device)
        state.window_tokens += blocks.numel()
        if not math.isfinite(loss):
            raise FloatingPointError(f"pretrain {state.run}: loss became {loss} at step {state.step}")
        state.step += 1
        state.window.append(loss)
        bar.update(1)
        evaluating = state.step % settings["eval_every"] == 0 or state.step == last_step
        if world.is_main and (state.step % settings["log_every"] == 0 or evaluating):
            elapsed = time.perf_counter() - tick
            row = {"step": state.step, "loss": float(np.mean(state.window)), "lr": lr, "grad_norm": grad_norm,
                   "tokens_per_s": state.window_tokens / elapsed}
            if evaluating:  # no randomness: the training RNGs are reseeded every step anyway
                row["valid_loss"] = valid_loss(state.objective, valid, micro, device, settings["precision"])
            state.history.append(row)
            tracker.log_metrics(step_metrics(row), step=state.step)
            bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:.0f}")
            state.window, state.window_tokens, tick = [], 0, time.perf_counter()
        checkpointing = state.step % settings["checkpoint_every"] == 0 and state.step < last_step
        if world.is_main and (checkpointing or stop):
            state.window_seconds = time.perf_counter() - tick
            _write_history(checkpoint_dir / "log.csv", checkpoint_dir / "valid.csv",
                           state.history)  # progress so far, beside the checkpoint
            _save_checkpoint(checkpoint_dir, state, tracker.run_id)
    bar.close()
    # Every rank leaves the process group here, after rank 0's checkpoint. The DDP wrapper (and
    # its reducer, which holds the group) goes first, so the group is torn down while all peers
    # are still present; torn down later, gloo's destructor can wait forever for a peer that
    # has already exited.
    state.model = out = None
    world.shutdown()
    if stop:
        raise Preempted(f"pretrain {state.run}: stopped by SIGTERM at step {state.step}; checkpoint written "
                        f"to {checkpoint_dir}, a re-run resumes from it (on any number of processes)")


def final_metrics(state: Pretraining, valid: list[ValidationSet]) -> dict:
    """The validation loss of the final model on `valid` (`maskbench.train.validation`: nats
    per masked token, comparable across the masked objectives), what it measures, its gap to
    the token streams' unigram baseline (> 0: the model learned more than token frequencies),
    the part of it no prediction can lower (`valid_loss_floor`: ExLM's DAG transitions; a
    model learned when `unigram_gap + valid_loss_floor` is positive), and the training summary."""
    scored = (state.objective, valid, state.settings["micro_batch_size"], state.device, state.settings["precision"])
    loss = valid_loss(*scored)
    timed = [r["tokens_per_s"] for r in state.history]
    return {
        "steps": state.step,
        "train_loss": state.history[-1]["loss"] if state.history else None,  # None: the `none` control
        "valid_loss": loss,
        "valid_loss_measures": state.objective.valid_loss_measures,
        "unigram_loss": state.data_meta["unigram_loss"],
        "unigram_gap": state.data_meta["unigram_loss"] - loss,
        "valid_loss_floor": valid_loss_floor(*scored),
        "valid_perplexity": math.exp(min(loss, 50.0)),
        "tokens_per_s": float(np.median(timed)) if timed else None,  # all processes together
        "processes": state.world.size,
        "parameters": sum(p.numel() for p in state.encoder.parameters()),
        "align_backend": backend_used(),  # ExLM's states alignment: the kernel or "reference"; None without one
        # operational settings changed at a resume (maskbench.train.fingerprint): absent when none did
        **({"resumed_with": state.resumed_with} if state.resumed_with else {}),
    }


# metrics.json's values fixed by the run and its data rather than measured by training: MLflow params
RUN_CONSTANTS = ("steps", "parameters", "processes", "unigram_loss", "valid_loss_measures")


def step_metrics(row: dict) -> dict[str, float]:
    """A log row as MLflow step metrics: log.csv's `loss` is the training loss, `train_loss`."""
    return {("train_loss" if key == "loss" else key): value for key, value in row.items() if key != "step"}


def final_tracked(metrics: dict, history: list[dict]) -> dict[str, float]:
    """The final metrics MLflow records as metrics at the last step: the measured numbers but
    the run's constants and what the last log row logged there already (its training and
    validation loss: the same values); the median throughput as `median_tokens_per_s`, beside
    the logged series."""
    logged = step_metrics(history[-1]) if history and history[-1]["step"] == metrics["steps"] else {}
    renamed = {("median_tokens_per_s" if key == "tokens_per_s" else key): value for key, value in metrics.items()}
    return {key: value for key, value in renamed.items() if key not in RUN_CONSTANTS and key not in logged
            and isinstance(value, (int, float)) and not isinstance(value, bool)}


def objective_weights(objective: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The objective's parameters and buffers outside its encoder (empty for MLM), which the
    encoder directory fine-tuning loads leaves out."""
    return {name: tensor.detach().contiguous().cpu() for name, tensor in objective.state_dict().items()
            if not name.startswith("encoder.")}


def save(state: Pretraining, metrics: dict, files: PretrainFiles, tracker: Tracker) -> None:
    """Write the stage's outputs (the encoder with its tokenizer as a Hugging Face directory,
    the objective's other weights, the log and the metrics), then drop the checkpoint: a re-run starts afresh."""
    state.encoder.config.pretraining = {**state.objective.pretraining_info(), "run": state.run,
                                        "mlflow_run_id": tracker.run_id}
    state.encoder.config.causal = state.objective.causal  # how `AutoModel` users' forwards attend
    state.tokenizer.model_max_length = state.settings["seq_len"]  # the longest input the encoder was trained on
    with atomic_path(files.model, is_dir=True) as tmp:
        state.encoder.save_pretrained(tmp)
        state.tokenizer.save_pretrained(tmp)
    if files.objective is not None:
        with atomic_path(files.objective) as tmp:
            save_file(objective_weights(state.objective), tmp)
    _write_history(files.log_csv, files.valid_csv, state.history)
    write_json(files.metrics, metrics)
    tracker.log_metrics(final_tracked(metrics, state.history), step=state.step)
    tracker.log_params({key: metrics[key] for key in RUN_CONSTANTS})
    tracker.log_artifact(files.metrics)
    tracker.log_artifact(files.model / "config.json")
    tracker.record_model("pretrained", state.step, {"weights": str(files.model)})
    if metrics["align_backend"] is not None:
        tracker.set_tag("align_backend", metrics["align_backend"])
    shutil.rmtree(files.checkpoint, ignore_errors=True)


def pretrain(config: dict, run: str, tokens_dir: Path, tokenizer_dir: Path, data_cards: list[Path],
             files: PretrainFiles, fresh: bool = False) -> dict:
    """Pretrain `run` (resuming its checkpoint, unless `fresh`); return its final metrics
    (rank 0; {} elsewhere). SIGTERM waits for the end of the current step, which is then
    checkpointed."""
    with preemption.deferred_to_step_end():
        state = setup(config, run, tokens_dir, tokenizer_dir)
        resume(state, files.checkpoint, fresh)
        with open_tracker(config, state, data_cards) as tracker:
            if state.resumed_with and tracker is not None:  # MLflow's params keep the first start's values
                tracker.set_tag("resumed_with", " | ".join(state.resumed_with))
            settings = state.settings
            valid = validation_sets(block_source(settings["blocks"], load_stream(tokens_dir, "valid"),
                                                 settings["seq_len"], state.specials), settings["eval_blocks"])
            train_steps(state, load_stream(tokens_dir, "train"), valid, tracker, files.checkpoint)
            if not state.world.is_main:  # rank 0 evaluates, saves and reports
                return {}
            metrics = {**final_metrics(state, valid), "peak_gpu_memory_gib": peak_memory_gib(state.device),
                       "arithmetic": arithmetic(state.device)}
            save(state, metrics, files, tracker)
    return metrics


def _save_checkpoint(checkpoint_dir: Path, state: Pretraining, mlflow_run_id: str) -> None:
    """Everything a resumed run needs, the log rows so far included: the workflow tools delete
    a stage's outputs (log.csv) before re-running it, but not the checkpoint directory. The
    previous checkpoint is kept beside the new one, in case the new one is damaged."""
    saved = {"objective": state.objective.state_dict(), "optimizer": state.optimizer.state_dict(),
             "schedule": state.schedule.state_dict(), "step": state.step, "mlflow_run_id": mlflow_run_id,
             "fingerprint": fingerprint(state.inputs, PRETRAIN_OPERATIONAL), "inputs": state.inputs,
             "history": state.history, "processes": state.world.size,
             "window": state.window, "window_seconds": state.window_seconds, "window_tokens": state.window_tokens,
             "resumed_with": state.resumed_with}
    newest, previous = (checkpoint_dir / name for name in CHECKPOINTS)
    if newest.exists():  # keep it as the previous one, through a hard link: `newest` never goes missing
        link = previous.with_name(f".{previous.name}.link")
        link.unlink(missing_ok=True)
        os.link(newest, link)
        os.replace(link, previous)
    save_torch(saved, newest)


LOG_COLUMNS = ("step", "loss", "lr", "grad_norm", "tokens_per_s")
VALID_COLUMNS = ("step", "valid_loss")


def _write_history(log_csv: Path, valid_csv: Path, history: list[dict]) -> None:
    """The training log (every logged step) to `log_csv`, the validation curve (the steps that
    evaluated) to `valid_csv`: two files, so that neither has empty cells, which a DVC plot
    would draw as 0."""
    for path, columns, rows in ((log_csv, LOG_COLUMNS, history),
                                (valid_csv, VALID_COLUMNS, [r for r in history if "valid_loss" in r])):
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
