"""Each GPU job on a multi-GPU machine gets GPUs of its own.

`snakemake --resources gpu=8` only counts: it starts jobs while their `gpu` resources add up to
at most 8, and says nothing about which GPU each may use (Snakemake has no GPU ids: its issue
#281). Left alone, every job would take `cuda:0`. So before a stage job touches CUDA, the CLI
claims as many GPUs as the job asks (the `gpu` resource Snakemake counted, per node) from those
visible (`CUDA_VISIBLE_DEVICES`, else `nvidia-smi`), one lock file per GPU in a directory of
this machine (`MASKBENCH_GPU_LOCKS`, default a per-user directory under the system's temp
directory), and narrows `CUDA_VISIBLE_DEVICES` to them; a `torchrun` it starts inherits them, one
per rank. The locks are held by the job's process and released when it exits, however it exits
(the operating system drops an `flock` with its process). A job that finds too few free GPUs
(a job outside Snakemake's count) takes none, waits and tries again, so two jobs never hold part
of each other's GPUs.

Under SLURM (`SLURM_JOB_ID` set) nothing is claimed: the allocation is already the job's own.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

LOCKS_ENV = "MASKBENCH_GPU_LOCKS"
_held: list[FileLock] = []  # this process's claims: held until it exits


def visible_gpus() -> list[str]:
    """The GPUs this process may use: `CUDA_VISIBLE_DEVICES` where set (indices or UUIDs), else
    every GPU `nvidia-smi` lists, else none. Read without initialising CUDA, which would fix the
    visible devices before they are narrowed."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [gpu.strip() for gpu in listed.split(",") if gpu.strip() and gpu.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else []


def lock_dir() -> Path:
    return Path(os.environ.get(LOCKS_ENV) or Path(tempfile.gettempdir()) / f"maskbench-gpus-{os.getuid()}")


def claim(count: int, gpus: list[str], directory: Path, poll_s: float = 1.0, say_every_s: float = 60.0) -> list[str]:
    """`count` of `gpus` that no other process holds, locked for this process (until it exits),
    waiting while fewer are free; ValueError when fewer than `count` are visible at all."""
    if count > len(gpus):
        raise ValueError(f"the job asks for {count} GPU(s); {len(gpus)} visible ({','.join(gpus) or 'none'}): "
                         "lower its launch gpus, or run it where more are")
    directory.mkdir(parents=True, exist_ok=True)
    waited_since = said = time.monotonic()
    while True:
        taken: list[tuple[str, FileLock]] = []
        for gpu in gpus:
            lock = FileLock(directory / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock", is_singleton=False)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            taken.append((gpu, lock))
            if len(taken) == count:
                _held.extend(lock for _, lock in taken)
                return [gpu for gpu, _ in taken]
        for _, lock in taken:  # too few free: hold none of them while waiting
            lock.release()
        if time.monotonic() - said >= say_every_s:
            said = time.monotonic()
            log.warning("waiting %.0f s for %d free GPU(s) of %s (locks in %s)", said - waited_since, count,
                        ",".join(gpus), directory)
        time.sleep(poll_s * random.uniform(0.5, 1.5))  # jittered: claimants started together do not collide again


def assign(count: int) -> list[str]:
    """Claim `count` GPUs for this job and narrow `CUDA_VISIBLE_DEVICES` to them (see the
    module docstring); nothing for a job without GPUs, under SLURM, or on a machine without any."""
    if count < 1 or os.environ.get("SLURM_JOB_ID"):
        return []
    gpus = visible_gpus()
    if not gpus:
        return []
    mine = claim(count, gpus, lock_dir())
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(mine)
    log.info("GPU(s) %s for this job (of %s)", ",".join(mine), ",".join(gpus))
    return mine
