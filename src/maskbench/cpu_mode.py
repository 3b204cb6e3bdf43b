"""The reproducible CPU mode: the same command computes the same bits whatever paths the CPU has.

A float32 sum rounds differently when its terms are added in another order, and three libraries
pick that order from the CPU they find: ATen's vectorised kernels (its "CPU capability": AVX-512
on a CPU that has it, AVX2 otherwise), MKL's matrix products (its code branch, chosen per CPU
model and vendor) and oneDNN's primitives (its instruction set). Each choice is deterministic, so
a run repeats bit for bit on one machine, but another machine takes another path: a 200-step toy
training ended at 0.01756560243666172 on an AVX-512 Xeon and at 0.01756560429930687 with the AVX2
paths forced there, and over 1,500 steps such differences grew until MAE-LM's collapse went the
other way. Measured on this project's MLM (docs/reproducibility.md), all three change the
trained weights, and so does the number of threads, which params.yaml already fixes per job
(`threads`, set by `maskbench.device.compute_device`).

`cpu_arithmetic: reproducible` in params.yaml pins the three to paths every x86-64 CPU with AVX2
has (PINS): ATen's AVX2 kernels, MKL's COMPATIBLE branch (its AVX2 branch would not do: MKL
documents that on non-Intel CPUs it silently falls back to the CPU's own branch) and its AVX2
instructions (`MKL_ENABLE_INSTRUCTIONS`, which caps what any branch may use), oneDNN's AVX2;
and the OpenBLAS under numpy, scipy and scikit-learn (the probes' and baselines' linear models),
which picks its kernels per CPU too and splits its sums over as many threads as there are cores:
its Haswell (AVX2) kernels, one thread. Measured, two AMD EPYCs, with and without AVX-512, train
the same bits in the mode; an Intel Xeon trains others (docs/notes/2026-12-03-intel-xeon.md): the
mode is measured to repeat a build across AMD EPYCs, not across vendors. The libraries read these
variables once, when they start, so `apply` must run before torch or numpy is imported: the CLI
calls it first thing after reading params.yaml, and every process it starts (torchrun's ranks,
srun's tasks) inherits the environment. `native` leaves the libraries to
pick the fastest path of the CPU they run on, and the record says which of the variables the
environment set: the user's, and apart from them the thread count Snakemake gives every job. What
held in a process is recorded by `maskbench.provenance.arithmetic` in every metrics.json and table
footer.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from pathlib import Path

MODES = ("reproducible", "native")
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2", "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}
# Snakemake gives every job's shell these, all set to the job's `threads` (snakemake/shell.py):
# a thread count the workflow chose, which a footer must not report as the user's pin.
WORKFLOW_THREADS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
# What reads them when it is imported: too late for the pins once any of these is.
READERS = ("torch", "numpy", "scipy", "sklearn")
X86 = {"x86_64", "amd64", "x64"}

# What `apply` found and did in this process, for the provenance record.
_status = "not applied in this process (maskbench.cpu_mode.apply)"


class CpuModeError(RuntimeError):
    """The reproducible mode cannot hold on this machine."""


def apply(mode: str) -> str:
    """Put params.yaml's `cpu_arithmetic` `mode` into force in this process and its children;
    returns (and records for `status`) a line saying what holds."""
    global _status
    if mode not in MODES:
        raise CpuModeError(f"cpu_arithmetic: {mode!r} is not one of {MODES}")
    if mode == "native":
        workflow = workflow_threads()
        preset = ", ".join(f"{k}={os.environ[k]}" for k in PINS
                           if k in os.environ and not (workflow and k in WORKFLOW_THREADS))
        _status = "native: each library takes the fastest path of this CPU" + (
            f" but where the environment sets it ({preset})" if preset else "") + (
            f"; OpenBLAS on the job's `threads` (OPENBLAS_NUM_THREADS={workflow}, as Snakemake sets it for every job)"
            if workflow else "")
        return _status
    machine = platform.machine().lower()
    if machine not in X86:
        _status = f"reproducible mode not applicable on {machine} (x86-64 only): native paths"
        logging.warning("cpu_arithmetic: %s", _status)
        return _status
    if not has_avx2():
        raise CpuModeError("cpu_arithmetic: reproducible pins the AVX2 paths, and this CPU has no AVX2; set "
                           "`cpu_arithmetic: native` in params.yaml (its results then differ from AVX2 machines')")
    differing = {k: os.environ[k] for k, v in PINS.items() if os.environ.get(k, v) != v}
    if differing:
        logging.info("cpu_arithmetic: reproducible overrides %s", differing)
    if any(name in sys.modules for name in READERS) and not all(os.environ.get(k) == v for k, v in PINS.items()):
        # too late for this process; its environment is left as it was (a test's in-process
        # call must not pin the processes other tests start), and maskbench processes it
        # starts apply the mode themselves
        _status = ("reproducible mode NOT in force: torch or numpy was imported before it was applied, so this process "
                   "keeps the paths it started with")
        logging.warning("cpu_arithmetic: %s", _status)
        return _status
    os.environ.update(PINS)
    _status = "reproducible: " + ", ".join(f"{k}={v}" for k, v in PINS.items())
    return _status


def workflow_threads() -> str | None:
    """The thread count Snakemake set for this job (every WORKFLOW_THREADS variable, one value),
    or None where the environment does not look so (a command run by hand)."""
    values = {os.environ.get(name) for name in WORKFLOW_THREADS}
    return values.pop() if len(values) == 1 and None not in values else None


def status() -> str:
    """What `apply` put into force in this process (or that it was not called)."""
    return _status


def has_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU has AVX2, read from Linux's /proc/cpuinfo (without importing torch, which
    would fix its paths); where there is no such file (macOS) the CPU is taken to have it: every
    x86 Mac since 2013 does."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return True
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return "avx2" in flags
