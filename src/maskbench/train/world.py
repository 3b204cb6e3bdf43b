"""Which process of a run this one is, read from the launcher's environment: torchrun's RANK,
WORLD_SIZE and LOCAL_RANK, or, under `relaunch`'s srun (maskbench.train.distributed), SLURM's
task ids. Without torch, so that every stage's logging can ask (maskbench.cli) at no cost."""

from __future__ import annotations

import os

# Set by `relaunch` for the tasks it starts through srun, which then read their rank from SLURM.
SRUN_WORLD = "MASKBENCH_SRUN_WORLD"


def inside_world() -> bool:
    """Whether this process was started by a launcher (torchrun, or `relaunch`'s srun)."""
    return "RANK" in os.environ or bool(os.environ.get(SRUN_WORLD))


def position() -> tuple[int, int, int]:
    """(rank, world size, local rank) of this process; (0, 1, 0) outside a launcher."""
    if os.environ.get(SRUN_WORLD):
        return int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"]), int(os.environ["SLURM_LOCALID"])
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
