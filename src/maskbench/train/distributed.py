"""Data-parallel pretraining: the processes of one run, how they start, and what they share.

    maskbench pretrain --run mlm      # launch.gpus x launch.nodes processes (params.yaml), started here

`maskbench pretrain` reads how many processes a run trains with from params.yaml's `launch`
(`maskbench.config.launch_settings`) and, outside a world, starts them itself
(`relaunch`): on one node through torchrun (standalone rendezvous), on several through `srun`
inside the SLURM allocation the workflow's SLURM profile asked for (one task per GPU; the first
node is the rendezvous host). Every process then runs the same `maskbench pretrain` command.
By hand, the same launcher takes any torchrun option:

    python -m maskbench.train.distributed --nproc_per_node 4 -- pretrain --run mlm        # 4 GPUs (DDP)
    python -m maskbench.train.distributed --nnodes 2 --nproc_per_node 8 \\
        --rdzv_backend c10d --rdzv_endpoint HOST:29500 -- pretrain --run mlm             # 2 machines

(plain `torchrun -m maskbench.cli pretrain --run mlm` does not work: torchrun's own parser reads
`--run` as an abbreviation of its `--run-path`).

What a run computes does not depend on the number of processes: the global batch is the setting,
each step's blocks and masks are drawn for the whole batch from (seed, step), and process r
trains micro-batch slots r·a … r·a + a − 1 of it (`World.slots`, a = accumulation steps), each
slot with dropout seeded by (seed, step, slot). DDP averages the gradients over processes as
accumulation averages them over micro-batches, so 1 process × 8 micro-batches and 8 processes ×
1 make the same update (docs/scaling.md). NCCL on GPUs, gloo on CPU; rank 0 alone writes logs,
checkpoints, MLflow runs and the model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from maskbench.preemption import EXIT_CODE
from maskbench.train.world import SRUN_WORLD, position

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> "World":
        """This process's place (`maskbench.train.world.position`); outside a launcher a world
        of one, where every method is a no-op."""
        return cls(*position())

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def slots(self, accumulation: int) -> range:
        """The global batch's micro-batch slots this process trains, in order."""
        return range(self.rank * accumulation, (self.rank + 1) * accumulation)

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

    def step_end(self, loss: float, stop: bool, device: torch.device) -> tuple[float, bool]:
        """The step's loss averaged over ranks, and whether any rank was asked to stop
        (SIGTERM): one all-reduce, so every rank stops after the same step."""
        if self.size == 1:
            return loss, stop
        tensor = torch.tensor([loss, float(stop)], dtype=torch.float64, device=device)
        dist.all_reduce(tensor)
        return tensor[0].item() / self.size, tensor[1].item() > 0

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    def shutdown(self) -> None:
        """Leave the process group together: the barrier drains every rank's pending work."""
        if self.size > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def relaunch(argv: list[str], gpus: int, nodes: int, threads: int) -> int:
    """Run `maskbench <argv>` as `gpus` processes on each of `nodes` nodes, `threads` CPU
    threads each; return the exit status: 0, 143 where every failed process stopped on SIGTERM
    (a preemption, checkpointed), else 1. One node: torchrun in this process. Several: `srun`
    in the SLURM allocation this runs in (its first node, where the batch script runs, hosts
    the rendezvous), each task given its CPUs explicitly (srun does not take the allocation's
    --cpus-per-task everywhere, and a job step may run without the SLURM_* variables). Outside
    a SLURM allocation a run on several nodes runs on this one node's `gpus` processes: the
    global batch is the setting, so the result is the same, with more accumulation."""
    if nodes > 1 and not os.environ.get("SLURM_JOB_ID"):
        log.warning("launch asks %d nodes but this is one machine outside SLURM: running on its %d process(es), "
                    "the global batch unchanged (more micro-batches each)", nodes, gpus)
        nodes = 1
    if nodes == 1:
        return launch([f"--nproc_per_node={gpus}", "--standalone", "--", *argv])
    env = {**os.environ, SRUN_WORLD: "1", "MASTER_ADDR": socket.gethostname(), "MASTER_PORT": str(_free_port())}
    command = ["srun", f"--nodes={nodes}", f"--ntasks-per-node={gpus}", f"--ntasks={nodes * gpus}",
               f"--cpus-per-task={threads}", "--kill-on-bad-exit=1", sys.executable, "-m", "maskbench.cli", *argv]
    log.info("launching %d x %d processes: %s", nodes, gpus, " ".join(command))
    proc = subprocess.Popen(command, env=env)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signal.SIGTERM))  # srun forwards it
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


def launch(argv: list[str]) -> int:
    """torchrun with the options before `--`, running `maskbench.cli` with the arguments after;
    the exit status as `relaunch` gives it."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    if "--" not in argv:
        sys.exit("usage: python -m maskbench.train.distributed [torchrun options] -- STAGE [stage options]")
    split = argv.index("--")
    args = get_args_parser().parse_args([*argv[:split], "-m", "maskbench.cli"])
    args.training_script_args = argv[split + 1:]
    try:
        run(args)
    except SignalException:  # SIGTERM to the launcher: torchrun passed it on to every process
        return EXIT_CODE
    except ChildFailedError as failed:
        codes = {failure.exitcode for failure in failed.failures.values()}
        return EXIT_CODE if codes <= {EXIT_CODE, -signal.SIGTERM} else 1
    return 0


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))
