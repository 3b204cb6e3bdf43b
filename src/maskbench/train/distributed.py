"""Data-parallel pretraining under torchrun, with the same entry point as a single process.

    maskbench pretrain --run mlm                                                          # one process
    python -m maskbench.train.distributed --nproc_per_node 4 -- pretrain --run mlm        # 4 GPUs (DDP)
    python -m maskbench.train.distributed --nproc_per_node 2 -- pretrain --run mlm        # CPU: gloo
    python -m maskbench.train.distributed --nnodes 2 --nproc_per_node 8 \
        --rdzv_backend c10d --rdzv_endpoint HOST:29500 -- pretrain --run mlm             # 2 machines

The launcher is torchrun (any torchrun option goes before `--`) running `maskbench.cli` with the
arguments after `--`; plain `torchrun -m maskbench.cli pretrain --run mlm` does not work because
torchrun's own parser reads `--run` as an abbreviation of its `--run-path`.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; without them this is a world of one and every
method is a no-op. Each rank draws its own blocks and masks (its seed is offset by its rank;
rank 0 keeps the run's seed, so a one-process run is unchanged), DDP averages the gradients,
and rank 0 alone writes logs, checkpoints, MLflow runs and the model.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

RANK_SEED_STRIDE = 100_003


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "World":
        return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                   int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def seed(self, seed: int) -> int:
        """This rank's seed: the run's seed on rank 0, distinct streams on the others."""
        return seed + RANK_SEED_STRIDE * self.rank

    def setup(self, device: torch.device) -> torch.device:
        """Join the process group (NCCL on GPUs, gloo on CPU); return this rank's device."""
        if self.size == 1:
            return device
        if device.type == "cuda":
            device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=self.rank, world_size=self.size)
        return device

    def wrap(self, module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        if self.size == 1:
            return module
        return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)

    def accumulating(self, model: torch.nn.Module, last_micro_step: bool):
        """Skip DDP's gradient all-reduce on all but the last micro-batch of an accumulated step."""
        if self.size == 1 or last_micro_step:
            return contextlib.nullcontext()
        return model.no_sync()

    def mean(self, value: float, device: torch.device) -> float:
        """The mean of a per-rank number over all ranks (for logging the loss)."""
        if self.size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return tensor.item() / self.size

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def shutdown(self) -> None:
        """Leave the process group together: the barrier drains every rank's pending work."""
        if self.size > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def launch(argv: list[str]) -> None:
    """torchrun with the options before `--`, running `maskbench.cli` with the arguments after."""
    from torch.distributed.run import get_args_parser, run

    if "--" not in argv:
        sys.exit("usage: python -m maskbench.train.distributed [torchrun options] -- STAGE [stage options]")
    split = argv.index("--")
    args = get_args_parser().parse_args([*argv[:split], "-m", "maskbench.cli"])
    args.training_script_args = argv[split + 1:]
    run(args)


if __name__ == "__main__":
    launch(sys.argv[1:])
