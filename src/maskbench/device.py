"""The torch device a stage runs on, and the precision it computes in, from params.yaml's
`device`, `threads` and `precision` settings.

One precision policy for every stage that runs a model (pretraining, validation, fine-tuning,
probes, analyses, perplexity): on CUDA, matrix products in TF32 and the forward pass under
bfloat16 autocast; on the CPU, float32 with no autocast at all, so CPU results stay bit for bit
what they were, unless `precision: bf16` asks for CPU autocast (worth it only on CPUs with
AVX-512-BF16 or AMX). Losses stay float32 wherever the autocast is: the tasks and objectives
take their cross-entropy on `.float()` logits.
"""

from __future__ import annotations

import contextlib

import torch

from maskbench.config import computes_in_bf16

PRECISIONS = ("auto", "fp32", "bf16")  # auto: bf16 on CUDA, fp32 elsewhere


def peak_memory_gib(device: torch.device | str) -> float | None:
    """The most GPU memory this process's tensors held (torch's allocator, GiB): what the plan's
    estimate times `throughput.<gpu>.memory_over_estimate` should cover. None on a CPU, where
    torch keeps no such count."""
    device = torch.device(device)
    return round(torch.cuda.max_memory_allocated(device) / 2 ** 30, 2) if device.type == "cuda" else None


def pick_device(name: str) -> torch.device:
    """`auto`: a GPU when there is one; `cuda` without one is an error, not a silent CPU run."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda requested in params.yaml but no CUDA device is available")
    return torch.device(name)


def compute_device(name: str, threads: int) -> torch.device:
    """The stage's device, with the process set up for it: `threads` CPU threads, subnormal
    floats flushed to zero, and on CUDA TF32 matrix products (`use_tf32`).

    Without the flush a trained ExLM's steps ran three times slower on the CPU than its first
    ones (2.0 s against 0.64 s, text, batch 32): the DAG's gradients fill the backward matrix
    products with subnormals, which x86 CPUs compute in microcode. Numbers below ~1e-38
    (float32) are the only ones it changes."""
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)
    device = pick_device(name)
    if device.type == "cuda":
        use_tf32()
    return device


def use_tf32() -> None:
    """float32 matrix products and convolutions on tensor cores (10-bit mantissa inputs, float32
    accumulation): what autocast leaves in float32 runs several times faster on Ampere and
    later GPUs. CUDA only: the CPU has no TF32, and these flags do not touch it."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def autocast_dtype(device: torch.device | str, setting: str) -> torch.dtype | None:
    """The dtype the forward pass autocasts to under `setting` (PRECISIONS) on `device`; None:
    no autocast, float32."""
    if setting not in PRECISIONS:
        raise ValueError(f"precision: {setting!r} is not one of {PRECISIONS}")
    return torch.bfloat16 if computes_in_bf16(setting, torch.device(device).type == "cuda") else None


def precision(device: torch.device | str, setting: str):
    """The context a model's forward pass runs in on `device` (see the module docstring):
    `torch.autocast` to bfloat16, or nothing at all where the policy says float32."""
    dtype = autocast_dtype(device, setting)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
