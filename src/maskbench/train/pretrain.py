"""Pretraining loop shared by every objective.

    maskbench pretrain --run mlm          # reads params.yaml, writes runs/pretrain/mlm/

Batches are windows drawn from the train split's token stream, framed as [CLS] … [SEP]. The
window offsets and masks of step s come from RNGs seeded by (seed, s), so a run resumed from a
checkpoint continues exactly as an uninterrupted one would. A checkpoint (model, optimizer,
schedule, step, MLflow run id, log rows) is written atomically every `checkpoint_every` steps
into `checkpoint/`, with the log so far as `checkpoint/log.csv`; re-running the same command
resumes from it, unless the run's parameters or data changed since (then it starts afresh).
The stage's declared outputs (`model/`, `metrics.json`, `log.csv`) are written only once
training has finished, so a killed job leaves none of them behind and Snakemake re-runs it
without `--rerun-incomplete`. A finished run deletes its checkpoint. The finished encoder is
saved with its tokenizer as a Hugging Face directory (`model/`), which fine-tuning loads.

Several processes: `python -m maskbench.train.distributed --nproc_per_node N -- pretrain --run
mlm` (torchrun) trains with DDP (NCCL on GPUs, gloo on CPU), each rank on its own blocks; see
`maskbench.train.distributed`. `compile: true` in the pretraining settings wraps the model in
`torch.compile`.
"""

from __future__ import annotations

import csv
import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import AutoTokenizer

from maskbench.config import params_hash, run_settings
from maskbench.data.corpus import load_stream
from maskbench.io import atomic_path, read_json, write_json
from maskbench.model import Encoder, EncoderConfig
from maskbench.objectives import SpecialTokens, build_objective, encoder_settings
from maskbench.train.distributed import World
from maskbench.train.optim import build_optimizer, polynomial_schedule
from maskbench.train.tracking import Tracker, git_commit

log = logging.getLogger(__name__)


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda requested in params.yaml but no CUDA device is available")
    return torch.device(name)


def sample_blocks(stream: np.ndarray, batch: int, seq_len: int, specials: SpecialTokens,
                  rng: np.random.Generator) -> torch.Tensor:
    """`batch` random windows of `seq_len - 2` tokens, framed as [CLS] window [SEP]."""
    body = seq_len - 2
    if stream.size <= body:
        raise ValueError(f"token stream has {stream.size} tokens, fewer than a block of {body}")
    starts = rng.integers(0, stream.size - body, size=batch)
    windows = np.stack([stream[s:s + body] for s in starts]).astype(np.int64)
    blocks = np.empty((batch, seq_len), dtype=np.int64)
    blocks[:, 0], blocks[:, -1], blocks[:, 1:-1] = specials.cls, specials.sep, windows
    return torch.from_numpy(blocks)


def eval_blocks(stream: np.ndarray, seq_len: int, specials: SpecialTokens, limit: int) -> torch.Tensor:
    """Consecutive non-overlapping blocks of a held-out stream (deterministic)."""
    body = seq_len - 2
    n = min(limit, stream.size // body)
    windows = np.asarray(stream[: n * body], dtype=np.int64).reshape(n, body)
    blocks = np.empty((n, seq_len), dtype=np.int64)
    blocks[:, 0], blocks[:, -1], blocks[:, 1:-1] = specials.cls, specials.sep, windows
    return torch.from_numpy(blocks)


@torch.no_grad()
def evaluate(objective, blocks: torch.Tensor, batch: int, device, seed: int) -> float:
    """Mean loss per prediction over `blocks`, with masks fixed by `seed`."""
    objective.eval()
    generator = torch.Generator(device=device).manual_seed(seed)
    total, count = 0.0, 0
    for start in range(0, len(blocks), batch):
        out = objective(blocks[start:start + batch].to(device), generator)
        total += out.loss.item() * out.num_predictions
        count += out.num_predictions
    objective.train()
    return total / max(count, 1)


def _step_rngs(seed: int, step: int, device) -> tuple[np.random.Generator, torch.Generator]:
    """Batch offsets, masks and dropout of step `step` depend only on (seed, step)."""
    torch.manual_seed(seed * 1_000_003 + step)  # dropout
    batch_rng = np.random.default_rng([seed, step])
    mask_rng = torch.Generator(device=device).manual_seed(seed * 1_000_003 + step + 1)
    return batch_rng, mask_rng


def pretrain(config: dict, run: str, tokens_dir: Path, tokenizer_dir: Path, data_cards: list[Path], out_dir: Path) -> dict:
    settings = run_settings(config, run)
    spec = config["runs"][run]
    world = World.from_env()  # torchrun: one rank per process (see maskbench.train.distributed)
    device = world.setup(pick_device(settings["device"]))
    torch.set_num_threads(settings["threads"])
    torch.manual_seed(settings["seed"])

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    specials = SpecialTokens.from_tokenizer(tokenizer)
    size = config["model_sizes"][settings["model"]]
    encoder = Encoder(EncoderConfig(
        vocab_size=len(tokenizer), dropout=settings["dropout"], pad_token_id=specials.pad, **size,
        # the objective's position scheme and longest position (repeated MLM: seq_len · k)
        **encoder_settings(spec, settings["seq_len"]),
    ))
    objective = build_objective(spec, encoder, specials).to(device)
    model = world.wrap(objective, device)  # what trains; `objective` is what is saved
    if settings.get("compile", False):
        model = torch.compile(model)
    optimizer = build_optimizer(objective, settings["lr"], settings["weight_decay"], settings["betas"], settings["eps"])
    schedule = polynomial_schedule(optimizer, settings["warmup_steps"], settings["steps"],
                                   settings["decay_power"], settings["end_lr"] / settings["lr"])

    data_meta = read_json(tokens_dir / "meta.json")
    fingerprint = params_hash({"run": spec, "settings": settings, "model": size, "data": data_meta})
    ckpt_dir = out_dir / "checkpoint"
    log_path = out_dir / "log.csv"
    step, run_id, history = 0, None, []
    if (ckpt_dir / "state.pt").exists():
        state = torch.load(ckpt_dir / "state.pt", map_location=device, weights_only=False)
        if state["fingerprint"] != fingerprint:
            log.warning("checkpoint in %s was made with other parameters or data; starting %s afresh", ckpt_dir, run)
        else:
            objective.load_state_dict(state["objective"])
            optimizer.load_state_dict(state["optimizer"])
            schedule.load_state_dict(state["schedule"])
            step, run_id, history = state["step"], state["mlflow_run_id"], state.get("history", [])
            log.warning("resumed %s from checkpoint at step %d", run, step)

    tracker = None if not world.is_main else Tracker(
        config["tracking"]["experiment"], f"pretrain/{run}",
        tags={"stage": "pretrain", "run": run, "objective": spec["objective"], "modality": spec["modality"],
              "profile": config["profile"], "git_commit": git_commit()},
        params={"run": spec, "settings": settings, "model": size, "data": data_meta},
        data_cards=data_cards, run_id=run_id,
    )
    train_stream = load_stream(tokens_dir, "train")

    tokens_per_step = settings["batch_size"] * settings["grad_accum"] * settings["seq_len"] * world.size
    objective.train()
    bar = tqdm(total=settings["steps"], initial=step, desc=f"pretrain {run}", unit="step", disable=not world.is_main)
    recent, tick = [], time.perf_counter()
    try:
        while step < settings["steps"]:
            batch_rng, mask_rng = _step_rngs(world.seed(settings["seed"]), step, device)
            loss_sum = 0.0
            for micro in range(settings["grad_accum"]):
                blocks = sample_blocks(train_stream, settings["batch_size"], settings["seq_len"], specials, batch_rng)
                with world.accumulating(model, last_micro_step=micro == settings["grad_accum"] - 1):
                    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                        out = model(blocks.to(device, non_blocking=True), mask_rng)
                    (out.loss / settings["grad_accum"]).backward()
                loss_sum += out.loss.item() / settings["grad_accum"]
            loss_sum = world.mean(loss_sum, device)
            if not math.isfinite(loss_sum):
                raise FloatingPointError(f"pretrain {run}: loss became {loss_sum} at step {step}")
            grad_norm = torch.nn.utils.clip_grad_norm_(objective.parameters(), settings["clip_norm"] or math.inf).item()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            lr = schedule.get_last_lr()[0]
            schedule.step()
            step += 1
            recent.append(loss_sum)
            bar.update(1)
            if world.is_main and (step % settings["log_every"] == 0 or step == settings["steps"]):
                elapsed = time.perf_counter() - tick
                row = {"step": step, "loss": float(np.mean(recent)), "lr": lr, "grad_norm": grad_norm,
                       "tokens_per_s": len(recent) * tokens_per_step / elapsed}
                history.append(row)
                tracker.log_metrics({k: v for k, v in row.items() if k != "step"}, step=step)
                bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_s']:.0f}")
                recent, tick = [], time.perf_counter()
            if world.is_main and step % settings["checkpoint_every"] == 0 and step < settings["steps"]:
                _write_history(ckpt_dir / "log.csv", history)  # progress so far, beside the checkpoint
                _save_checkpoint(ckpt_dir, objective, optimizer, schedule, step, tracker.run_id, fingerprint,
                                 history)
        bar.close()
        # Training is over: every rank leaves the process group here. The DDP wrapper (and its
        # reducer, which holds the group) goes first, so the group is torn down while all peers
        # are still present; torn down later, gloo's destructor can wait forever for a peer
        # that has already exited.
        model = out = None
        world.shutdown()
        if not world.is_main:  # rank 0 evaluates, saves and reports
            return {}

        valid_blocks = eval_blocks(load_stream(tokens_dir, "valid"), settings["seq_len"], specials, limit=256)
        valid_loss = evaluate(objective, valid_blocks, settings["batch_size"], device, settings["seed"])
        timed = [r["tokens_per_s"] for r in history]
        metrics = {
            "steps": step,
            "train_loss": history[-1]["loss"],
            "valid_loss": valid_loss,
            "valid_perplexity": math.exp(min(valid_loss, 50.0)),
            "tokens_per_s": float(np.median(timed)) if timed else None,
            "parameters": sum(p.numel() for p in encoder.parameters()),
        }
        encoder.config.pretraining = {**objective.pretraining_info(), "run": run, "mlflow_run_id": tracker.run_id}
        with atomic_path(out_dir / "model", is_dir=True) as tmp:
            encoder.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        _write_history(log_path, history)
        write_json(out_dir / "metrics.json", metrics)
        tracker.log_metrics({k: v for k, v in metrics.items() if v is not None})
        tracker.log_artifact(out_dir / "metrics.json")
        tracker.log_artifact(out_dir / "model" / "config.json")
        tracker.finish()
        shutil.rmtree(ckpt_dir, ignore_errors=True)  # finished: a re-run starts afresh
    except BaseException:
        if tracker is not None:
            tracker.finish("KILLED")
        raise
    return metrics


def _save_checkpoint(ckpt_dir: Path, objective, optimizer, schedule, step: int, run_id: str,
                     fingerprint: str, history: list[dict]) -> None:
    """Everything a resumed run needs, the log rows so far included: the workflow tools delete
    a stage's outputs (log.csv) before re-running it, but not the checkpoint directory."""
    state = {"objective": objective.state_dict(), "optimizer": optimizer.state_dict(),
             "schedule": schedule.state_dict(), "step": step, "mlflow_run_id": run_id,
             "fingerprint": fingerprint, "history": history}
    with atomic_path(ckpt_dir / "state.pt") as tmp:
        torch.save(state, tmp)


def _write_history(path: Path, history: list[dict]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["step", "loss", "lr", "grad_norm", "tokens_per_s"])
        writer.writeheader()
        writer.writerows(history)
