"""What a job costs and what it asks a scheduler for, estimated from the work it does.

Every job of the stage table (`maskbench.stages`) takes its `runtime` (minutes), host `mem_mb`,
`gpu` count and, for a pretraining run on several nodes, its SLURM task layout from here, and
`maskbench plan TARGET` adds them up before anything runs (`maskbench.plan`):

    STAGES["pretrain"].estimate(config, {"run": "mlm"})   # Estimate(seconds=..., gpus=8, ...)
    STAGES["pretrain"].resources(config, {"run": "mlm"})  # {"runtime": ..., "mem_mb": ..., "gpu": 8, ...}

Work is counted in floating-point operations of matrix products, what GPUs and a CPU's BLAS
spend their time on. A Transformer block of width d and inner width f holds 4d² + 2df weights;
a training step costs 6 FLOPs per weight and position (2 forward, 4 backward) plus attention's
QKᵀ and AV, 12·d·P per position over P positions: the usual 6N + 12·L·d·T count (Kaplan et al.
2020), which torch's FlopCounterMode also gives for this encoder (benchmarks/README.md). Each
objective is counted over the sequences it really runs (its card's `passes`,
`maskbench.objectives.cards`), fine-tuning over its rows, epochs and grid points. FLOPs become
seconds at the rate params.yaml `throughput` gives for the device and objective, plus the
device's startup, times `cluster.safety`. Memory: weights, gradients and AdamW's moments (16
bytes a parameter), one micro-batch's activations (Korthikanti et al. 2022: 18d + 4f bytes a
position and block in 16-bit, twice that in float32) and its logits.

Stages whose work is not matrix products (downloads, tokenizers, splits, summaries, the ECFP
baselines, reports) take their minutes and memory from params.yaml `resources.<stage>`.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

from maskbench import alignment_record, paths
from maskbench.config import (accumulation, analysis_finetune_task, computes_in_bf16, finetune_settings,
                              launch_settings, run_settings, task_grid)
from maskbench.objectives.cards import run_card, run_knobs
from maskbench.objectives.cost import (ADAMW_BYTES, LOGIT_BYTES, WEIGHT_BYTES, Passes, activation_bytes,
                                       encoder_params, head_flops, stack_flops)

# Stages whose minutes and memory params.yaml declares (`resources.<stage>`): not FLOP-bound.
DECLARED = ("download", "tokenizer", "tokenize", "task", "aggregate", "baseline", "report", "index")
FORWARD = 1 / 3    # a forward pass is 2 of a training step's 6 FLOPs per weight and position
# The analysis stage reads its blocks four times through the objective: corrupted semantics,
# entropy, and the effective rank's states with and without [MASK] (maskbench.analysis.stage);
# and once more through the fine-tuned encoder where its run has a rank after fine-tuning.
ANALYSIS_READINGS = 4


def objective_passes(spec: dict, size: dict, T: int) -> Passes:
    """The passes of a `runs.<name>` entry's objective over a block of T tokens (its card's)."""
    return run_card(spec).passes(size, T, run_knobs(spec))


def finetune_positions(spec: dict, tokens: int) -> int:
    """Encoder positions of a fine-tuning row of `tokens` tokens under a run's objective (its
    card's: Repeated MLM repeats each token k times; ExLM expands a pair's [CLS] and [SEP])."""
    return run_card(spec).finetune_positions(run_knobs(spec), tokens)


def model_size(config: dict, run: str) -> dict:
    return config["model_sizes"][run_settings(config, run)["model"]]


def vocab_size(config: dict, modality: str) -> int:
    """The tokenizer's vocabulary (`tokenizer.<modality>.vocab_size`), or `resources.vocab_size`
    for a tokenizer whose vocabulary its corpus decides (SMILES)."""
    return config["tokenizer"][modality].get("vocab_size", config["resources"]["vocab_size"])


# --- rows of a task ----------------------------------------------------------------------------

def task_card(task: str) -> dict:
    """The task's card (data/cards/task-<task>.json) once the task stage wrote it, else {}: an
    estimate is made before any data exists, and one that cannot be read is rebuilt by its stage."""
    try:
        return json.loads(Path(paths.TASK_CARD.format(task=task)).read_text())
    except (OSError, ValueError):
        return {}


def task_rows(config: dict, task: str) -> dict[str, int]:
    """Labelled rows per split of a task: its card's, else `resources.rows.<dataset>` (rows per
    split, or a total split by `tasks.<task>.split`), else a generated dataset's
    `word_order.examples`."""
    card = task_card(task)
    if "rows" in card:
        return {s: n - card.get("unlabelled_rows", {}).get(s, 0) for s, n in card["rows"].items()}
    spec = config["tasks"][task]
    dataset = config["datasets"][spec["dataset"]]
    total = config["resources"]["rows"].get(spec["dataset"], dataset.get("word_order", {}).get("examples"))
    if isinstance(total, dict):
        return total
    dev, test = spec["split"]["dev"], spec["split"]["test"]
    return {"train": round(total * (1 - dev - test)), "dev": round(total * dev), "test": round(total * test)}


def rows_used(config: dict, task: str) -> tuple[int, int]:
    """(train rows a seed learns from, rows scored after each epoch): train capped at
    `max_train_examples`; dev, test and the extra splits each capped at `max_eval_examples`."""
    settings, rows = finetune_settings(config, task), task_rows(config, task)
    cap = {"train": settings["max_train_examples"], "eval": settings["max_eval_examples"]}
    scored = ["dev", "test", *config["tasks"][task].get("extra_eval_splits", [])]
    evaluated = sum(min(rows[s], cap["eval"] or rows[s]) for s in scored if s in rows)
    return min(rows["train"], cap["train"] or rows["train"]), evaluated


def row_tokens(config: dict, run: str, task: str, settings: dict) -> tuple[int, int]:
    """(tokens of a training row, of a scored row): the run's encoder reads max_len tokens at
    most (its block length at most); rows are shorter, `resources.tokens.<dataset>` long on
    average where declared. Scoring batches rows of similar length, and so does training with
    `group_by_length`; without it a batch pads to its longest row, counted as max_len."""
    longest = min(settings["max_len"], run_settings(config, run)["seq_len"])
    mean = min(longest, config["resources"]["tokens"].get(config["tasks"][task]["dataset"], longest))
    return (mean if settings["group_by_length"] else longest), mean


def grid_points(config: dict, task: str) -> list[dict]:
    """Settings of every point of a task's grid, as `maskbench.finetune.loop.grid_points` (which
    imports torch) makes them."""
    base, grid = finetune_settings(config, task), task_grid(config, task)
    keys = sorted(grid)
    return [{**base, **dict(zip(keys, values))} for values in itertools.product(*(grid[k] for k in keys))]


# --- work of each stage ------------------------------------------------------------------------

@dataclass(frozen=True)
class Work:
    """A job's compute before startup and safety: seconds on its device, peak device memory of
    one process, and host memory it needs besides (bytes)."""

    seconds: float
    device_bytes: float
    host_bytes: float = 0.0


def compiles(config: dict, run: str) -> bool:
    """Whether `run` pretrains under torch.compile (`pretrain.compile`)."""
    return run_settings(config, run)["compile"]


def rate(config: dict, device: str, threads: int, objective: str | None = None, precision: str = "fp32",
         compiled: bool = False) -> float:
    """FLOP/s of one process: a pretraining step of `objective` (its card's throughput row; where
    `compiled`, the row's torch.compile rate if it has one), or without one encoder passes
    (fine-tuning, probes, analyses) in the stage's `precision` (bf16 where the policy autocasts
    and the row has a bf16 rate, else float32); a CPU's per thread. A row with a `peak_ratio`
    scales the rates it merged from a measured row to its own device's peaks."""
    row = config["throughput"][device]
    if objective is not None:
        key = run_card({"objective": objective}).throughput_key
        tflops = row.get("pretrain_compiled", {}).get(key, row["pretrain"][key]) if compiled else row["pretrain"][key]
        arithmetic = "bf16"
    else:
        arithmetic = "bf16" if computes_in_bf16(precision, device != "cpu") and "bf16" in row else "float32"
        tflops = row[arithmetic]
    return tflops * row.get("peak_ratio", {}).get(arithmetic, 1.0) * 1e12 * (threads if device == "cpu" else 1)


def processes(config: dict, run: str) -> int:
    launch = launch_settings(config, run)
    return launch["gpus"] * launch["nodes"]


def pretrain_seconds(config: dict, run: str, device: str, threads: int, count: int) -> float:
    """Compute seconds of a pretraining run on `count` processes: its steps of the global batch
    and its validations (every `eval_every` steps and at the end, forward only). On a GPU,
    ExLM's states alignment is priced at its recorded time (alignment_seconds), not as FLOPs."""
    spec, settings = config["runs"][run], run_settings(config, run)
    size, vocab = model_size(config, run), vocab_size(config, spec["modality"])
    passes = objective_passes(spec, size, settings["seq_len"])
    on_gpu = device != "cpu"
    sequence = passes.flops(size, vocab) - (passes.alignment_flops() if on_gpu else 0)
    steps = settings["steps"] if run_card(spec).pretrains else 0  # the control trains no step
    validations = steps // settings["eval_every"] + 1
    sequences = steps * settings["batch_size"] + FORWARD * validations * settings["eval_blocks"]
    seconds = sequence * sequences / (rate(config, device, threads, spec["objective"],
                                            compiled=compiles(config, run)) * count)
    if on_gpu and passes.alignment:
        seconds += alignment_seconds(passes.alignment, settings["micro_batch_size"], sequences / count)
    return seconds


def alignment_seconds(alignment: tuple[int, int], micro_batch: int, sequences: float) -> float:
    """Seconds of the states alignment over `sequences` sequences of one process, run in micro-
    batches of `micro_batch`: each micro-batch at the time maskbench.alignment_record fits to the
    GPU record for its (B, M, L) (the backend `align.backend: auto` runs there), as measured on
    the record's device whatever the plan's GPU. A validation counts FORWARD of a sequence, as
    the α pass is about a third of the α, β and transition-gradient work."""
    m, states = alignment
    return sequences / micro_batch * alignment_record.alignment_ms((micro_batch, m, states)) / 1e3


def memory_factor(config: dict, device: str, compiled: bool = False) -> float:
    """A GPU's measured peak memory of a training step over its estimate, eager or compiled
    (`throughput.<device>.memory_over_estimate`: autocast keeps float32 copies the estimate does
    not count); 1 on a CPU, or for a row that measured none."""
    if device == "cpu":
        return 1.0
    return config["throughput"][device].get("memory_over_estimate", {}).get("compiled" if compiled else "eager", 1.0)


def training_bytes(config: dict, run: str, device: str, micro_batch: int) -> float:
    """Peak memory of one process training `run` at `micro_batch` sequences on `device`: the
    objective's estimate (`Passes.training_bytes`), times the device's factor for the run's mode."""
    spec, settings = config["runs"][run], run_settings(config, run)
    size, vocab = model_size(config, run), vocab_size(config, spec["modality"])
    passes = objective_passes(spec, size, settings["seq_len"])
    return (memory_factor(config, device, compiles(config, run))
            * passes.training_bytes(size, vocab, micro_batch, half=device != "cpu"))


def pretrain_work(config: dict, w: dict, device: str, threads: int) -> Work:
    micro_batch = run_settings(config, w["run"])["micro_batch_size"]
    return Work(pretrain_seconds(config, w["run"], device, threads, processes(config, w["run"])),
                training_bytes(config, w["run"], device, micro_batch))


def fitting_micro_batch(config: dict, run: str, limit_gb: float) -> int | None:
    """The largest micro-batch of `run` whose training fits in `limit_gb` GiB of one GPU (of
    cluster.gpu's row) and still divides its global batch over its processes (the batch, so the
    result, unchanged: a checkpoint resumes under it); None when not even one sequence fits."""
    settings, count = run_settings(config, run), processes(config, run)
    for micro in range(min(settings["micro_batch_size"], settings["batch_size"] // count), 0, -1):
        if (settings["batch_size"] % (micro * count) == 0
                and training_bytes(config, run, config["cluster"]["gpu"], micro) / 2 ** 30 <= limit_gb):
            return micro
    return None


def finetune_cost(config: dict, run: str, task: str, device: str) -> tuple[float, float]:
    """(FLOPs, peak device bytes) of fine-tuning `run` on `task` with one seed on `device`: every
    grid point's epochs over the train rows, and after each epoch a forward pass over the scored
    rows (`row_tokens` long); memory at the grid's largest batch of rows of max_len tokens, with
    16-bit activations where the precision policy autocasts, times the device's measured eager
    factor (`memory_factor`: fine-tuning is not compiled)."""
    spec, size = config["runs"][run], model_size(config, run)
    half = computes_in_bf16(finetune_settings(config, task)["precision"], device != "cpu")
    train, scored = rows_used(config, task)
    points = grid_points(config, task)
    train_tokens, scored_tokens = row_tokens(config, run, task, points[0])
    per_train, per_scored = (stack_flops(size, finetune_positions(spec, t), size["n_layer"])
                             for t in (train_tokens, scored_tokens))
    flops = sum(p["epochs"] * (train * per_train + FORWARD * scored * per_scored) for p in points)
    longest = finetune_positions(spec, min(points[0]["max_len"], run_settings(config, run)["seq_len"]))
    memory = memory_factor(config, device) * (
        ADAMW_BYTES * encoder_params(size, vocab_size(config, spec["modality"]))
        + max(p["batch_size"] for p in points) * longest * size["n_layer"] * activation_bytes(size, half=half))
    return flops, memory


def finetune_work(config: dict, w: dict, device: str, threads: int) -> Work:
    flops, memory = finetune_cost(config, w["run"], w["task"], device)
    return Work(flops / rate(config, device, threads,
                             precision=finetune_settings(config, w["task"])["precision"]), memory)


def forward_bytes(size: dict, vocab: int, sequences: int, positions: float, predictions: float) -> float:
    """Peak memory of forward passes: the weights, one block's activations of the sequences
    read at once, their logits."""
    return (WEIGHT_BYTES * encoder_params(size, vocab) + sequences * positions * activation_bytes(size, half=False)
            + LOGIT_BYTES * vocab * predictions)


def probe_work(config: dict, w: dict, device: str, threads: int) -> Work:
    """The frozen encoder's forward pass over fine-tuning's rows (every layer's states), then
    a linear model per layer and regularisation value on the CPU, at most `controls.max_iter`
    passes of 4·rows·width FLOPs each (loss and gradient), per class or task its card names
    (one without a card). Host memory: one layer's features of every split, a standardised
    copy and the solver's (maskbench.controls.probe)."""
    spec, size = config["runs"][w["run"]], model_size(config, w["run"])
    settings, vocab = finetune_settings(config, w["task"]), vocab_size(config, spec["modality"])
    train, scored = rows_used(config, w["task"])
    positions = finetune_positions(spec, row_tokens(config, w["run"], w["task"], settings)[1])  # batched by length
    encoder = FORWARD * (train + scored) * stack_flops(size, positions, size["n_layer"])
    card = task_card(w["task"])
    outputs = len(card.get("task_names") or card.get("label_names") or [0])
    controls = config["controls"]
    fits = (len(controls["alpha"] if config["tasks"][w["task"]]["kind"] == "regression" else controls["C"])
            * (size["n_layer"] + 1) * controls["max_iter"] * 4 * train * size["n_embd"] * outputs)
    seconds = (encoder / rate(config, device, threads, precision=settings["precision"])
               + fits / rate(config, "cpu", threads))
    return Work(seconds, forward_bytes(size, vocab, 2 * settings["batch_size"], positions, 0),
                host_bytes=3 * 4 * (train + scored) * size["n_embd"])


def analyse_work(config: dict, w: dict, device: str, threads: int) -> Work:
    """`ANALYSIS_READINGS` forward passes of the objective over `analysis.blocks` blocks, and, for
    a run with a rank after fine-tuning, one pass of the encoder its fine-tuning job kept (trained
    there: only the reading is work here)."""
    spec, settings = config["runs"][w["run"]], run_settings(config, w["run"])
    size, vocab = model_size(config, w["run"]), vocab_size(config, spec["modality"])
    T = settings["seq_len"]
    passes = objective_passes(spec, size, T)
    finetuned = stack_flops(size, T, size["n_layer"]) if analysis_finetune_task(config, w["run"]) else 0.0
    flops = config["analysis"]["blocks"] * FORWARD * (ANALYSIS_READINGS * passes.flops(size, vocab) + finetuned)
    memory = forward_bytes(size, vocab, settings["micro_batch_size"], sum(p for p, _ in passes.stacks), 0)
    return Work(flops / rate(config, device, threads, precision=settings["precision"]), memory)


def perplexity_work(config: dict, w: dict, device: str, threads: int) -> Work:
    """Every body token of `generation_perplexity.blocks` blocks predicted from its prefix: a
    causal model (AR, DAR) reads each block once; a masked one reads "prefix [MASK]" once per
    token, of mean length T/2 + 1."""
    spec, T = config["runs"][w["run"]], run_settings(config, w["run"])["seq_len"]
    size, vocab = model_size(config, w["run"]), vocab_size(config, spec["modality"])
    blocks, rows = config["generation_perplexity"]["blocks"], config["generation_perplexity"]["rows"]
    if run_card(spec).causal:
        sequences, positions, predictions = blocks, T, T - 2
    else:
        sequences, positions, predictions = blocks * (T - 2), T / 2 + 1, 1
    flops = FORWARD * sequences * (stack_flops(size, positions, size["n_layer"]) + head_flops(size, vocab, predictions))
    per_call = min(sequences, max(1, rows // predictions))
    return Work(flops / rate(config, device, threads, precision=run_settings(config, w["run"])["precision"]),
                forward_bytes(size, vocab, per_call, positions, per_call * predictions))


WORK = {"pretrain": pretrain_work, "finetune": finetune_work, "probe": probe_work, "analyse": analyse_work,
        "perplexity": perplexity_work}


# --- a job's estimate and what it asks -----------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
    """One job: its wall time (startup and safety included), where it runs and what it holds.
    `gpus` over all its nodes; `host_mem_mb` per node; `gpu_mem_gb` per GPU (None without)."""

    device: str
    seconds: float
    gpus: int
    nodes: int
    tasks_per_node: int
    threads: int
    host_mem_mb: int
    gpu_mem_gb: float | None

    @property
    def minutes(self) -> int:
        return math.ceil(self.seconds / 60)

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.seconds / 3600

    @property
    def cpu_hours(self) -> float:
        """Core-hours of a job without GPUs (a GPU job's cores come with its GPUs)."""
        return 0.0 if self.gpus else self.nodes * self.tasks_per_node * self.threads * self.seconds / 3600


def device_of(config: dict, cuda: bool) -> str:
    """The throughput row a job runs at: `cluster.gpu` for a `device: cuda` job, else `cpu`."""
    return config["cluster"]["gpu"] if cuda else "cpu"


def estimate(config: dict, stage: str, w: dict, threads: int, cuda: bool) -> Estimate:
    """The estimate of one job of `stage` (wildcards `w`), whose processes each use `threads`
    CPU threads and, where `cuda`, a GPU."""
    cluster = config["cluster"]
    if stage in DECLARED:
        declared = config["resources"][stage]
        return Estimate("cpu", cluster["safety"] * 60 * declared["runtime"], 0, 1, 1, threads, declared["mem_mb"], None)
    device = device_of(config, cuda)
    work = WORK[stage](config, w, device, threads)
    launch = launch_settings(config, w["run"]) if stage == "pretrain" else {"gpus": 1, "nodes": 1}
    per_node = launch["gpus"]  # processes on each node: one task of them all, or one task each
    tasks_per_node, task_threads = (1, threads * per_node) if launch["nodes"] == 1 else (per_node, threads)
    floor = cluster["cuda_host_mem_mb"] if cuda else cluster["cpu_host_mem_mb"]
    host = work.host_bytes + (0 if cuda else work.device_bytes)  # on a CPU the model lives in host memory
    return Estimate(device, cluster["safety"] * (config["throughput"][device]["startup_s"] + work.seconds),
                    per_node * launch["nodes"] if cuda else 0, launch["nodes"], tasks_per_node, task_threads,
                    per_node * math.ceil(floor + cluster["safety"] * host / 2 ** 20),
                    work.device_bytes / 2 ** 30 if cuda else None)


# The stages that checkpoint and resume when SIGTERM stops them: a time limit costs them a
# resubmission (workflow/profiles/slurm retries), not the job.
RESUMABLE = ("pretrain", "finetune")


def runtime_limit(config: dict, stage: str) -> float:
    """Minutes a job of `stage` may be estimated at: cluster.max_runtime for a stage that
    resumes, less cluster.runtime_margin of it for one that does not."""
    cluster = config["cluster"]
    return cluster["max_runtime"] * (1 if stage in RESUMABLE else 1 - cluster["runtime_margin"])


def scheduler_resources(config: dict, job: Estimate, where: str, stage: str) -> dict:
    """What the job asks Snakemake and its SLURM plugin for: threads, mem_mb (per node),
    runtime (minutes), gpu; a job on several nodes also nodes and its tasks, submitted as the
    plugin's "mpi" kind so that `maskbench pretrain` itself starts one task per GPU with srun
    (workflow/profiles/slurm/config.yaml). The runtime is at least cluster.min_runtime.
    ValueError, naming `where`, beyond `runtime_limit`."""
    limit = runtime_limit(config, stage)
    if job.minutes > limit:
        margin = "" if stage in RESUMABLE else f" less cluster.runtime_margin (it cannot resume): {limit:.0f}"
        raise ValueError(f"{where}: asks {job.minutes} minutes (estimated, x cluster.safety), beyond "
                         f"cluster.max_runtime {config['cluster']['max_runtime']}{margin}; run `maskbench plan` "
                         "for what would fit")
    runtime = min(max(job.minutes, config["cluster"]["min_runtime"]), config["cluster"]["max_runtime"])
    asked = {"threads": job.threads, "mem_mb": job.host_mem_mb, "runtime": runtime, "gpu": job.gpus}
    if job.nodes > 1:
        # --ntasks-per-gpu is mutually exclusive with --ntasks-per-node in SLURM: tasks_per_gpu 0
        # keeps the plugin from adding it (it would fall back to `tasks` otherwise)
        tasks = {"tasks_per_node": job.tasks_per_node} if job.tasks_per_node > 1 else {"tasks": job.nodes}
        asked |= {"nodes": job.nodes, "mpi": "srun", "tasks_per_gpu": 0, **tasks}
    return asked


# --- a pretraining run beyond cluster.max_runtime ----------------------------------------------

def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h"


def launches(config: dict, run: str):
    """Candidate (gpus, nodes) of a run, fewest processes first: one node with 1..gpus_per_node,
    then whole nodes; only those whose process count divides the global batch."""
    per_node, settings = config["cluster"]["gpus_per_node"], run_settings(config, run)
    most = settings["batch_size"] // settings["micro_batch_size"]
    candidates = [(g, 1) for g in range(1, per_node + 1)] + [(per_node, n) for n in range(2, most // per_node + 1)]
    for gpus, nodes in candidates:
        try:
            accumulation(settings, gpus * nodes)
        except ValueError:
            continue
        yield gpus, nodes


def pretrain_hours_error(config: dict, run: str, job: Estimate) -> str:
    """Why a pretraining run does not fit cluster.max_runtime, and the smallest launch that would
    (or what the largest one takes)."""
    cluster, threads = config["cluster"], run_settings(config, run)["threads"]
    device, limit, launch = job.device, cluster["max_runtime"], launch_settings(config, run)
    startup = config["throughput"][device]["startup_s"]
    on = {(g, n): cluster["safety"] * (startup + pretrain_seconds(config, run, device, threads, g * n))
          for g, n in launches(config, run)}
    fit = next((gn for gn, seconds in on.items() if seconds <= 60 * limit), None)
    largest = max(on, key=lambda gn: gn[0] * gn[1])
    where = (f"set launch.runs.{run}: {{gpus: {fit[0]}, nodes: {fit[1]}}} ({hours(on[fit])})" if fit else
             f"even the largest launch that divides its global batch, {{gpus: {largest[0]}, nodes: {largest[1]}}}, "
             f"takes {hours(on[largest])}")
    cost = f"{job.gpu_hours:,.0f} GPU-hours" if job.gpus else f"{job.cpu_hours:,.0f} CPU-hours"
    return (f"runs.{run}: pretraining is estimated at {cost}, {hours(job.seconds)} on "
            f"launch gpus {launch['gpus']} x nodes {launch['nodes']} (throughput.{device} x cluster.safety "
            f"{cluster['safety']}), beyond cluster.max_runtime {limit} min ({limit / 60:.3g} h); {where}; or raise "
            "cluster.max_runtime")
