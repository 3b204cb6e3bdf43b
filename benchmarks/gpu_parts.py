"""The GPU suite's parts, each run in a process of its own by benchmarks/gpu_suite.py.

    python benchmarks/gpu_parts.py a --budget 60 --progress /tmp/a.json --scratch /tmp/suite [--dry]

A part measures one thing after another and rewrites its figures so far (`--progress`, atomic)
after each, so a part stopped at its budget still hands over what it measured; it also stops
starting new measurements when too little of `--budget` is left, and says which it left out.
`--dry` runs the same code on the CPU at tiny shapes, with a CPU stand-in for what needs CUDA
(the kernel's host twin for the kernel, the reference alignment for the CuPy backend, dynamo's
eager backend for inductor), so that a lent GPU's minutes go to measuring, not to debugging.

Parts (their order, budgets and what each settles: gpu_suite.py's PARTS):
  a  the states-alignment kernel(s) against the reference, forward and backward, at the paper's sizes
  f  the papers' steps at 32 x 512 under torch.compile(fullgraph=True)
  g  table1 of the `lease` profile built by Snakemake (benchmarks/lease_table.py run)
  h  the CLI's ExLM step under torch.profiler: its top kernels
  e  a `maskbench finetune` job's start-up and rate, then `maskbench probe`
  d  `maskbench pretrain` of MLM (windows) and ExLM (whole documents) through the CLI, with the CuPy kernel
  b  every objective's eager training step at base-text size: bf16 throughput, MFU, peak memory,
     and the bf16 losses against float32 over a few steps from the same start
  c  peak memory of the largest shapes the paper profile plans, at their micro-batch
The CLI parts (d, e, h) share one workspace in `--scratch`, made by whichever runs first, and run
each command through benchmarks/cli_timing.py, which stamps its optimizer steps.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib.util
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO)]  # benchmarks/ is not a package; tests/ holds the host twin
from bench_align import GPU_SIZES, make_inputs  # noqa: E402
from bench_ddp import synthetic_corpus, workspace  # noqa: E402
from bench_objectives import SPECIALS, build  # noqa: E402
from gpu_suite import LEASE_AROUND_S, OBJECTIVES, PAPER_OBJECTIVES  # noqa: E402
from maskbench.align import dag_loss, use_backend  # noqa: E402
from maskbench.config import declared_runs, read_yaml, resolve_profile, run_settings  # noqa: E402
from maskbench.device import precision, use_tf32  # noqa: E402
from maskbench.io import write_json  # noqa: E402

PYTHON = sys.executable
# The kernel's largest difference from the reference, relative to the largest value, that part a
# accepts: the tolerance of the kernel's tests (tests/test_align_kernel.py, rtol = atol = 1e-4).
ALIGN_TOLERANCE = 1e-4
TASK = "rotten_tomatoes"  # a classification task of params.yaml, whose rows part d's workspace generates
PRETRAIN_RUNS = ("mlm", "exlm")
DOCUMENT_BLOCKS = {"mlm": "windows", "exlm": "documents"}  # part d's blocks per run (maskbench.train.blocks)
# Dense bf16 tensor-core peak (TFLOP/s, without sparsity) of the devices the lease lends, from
# NVIDIA's data sheets, matched against torch.cuda.get_device_name(): what MFU divides by.
STEP_PROFILE = "gpu-day"  # what one lent GPU runs for a day (docs/gpu-day.md)
PEAK_BF16_TFLOPS = {"H100 80GB HBM3": 989, "H100 PCIe": 756, "H200": 989}

# What each part runs on the GPU and, with --dry, on the CPU.
SHAPES = {
    # parts b and f: the step of the profile a lent GPU runs (`STEP_PROFILE`: model, micro-batch, length, vocabulary)
    # parts d, e, h: pretraining at base-text, 100 steps; fine-tuning at params.yaml's batch and
    # length (32 rows of up to 128 tokens: rows of 120 words), 100 steps; the profile's steps
    "device": dict(timed="bf16", timed_steps=5, agreement_steps=3,
                   memory_steps=2, pretrain=dict(size="base-text", seq_len=128, micro_batch=32, vocab=8192,
                                                 words=400_000, steps=100, log_every=20, device="cuda", rows=3200,
                                                 row_words=120, finetune_batch=32, finetune_len=128,
                                                 profile="10,2,3"),
                   align_repeats=3),
    # dry: steps timed in float32, the CPU's policy (bf16 autocast on a CPU without bf16 units is slow)
    "dry": dict(size="tiny", batch=4, seq_len=32, vocab=600, timed="fp32", timed_steps=1, agreement_steps=1,
                memory_steps=1,
                memory_batch=2, memory_seq_len=32,
                pretrain=dict(size="tiny", seq_len=32, micro_batch=4, vocab=600, words=20_000, steps=5, log_every=1,
                              device="cpu", rows=64, row_words=12, finetune_batch=16, finetune_len=32, profile="2,1,2"),
                align_sizes={"tiny": (2, 5, 14), "small": (3, 8, 24)}, align_repeats=2),
}


class Progress:
    """A part's figures so far, rewritten atomically after each measurement, and its budget."""

    def __init__(self, path: Path, budget_s: float):
        self.path, self.figures = path, {}
        self.deadline = time.monotonic() + budget_s

    def add(self, key: str, value) -> None:
        self.figures[key] = value
        write_json(self.path, self.figures)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def enough(self, key: str, needs_s: float) -> bool:
        """Whether `needs_s` seconds are left for `key`; if not, record it as left out."""
        if self.left() >= needs_s:
            return True
        self.figures.setdefault("left_out_for_budget", []).append(key)
        write_json(self.path, self.figures)
        return False


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def max_error(a: torch.Tensor, b: torch.Tensor) -> dict:
    """Largest absolute difference and that difference over the largest magnitude of `b`."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    finite = torch.isfinite(b)
    diff = (a - b).abs()[finite].max().item() if finite.any() else 0.0
    scale = b.abs()[finite].max().item() if finite.any() else 1.0
    return {"max_abs": diff, "max_rel": diff / max(scale, 1e-30)}


# --- a: the kernel against the reference ---------------------------------------------------------

def alignment_outputs(run, log_emit, log_trans):
    """log Z and both gradients of one forward + backward through `run`."""
    e, t = log_emit.detach().clone().requires_grad_(True), log_trans.detach().clone().requires_grad_(True)
    log_z = run(e, t)
    (-log_z.sum()).backward()
    return log_z.detach(), e.grad, t.grad


def host_twin_loss():
    """The kernel's arithmetic compiled for the CPU (tests/align_support/host.py), as a loss
    with the reference's autograd: the dry run's stand-in for the CUDA kernel."""
    from tests.align_support import host

    class Twin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, log_emit, log_trans):
            alpha, log_z = host.forward(log_emit, log_trans)
            ctx.save_for_backward(log_emit, log_trans, alpha, log_z)
            return log_z.to(log_emit.dtype)

        @staticmethod
        def backward(ctx, grad_z):
            log_emit, log_trans, alpha, log_z = ctx.saved_tensors
            B, M, L = log_emit.shape
            m, n = torch.full((B,), M, dtype=torch.int32), torch.full((B,), L, dtype=torch.int32)
            _, grad_emit, grad_trans = host.backward(log_emit, log_trans, m, n, alpha, log_z, grad_z)
            return grad_emit, grad_trans

    return Twin.apply


def kernel_backends() -> list[str]:
    """The alignment backends maskbench.align declares that run a kernel (all but `auto`, which
    chooses, and the reference): each is timed against the reference, a new one without an edit here."""
    from maskbench.align import BACKENDS
    return [b for b in BACKENDS if b not in ("auto", "reference")]


def timed_alignment(run, inputs, device, repeats: int) -> dict:
    """Median and every seconds of forward + backward through `run`, and its peak memory on CUDA."""
    times = []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device == "cuda" else 0
    for _ in range(repeats):
        synchronize(device)
        tick = time.perf_counter()
        alignment_outputs(run, *inputs)
        synchronize(device)
        times.append(time.perf_counter() - tick)
    figures = {"seconds_median": statistics.median(times), "seconds_all": times}
    if device == "cuda":
        figures["peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2 ** 20
    return figures


def part_a(progress: Progress, dry: bool, shapes: dict) -> None:
    """Every kernel backend against the reference at each size: errors, times, speed-up; the
    `cuda` backend under the size's name, any other as "<size> [<backend>]". A dry run has the
    host twin for `cuda` and no stand-in for the others (listed as not timed)."""
    if dry:
        sizes, device = shapes["align_sizes"], "cpu"
        kernels = {"cuda": host_twin_loss()}
        progress.add("kernel", "host twin of the kernel (tests/align_support/host.py)")
        progress.add("backends_not_timed", {b: "no CPU stand-in" for b in kernel_backends() if b != "cuda"})
    else:
        sizes, device = GPU_SIZES, "cuda"
        kernels = {b: functools.partial(dag_loss, backend=b) for b in kernel_backends()}
        progress.add("kernel", f"CUDA kernel (CuPy), backends {', '.join(kernels)}")
    reference = functools.partial(dag_loss, backend="reference")
    for name, (B, M, L) in sizes.items():
        if not progress.enough(name, (5 if dry else 15) * len(kernels)):
            continue
        inputs = make_inputs(B, M, L, device=device)
        want = alignment_outputs(reference, *inputs)
        timed_reference = timed_alignment(reference, inputs, device, shapes["align_repeats"])
        for backend, kernel in kernels.items():
            entry = {"B_M_L": [B, M, L], "backend": backend}
            got = alignment_outputs(kernel, *inputs)
            entry["error"] = {part: max_error(g, w) for part, g, w in zip(("log_z", "grad_emit", "grad_trans"), got,
                                                                        want)}
            entry["within_tolerance"] = all(e["max_rel"] <= ALIGN_TOLERANCE for e in entry["error"].values())
            entry["kernel"] = timed_alignment(kernel, inputs, device, shapes["align_repeats"])
            entry["reference"] = timed_reference
            entry["speedup"] = entry["reference"]["seconds_median"] / entry["kernel"]["seconds_median"]
            key = name if backend == "cuda" else f"{name} [{backend}]"
            progress.add(key, entry)
            print(key, json.dumps(entry), flush=True)
    wrong = [name for name, e in progress.figures.items() if isinstance(e, dict) and e.get("within_tolerance") is False]
    if wrong:
        raise SystemExit(f"the kernel differs from the reference by more than {ALIGN_TOLERANCE} (relative) at "
                         f"{', '.join(wrong)}")
    time_phases(progress, dry, shapes, reserve_s=0 if dry else 25)   # pytest -m gpu keeps its 20 s
    # The GPU tests (kernel against reference on edge cases: impossible alignments, lengths,
    # best paths); on a CPU they are collected and skip.
    if progress.enough("pytest_gpu", 20):
        command = [PYTHON, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/test_align_kernel.py"]
        done = run_command(command, REPO, max(10.0, progress.left() - 5), {})
        last = done["output"].strip().splitlines()[-1] if done["output"].strip() else ""
        counts = {word: int(n) for n, word in
                  re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", last)}
        progress.add("pytest_gpu", {"command": shlex.join(command), "exit_status": done["exit_status"],
                                    "counts": counts, "last_line": last})
        if done["exit_status"] is None:
            raise SystemExit(f"pytest -m gpu did not finish within the part's budget: {last}")
        if done["exit_status"] not in (0, 5) or counts.get("failed") or counts.get("error") or counts.get("errors"):
            raise SystemExit(f"pytest -m gpu failed: {last}")


# The kernel of 2026-11-28 (one thread per node, float64) is not kept: its record has forward +
# backward at the paper's two B = 64 shapes, which part a's phases compare with.
OLD_KERNEL_MS = {"64x77x308": 14.7, "64x198x1586": 459.9,
                 "record": "benchmarks/results/gpu/2026-11-28-nvidia-h200/part-a.json"}


def phase_shapes(dry: bool, shapes: dict) -> list[tuple[int, int, int]]:
    """(B, M, L) of part a's phase timings, in the order of their value: B = 64 at the paper's
    two shapes, the rest of L = 308 ... 1586 at B = 64, then B = 32 and 16."""
    if dry:
        return list(shapes["align_sizes"].values())
    paper = ((77, 308), (198, 1586))
    by_l = sorted({(M, L) for _, M, L in GPU_SIZES.values()}, key=lambda ml: (ml not in paper, ml[1]))
    return [(B, M, L) for B in (64, 32, 16) for M, L in by_l]


def median_seconds(run, device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        synchronize(device)
        tick = time.perf_counter()
        run()
        synchronize(device)
        times.append(time.perf_counter() - tick)
    return statistics.median(times)


def time_phases(progress: Progress, dry: bool, shapes: dict, reserve_s: float) -> None:
    """The kernel's forward, backward recursion and transition gradient timed apart (ms), and the
    reference's forward and backward, at each phase_shapes size while the budget lasts; the
    backward recursion is the kernel's backward less its transition gradient, timed alone. A dry
    run times the host twin on the CPU."""
    from maskbench.align import cuda, reference

    device = "cpu" if dry else "cuda"
    phases = {"old_kernel_fwd_bwd_ms": OLD_KERNEL_MS}
    for B, M, L in phase_shapes(dry, shapes):
        key = f"{B}x{M}x{L}"
        if not progress.enough(f"phases {key}", reserve_s + (2 if dry else 8)):
            continue
        log_emit, log_trans = make_inputs(B, M, L, device=device)
        m, n = torch.full((B,), M, device=device), torch.full((B,), L, device=device)
        emit, trans, mi, ni = cuda._prepare(log_emit, log_trans, m, n)
        grad_z = torch.ones(B, device=device)
        if dry:
            from tests.align_support import host
            forward = lambda: host.forward(emit, trans, mi, ni)                                         # noqa: E731
            alpha, log_z = forward()
            backward = lambda: host.backward(emit, trans, mi, ni, alpha, log_z, grad_z)                 # noqa: E731
        else:
            forward = lambda: cuda.forward(emit, trans, mi, ni)                                         # noqa: E731
            alpha, log_z = forward()
            backward = lambda: cuda.backward(emit, trans, mi, ni, alpha, log_z, grad_z)                 # noqa: E731
        w = backward()[0]
        repeats = shapes["align_repeats"]
        ms = lambda run: round(median_seconds(run, device, repeats) * 1e3, 3)                          # noqa: E731
        entry = {"kernel_forward": ms(forward), "kernel_backward": ms(backward),
                 "transition_gradient": ms(lambda: cuda.transition_gradient(trans, mi, ni, alpha, w, log_z))}
        entry["kernel_backward_recursion"] = round(entry["kernel_backward"] - entry["transition_gradient"], 3)
        ref_alpha, ref_log_z = reference.forward_tables(log_emit, log_trans, m, n)
        entry["reference_forward"] = ms(lambda: reference.forward_tables(log_emit, log_trans, m, n))
        entry["reference_backward"] = ms(lambda: reference.backward_gradients(log_emit, log_trans, m, n, ref_alpha,
                                                                              ref_log_z, grad_z))
        entry["speedup"] = round((entry["reference_forward"] + entry["reference_backward"])
                                 / (entry["kernel_forward"] + entry["kernel_backward"]), 2)
        phases[key] = entry
        progress.add("phases_ms", phases)
        print("phases", key, json.dumps(entry), flush=True)


# --- b and f: every objective's training step -----------------------------------------------------

def device_peak_tflops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)


def step_batch(shapes: dict, device) -> torch.Tensor:
    tokens = torch.randint(4, shapes["vocab"], (shapes["batch"], shapes["seq_len"]),
                           generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, -1] = SPECIALS.cls, SPECIALS.sep
    return tokens.to(device)


def train_losses(model, tokens, steps: int, setting: str, device, timed: bool = False) -> dict:
    """`steps` AdamW steps of `model` under the precision `setting` (maskbench.device) with the
    same masks and dropout at step i for every setting; their losses, and with `timed` each
    step's seconds."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    losses, seconds = [], []
    for step in range(steps):
        torch.manual_seed(step)  # dropout
        draws = model.draw(tokens, torch.Generator(device).manual_seed(step))
        synchronize(device)
        tick = time.perf_counter()
        with precision(device, setting):
            loss = model(tokens, draws).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        seconds.append(time.perf_counter() - tick)
        losses.append(loss.item())
    return {"losses": losses, **({"seconds": seconds} if timed else {})}


def step_flops(model, tokens, device, setting: str) -> int:
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        train_losses(model, tokens, 1, setting, device)
    return counter.get_total_flops()


@contextlib.contextmanager
def strict_float32():
    """float32 matrix products without TF32: the reference the bf16 losses are compared with."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def step_shapes(dry: bool, shapes: dict, profile: str = STEP_PROFILE) -> dict:
    """`shapes` with the step parts b and f time: on a GPU the pretraining step of params.yaml's
    `profile` (its model, micro-batch, block length and text vocabulary): part b STEP_PROFILE's,
    which its plan prices at the rates measured, part f the papers'; in a dry run the tiny ones."""
    if dry:
        return shapes
    config = resolve_profile(read_yaml(REPO / "params.yaml"), profile)
    pretrain = config["pretrain"]
    return {**shapes, "profile": profile, "size": pretrain["model"], "batch": pretrain["micro_batch_size"],
            "seq_len": pretrain["seq_len"], "vocab": config["tokenizer"]["text"]["vocab_size"]}


def step_setup(dry: bool, shapes: dict):
    device = torch.device("cpu" if dry else "cuda")
    params = read_yaml(REPO / "params.yaml")
    size = params["model_sizes"][shapes["size"]]
    use_backend("reference" if dry else "cuda")  # ExLM's DP: the kernel on a GPU, never a silent fallback
    if device.type == "cuda":
        use_tf32()
    return device, size, params["pretrain"]["positions"], step_batch(shapes, device)


def throughput(seconds, flops, shapes, peak, device) -> dict:
    step_s = statistics.median(seconds)
    tflops = flops / step_s / 1e12
    return {"step_ms": round(step_s * 1e3, 2), "tokens_per_s": round(shapes["batch"] * shapes["seq_len"] / step_s),
            "tflop_per_s": round(tflops, 3), "gflop_per_step": round(flops / 1e9, 2),
            "mfu": round(tflops / peak, 4) if peak else None,
            "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2) if device.type == "cuda" else None}


def part_b(progress: Progress, dry: bool, shapes: dict) -> None:
    shapes = step_shapes(dry, shapes)
    device, size, positions, tokens = step_setup(dry, shapes)
    peak = device_peak_tflops(device)
    progress.add("settings", {k: shapes.get(k) for k in ("profile", "size", "batch", "seq_len", "vocab", "timed",
                                                         "timed_steps", "agreement_steps")} | {"peak_bf16_tflops": peak,
                                                                           "compiled": False})
    for name in OBJECTIVES:
        if not progress.enough(name, 3 if dry else 10):
            continue
        model = build(name, size, shapes["vocab"], shapes["seq_len"], positions, device)
        start = copy.deepcopy(model)  # every precision trains from the same weights
        fresh = lambda: copy.deepcopy(start)
        flops = step_flops(model, tokens, device, shapes["timed"])  # also the warm-up
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        timed = train_losses(model, tokens, shapes["timed_steps"], shapes["timed"], device, timed=True)
        entry = throughput(timed["seconds"], flops, shapes, peak, device)
        entry["encoder_input_length"] = model.encoder_input_length
        del model
        steps = shapes["agreement_steps"]
        bf16 = train_losses(fresh(), tokens, steps, "bf16", device)["losses"]
        with strict_float32():
            fp32 = train_losses(fresh(), tokens, steps, "fp32", device)["losses"]
        entry["agreement"] = {"bf16": bf16, "fp32": fp32,
                              "max_rel_diff": max(abs(b - f) / abs(f) for b, f in zip(bf16, fp32))}
        if not all(np.isfinite(bf16 + fp32)):
            raise SystemExit(f"{name}: a loss is not finite (bf16 {bf16}, fp32 {fp32})")
        progress.add(name, entry)
        print(name, json.dumps(entry), flush=True)


def part_f(progress: Progress, dry: bool, shapes: dict) -> None:
    shapes = step_shapes(dry, shapes, "paper")                  # the papers' 32 x 512 at base-text
    device, size, positions, tokens = step_setup(dry, shapes)
    peak = device_peak_tflops(device)
    backend = "eager" if dry else "inductor"  # dry: dynamo's graph capture (fullgraph) without code generation
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)  # one graph per objective
    progress.add("settings", {k: shapes.get(k) for k in ("profile", "size", "batch", "seq_len", "vocab", "timed",
                                                         "timed_steps")}
                 | {"peak_bf16_tflops": peak, "compiled": True, "compile_backend": backend})
    for name in PAPER_OBJECTIVES:
        if not progress.enough(name, 10 if dry else 45):  # a compilation takes tens of seconds
            continue
        model = build(name, size, shapes["vocab"], shapes["seq_len"], positions, device)
        flops = step_flops(model, tokens, device, shapes["timed"])
        compiled = torch.compile(model, fullgraph=True, backend=backend)
        tick = time.perf_counter()
        train_losses(compiled, tokens, 1, shapes["timed"], device)  # compiles
        compile_s = time.perf_counter() - tick
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        timed = train_losses(compiled, tokens, shapes["timed_steps"], shapes["timed"], device, timed=True)
        entry = throughput(timed["seconds"], flops, shapes, peak, device) | {"compile_s": round(compile_s, 1)}
        progress.add(name, entry)
        print(name, json.dumps(entry), flush=True)


# --- c: peak memory of the largest planned shapes ---------------------------------------------------

def largest_planned(config: dict) -> list[tuple[str, float]]:
    """The pretraining runs of the paper profile whose estimated GPU memory
    (maskbench.resources, through the stage table) is the largest overall and the largest
    with ExLM at k = 4, with those estimates (GiB)."""
    from maskbench.stages import STAGES

    estimates = {run: STAGES["pretrain"].estimate(config, {"run": run}).gpu_mem_gb for run in declared_runs(config)
                 if STAGES["pretrain"].gpu(config, {"run": run})}
    exlm_k4 = [r for r in estimates if config["runs"][r]["objective"] == "exlm"
               and config["runs"][r].get("knobs", {}).get("k", 2) == 4]
    chosen = [max(estimates, key=estimates.get), max(exlm_k4, key=estimates.get)]
    return [(run, estimates[run]) for run in dict.fromkeys(chosen)]


def planned_model(config: dict, run: str, device, seq_len: int, dry: bool):
    """The run's objective as `maskbench pretrain` builds it (its size, knobs, position scheme,
    dropout) at the profile's vocabulary, on `device`; in a dry run at the tiny size and vocabulary."""
    from maskbench.model.encoder import Encoder, EncoderConfig
    from maskbench.objectives.registry import build_objective, encoder_settings
    from maskbench.resources import vocab_size

    spec, settings = config["runs"][run], run_settings(config, run)
    vocab = SHAPES["dry"]["vocab"] if dry else vocab_size(config, spec["modality"])
    size = config["model_sizes"]["tiny" if dry else settings["model"]]
    encoder = Encoder(EncoderConfig(vocab_size=vocab, dropout=settings["dropout"], pad_token_id=SPECIALS.pad,
                                    **size, rope_base=settings["rope_base"],
                                    **encoder_settings(spec, seq_len, settings["positions"])))
    return build_objective(spec, encoder, SPECIALS).to(device), vocab, settings


def part_c(progress: Progress, dry: bool, shapes: dict) -> None:
    from maskbench.train.optim import build_optimizer

    config = resolve_profile(read_yaml(REPO / "params.yaml"), "paper")
    device = torch.device("cpu" if dry else "cuda")
    use_backend("reference" if dry else "cuda")
    total = torch.cuda.get_device_properties(device).total_memory / 2 ** 30 if not dry else None
    progress.add("device_memory_gib", total)
    for run, estimate in largest_planned(config):
        settings = run_settings(config, run)
        compiled = settings.get("compile", False)  # as `maskbench pretrain` trains it (the plan's factor follows)
        if not progress.enough(run, 5 if dry else (55 if compiled else 15)):  # a compilation takes 40-70 s
            continue
        batch, seq_len = ((shapes["memory_batch"], shapes["memory_seq_len"]) if dry
                          else (settings["micro_batch_size"], settings["seq_len"]))
        entry = {"estimate_gib": round(estimate, 2), "micro_batch": batch, "seq_len": seq_len,
                 "planned": {"micro_batch": settings["micro_batch_size"], "seq_len": settings["seq_len"],
                             "model": settings["model"], "precision": settings["precision"], "compile": compiled}}
        if dry:  # the real model and knobs at a tiny batch and length: the code path, not the memory
            entry["note"] = ("dry: the run's objective and knobs at the tiny size, vocabulary, micro-batch and length "
                             "on the CPU; memory not measured")
        try:
            model, vocab, _ = planned_model(config, run, device, seq_len, dry)
            optimizer = build_optimizer(model, settings["lr"], settings["weight_decay"], settings["betas"],
                                        settings["eps"])
            tokens = torch.randint(4, vocab, (batch, seq_len), generator=torch.Generator().manual_seed(0)).to(device)
            tokens[:, 0], tokens[:, -1] = SPECIALS.cls, SPECIALS.sep
            # dry: dynamo's graph capture without code generation (as part f)
            stepped = torch.compile(model, backend="eager" if dry else "inductor") if compiled else model
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            for step in range(shapes["memory_steps"]):
                with precision(device, settings["precision"]):
                    loss = stepped(tokens, model.draw(tokens, torch.Generator(device).manual_seed(step))).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            synchronize(device)
            entry["fits" if device.type == "cuda" else "stepped"] = True  # a CPU says nothing of a GPU's memory
            entry["loss"] = loss.item()
            if device.type == "cuda":
                entry["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
                entry["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / 2 ** 30, 2)
                entry["measured_over_estimate"] = round(entry["peak_allocated_gib"] / estimate, 3)
        except torch.OutOfMemoryError as exc:  # a finding, not a failure of the part
            entry["fits"] = False
            entry["out_of_memory"] = str(exc).splitlines()[0][:300]
        finally:
            model = stepped = optimizer = loss = tokens = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
        progress.add(run, entry)
        print(run, json.dumps(entry), flush=True)


# --- d and e: the workflow's own commands -----------------------------------------------------------

def run_command(command: list[str], cwd: Path, timeout: float, env: dict) -> dict:
    """Run `command`; its exit status (None: stopped at `timeout`), seconds and output."""
    tick = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=timeout)
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status = None
        output = "".join(o.decode(errors="replace") if isinstance(o, bytes) else (o or "")
                         for o in (exc.stdout, exc.stderr))
    sys.stdout.write(output[-4000:])
    return {"exit_status": status, "seconds": round(time.perf_counter() - tick, 1), "output": output}


def generated_task(root: Path, rows: int, words: int = 12, seed: int = 0) -> None:
    """A two-class task of rows of `words` words of the synthetic corpus, as the task stage leaves
    it (the layout of tests/helpers.py `task_files`): the label is whether a word w0..w9 occurs,
    so it is learnable."""
    rng = np.random.default_rng(seed)

    def row(i):
        chosen = [f"w{w}" for w in rng.integers(10, 500, words)]
        if i % 2:
            chosen[rng.integers(words)] = f"w{rng.integers(10)}"
        words_of_row = chosen
        return {"text": " ".join(words_of_row), "text_pair": None, "label": i % 2}
    task = root / "data/tasks" / TASK
    task.mkdir(parents=True)
    for split, n in (("train", rows), ("dev", rows // 4), ("test", rows // 4)):
        (task / f"{split}.jsonl").write_text("".join(json.dumps(row(i)) + "\n" for i in range(n)))
    cards = root / "data/cards"
    (cards / f"task-{TASK}.json").write_text(json.dumps({"kind": "classification", "label_names": ["no", "yes"],
                                                         "rows": {"train": rows, "dev": rows // 4,
                                                                  "test": rows // 4}}))
    (cards / f"download-{TASK}.json").write_text(json.dumps({"source": {"files": {"generated": "0" * 64}}}))


def prepare_workspace(scratch: Path, plan: dict, dry: bool) -> Path:
    """bench_ddp's workspace on its synthetic corpus (tiny profile, the plan's size and steps),
    with the alignment backend of the part (the kernel on a GPU, the reference in a dry run)
    and a short fine-tuning of a generated task."""
    corpus = scratch / "corpus"
    synthetic_corpus(corpus, plan["vocab"], words=plan["words"])
    settings = SimpleNamespace(runs=PRETRAIN_RUNS, threads=1, **{k: plan[k] for k in (
        "size", "seq_len", "micro_batch", "steps", "log_every", "device")})
    root = workspace(scratch / "workspace", corpus, settings, processes=1)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["pretrain"]["warmup_steps"] = min(10, plan["steps"] - 1)
    params["align"]["backend"] = "reference" if dry else "cuda"
    # ExLM on whole documents (the paper profile's blocks): a block length that varies from step to
    # step through the kernel; MLM on windows, every other profile's
    for run, blocks in DOCUMENT_BLOCKS.items():
        params["runs"][run].setdefault("overrides", {})["blocks"] = blocks
    params["tasks"][TASK]["overrides"] = {"epochs": 1, "max_train_examples": None}
    params["finetune"]["settings"].update(device=plan["device"], batch_size=plan["finetune_batch"],
                                          max_len=plan["finetune_len"])
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    generated_task(root, rows=plan["rows"], words=plan["row_words"])
    return root


def shared_workspace(progress: Progress, scratch: Path, plan: dict, dry: bool) -> Path:
    """The CLI parts' workspace in `scratch`, made (and described in the figures) by the first
    part that needs it."""
    root = scratch / "workspace"
    if root.is_dir():
        return root
    tick = time.perf_counter()
    root = prepare_workspace(scratch, plan, dry)
    progress.add("workspace", {"size": plan["size"], "seq_len": plan["seq_len"], "micro_batch": plan["micro_batch"],
                               "steps": plan["steps"], "vocab": plan["vocab"], "blocks": DOCUMENT_BLOCKS,
                               "align_backend_asked": "reference" if dry else "cuda",
                               "finetune": {"rows": plan["rows"], "row_words": plan["row_words"],
                                            "batch": plan["finetune_batch"], "max_len": plan["finetune_len"]},
                               "tracking": tracking_env(root).get("MASKBENCH_TRACKING", "mlflow"),
                               "seconds": round(time.perf_counter() - tick, 1)})
    return root


def tracking_env(root: Path) -> dict:
    """MLflow's store for the workspace, or tracking off where MLflow is not installed (the
    lent machine: gpu_suite.py records it)."""
    if importlib.util.find_spec("mlflow") is None:
        return {"MASKBENCH_TRACKING": "off"}
    return {"MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}


def step_figures(started: float, seconds: float, stamps: list[float]) -> dict:
    """A job's start-up (its process's start to its first optimizer step), its steps and their
    rate after the first, and the time after its last step (evaluation, writing), from the
    wall-clock stamps of cli_timing.py."""
    if not stamps:
        return {"steps": 0}
    figures = {"startup_s": round(stamps[0] - started, 2), "steps": len(stamps),
               "after_last_step_s": round(started + seconds - stamps[-1], 2)}
    if len(stamps) > 1:
        figures["steps_per_s"] = round((len(stamps) - 1) / (stamps[-1] - stamps[0]), 3)
    return figures


def timing_file(root: Path, key: str) -> Path:
    return root / f"cli-timing-{key.replace('/', '-')}.json"


def cli_stage(progress: Progress, key: str, root: Path, args: list[str], figures_file: Path, keys,
              profile: str | None = None) -> None:
    """Run `maskbench ARGS` in `root` through cli_timing.py (its record: timing_file); record its
    exit status, seconds, start-up and step rate and `keys` of its metrics file."""
    stamps_file = timing_file(root, key)
    command = [PYTHON, str(REPO / "benchmarks/cli_timing.py"), "--record", str(stamps_file),
               *(["--profile", profile] if profile else []), "--", *args]
    started = time.time()
    done = run_command(command, root, max(5.0, progress.left() - 3), tracking_env(root))
    timing = json.loads(stamps_file.read_text()) if stamps_file.exists() else {}
    entry = {"command": shlex.join(["maskbench", *args]), "exit_status": done["exit_status"],
             "seconds": done["seconds"], **step_figures(started, done["seconds"], timing.get("step_times", []))}
    if done["exit_status"] != 0:
        entry["output_tail"] = done["output"][-2500:]
        progress.add(key, entry)
        raise SystemExit(f"{key}: " + ("timed out" if done["exit_status"] is None else
                                       f"exit status {done['exit_status']}"))
    metrics = json.loads(figures_file.read_text())
    progress.add(key, entry | {k: metrics.get(k) for k in keys})


def part_d(progress: Progress, dry: bool, shapes: dict, scratch: Path) -> None:
    root = shared_workspace(progress, scratch, shapes["pretrain"], dry)
    for run in PRETRAIN_RUNS:  # afresh: part h may have trained ExLM in this workspace before
        cli_stage(progress, f"pretrain/{run}", root, ["pretrain", "--run", run, "--fresh"],
                  root / f"runs/pretrain/{run}/metrics.json",
                  ("steps", "tokens_per_s", "train_loss", "valid_loss", "unigram_loss", "align_backend",
                   "peak_gpu_memory_gib"))


def finetune_flops(root: Path, run: str, row_tokens: int) -> float:
    """The FLOPs `maskbench plan` counts for fine-tuning `run` on TASK with one seed in the
    workspace (maskbench.resources.finetune_cost: every epoch's training rows and the scored
    rows' forward passes), with the generated rows' `row_tokens` as the dataset's mean length:
    what a measured rate in the plan's terms divides."""
    from maskbench.resources import finetune_cost

    config = resolve_profile(read_yaml(root / "params.yaml"), "tiny")
    config["resources"]["tokens"][config["tasks"][TASK]["dataset"]] = row_tokens
    with contextlib.chdir(root):  # the task's card (its rows), by its relative path
        return finetune_cost(config, run, TASK, "h200")[0]


def part_e(progress: Progress, dry: bool, shapes: dict, scratch: Path) -> None:
    plan = shapes["pretrain"]
    root = shared_workspace(progress, scratch, plan, dry)
    # part d's pretrained MLM where it ran; else the `none` control (its encoder at its seeded
    # init, which its pretrain job writes): the same shapes, so the same fine-tuning job
    run = "mlm" if (root / "runs/pretrain/mlm/model").is_dir() else "none"
    if run == "none":
        cli_stage(progress, "pretrain/none", root, ["pretrain", "--run", "none"],
                  root / "runs/pretrain/none/metrics.json", ("steps", "parameters"))
    cli_stage(progress, "finetune", root, ["finetune", "--run", run, "--task", TASK, "--seed", "1"],
              root / f"runs/finetune/{run}/{TASK}/seed1/metrics.json", ("metric", "dev", "test", "peak_gpu_memory_gib"))
    entry = progress.figures["finetune"]
    work_s = entry["seconds"] - entry.get("startup_s", 0.0)
    flops = finetune_flops(root, run, plan["row_words"] + 2)  # a synthetic word is one token; [CLS], [SEP]
    progress.add("finetune_rate", {
        "run": run, "rows_per_s": round(entry["steps_per_s"] * plan["finetune_batch"], 1)
        if "steps_per_s" in entry else None,
        "plan_gflop": round(flops / 1e9, 1), "seconds_after_startup": round(work_s, 2),
        "tflop_per_s_plan_count": round(flops / work_s / 1e12, 4) if work_s > 0 else None,
        "note": "the plan's FLOPs of the job over its seconds after start-up: what throughput.<gpu>.bf16 prices"})
    if progress.enough("probe", 10 if dry else 25):
        cli_stage(progress, "probe", root, ["probe", "--run", run, "--task", TASK],
                  root / f"runs/probe/{run}/{TASK}/metrics.json", ("metric", "best_layer", "dev", "value"))


def part_h(progress: Progress, dry: bool, shapes: dict, scratch: Path) -> None:
    """The CLI's ExLM pretraining with a few steps profiled (cli_timing.py --profile): the top
    operators and kernels by device time, to explain its time per token against MLM's."""
    plan = shapes["pretrain"]
    root = shared_workspace(progress, scratch, plan, dry)
    try:
        cli_stage(progress, "pretrain/exlm", root, ["pretrain", "--run", "exlm", "--fresh"],
                  root / "runs/pretrain/exlm/metrics.json",
                  ("steps", "tokens_per_s", "align_backend", "peak_gpu_memory_gib"), profile=plan["profile"])
    finally:  # the profile as soon as its window closed, also where the job did not end in time
        stamps_file = timing_file(root, "pretrain/exlm")
        timing = json.loads(stamps_file.read_text()) if stamps_file.exists() else {}
        progress.add("profile", timing.get("profile", "not recorded: cli_timing wrote no record"))
    if not isinstance(progress.figures["profile"], dict):
        raise SystemExit(f"no profile: {progress.figures['profile']}")


def part_g(progress: Progress, dry: bool, shapes: dict, scratch: Path, wheels: Path | None, commit: str) -> None:
    """Table1 of the lease profile built by Snakemake from the carried .lease folder
    (lease_table.run): its record (card, job times, exit status) as the figures, the table in
    `scratch` for the suite to return."""
    import lease_table

    folder = REPO / ".lease"
    if not (folder / lease_table.TARGETS).is_file():
        raise SystemExit(f"{folder / lease_table.TARGETS} is missing: prepare the folder here with `python "
                         "benchmarks/lease_table.py prepare .lease` and carry .lease")
    out = scratch / "lease-out"
    status = lease_table.run(folder, dry, wheels or REPO / ".whl", out, commit,
                             budget_s=progress.left() - LEASE_AROUND_S)
    progress.figures.update(json.loads((out / "lease-table.json").read_text()))
    progress.add("exit_status", status)
    if (out / "lease-table.md").exists():
        (scratch / "lease-table.md").write_text((out / "lease-table.md").read_text())
    if status:
        raise SystemExit(f"the lease table's build exited with {status}")


PARTS = {"a": part_a, "b": part_b, "c": part_c, "d": part_d, "e": part_e, "f": part_f, "g": part_g, "h": part_h}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=sorted(PARTS))
    parser.add_argument("--budget", type=float, required=True, help="seconds this part may take")
    parser.add_argument("--progress", type=Path, required=True, help="JSON of the figures so far (rewritten)")
    parser.add_argument("--scratch", type=Path, required=True, help="a folder the parts share (d's workspace)")
    parser.add_argument("--dry", action="store_true", help="on the CPU, tiny, with CPU stand-ins")
    parser.add_argument("--wheels", type=Path, help="the carried wheels (part g installs them for its build)")
    parser.add_argument("--commit", default="unknown", help="the tree's commit, for part g's record")
    args = parser.parse_args()
    # Stopped at its budget (SIGTERM), a part ends through SystemExit, so a command it runs is
    # killed with it (subprocess.run kills its child on any exception).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not args.dry and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run with --dry on a CPU")
    torch.set_num_threads(1 if args.dry else min(8, os.cpu_count() or 1))
    progress = Progress(args.progress, args.budget)
    shapes = SHAPES["dry" if args.dry else "device"]
    part = PARTS[args.part]
    if args.part == "g":
        part(progress, args.dry, shapes, args.scratch, args.wheels, args.commit)
    elif args.part in "deh":
        part(progress, args.dry, shapes, args.scratch)
    else:
        part(progress, args.dry, shapes)


if __name__ == "__main__":
    main()
