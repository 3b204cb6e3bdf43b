"""Pretraining on several processes (gloo on CPU), started the way the workflow starts it:
`maskbench pretrain --run R` with params.yaml `launch.gpus: 2`.

What must hold (docs/scaling.md): every objective trains on 2 ranks; 2 ranks × 1 micro-batch
and 1 process × 2 micro-batches end with the same parameters (dropout included: a micro-batch
slot's dropout depends on (seed, step, slot) only); a checkpoint written on 2 ranks resumes on
1 to the same end; SIGTERM to one rank stops both after the same step, with status 143.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from maskbench import paths
from maskbench.train.distributed import World
from tests.helpers import PRETRAINED_OBJECTIVES, REPO, pretrain_workdir

STEPS = 20
# Parameters after 20 AdamW steps from the same start, one run with its micro-batch gradients
# averaged by accumulation, the other by DDP's all-reduce: float32 sums in another order.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def test_a_world_of_one_changes_nothing():
    world = World()
    model = torch.nn.Linear(2, 2)
    assert world.is_main and world.slots(3) == range(3)
    assert world.wrap(model, torch.device("cpu")) is model
    assert world.step_end(1.5, True, torch.device("cpu")) == (1.5, True)


@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_the_ranks_slots_tile_the_global_batch_in_order(size):
    accumulation = 8 // size
    slots = [slot for rank in range(size) for slot in World(rank, size).slots(accumulation)]
    assert slots == list(range(8))


def test_ranks_leave_the_group_together(monkeypatch):
    """A barrier drains every rank's pending work before the group is torn down (else gloo can hang)."""
    calls = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(torch.distributed, "destroy_process_group", lambda: calls.append("destroy"))
    World(rank=1, size=2).shutdown()
    assert calls == ["barrier", "destroy"]


def test_srun_tasks_read_their_rank_from_slurm(monkeypatch):
    """Across nodes `relaunch` starts one srun task per GPU, which know their place from SLURM."""
    monkeypatch.setenv("MASKBENCH_SRUN_WORLD", "1")
    monkeypatch.setenv("SLURM_PROCID", "9")
    monkeypatch.setenv("SLURM_NTASKS", "16")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    assert World.from_env() == World(rank=9, size=16, local_rank=1)


# --- the real launcher ------------------------------------------------------------------------

# Imported by every Python process started with this directory on PYTHONPATH (the launcher and
# each rank): the rank named by SIGNAL_RANK sends itself SIGTERM during its SIGNAL_STEP-th
# optimizer step, so the signal lands in a known step however fast the machine trains.
SITECUSTOMIZE = """
import os
if os.environ.get("SIGNAL_RANK") == os.environ.get("RANK", "-"):
    import maskbench.train.pretrain as pretrain
    step_once, calls = pretrain.optimizer_step, []
    def step_then_signal(*args, **kwargs):
        calls.append(1)
        if len(calls) == int(os.environ["SIGNAL_STEP"]):
            os.kill(os.getpid(), 15)
        return step_once(*args, **kwargs)
    pretrain.optimizer_step = step_then_signal
"""


def workdir(root: Path, tokenizer, gpus: int, **settings) -> Path:
    """The smoke profile, 20 steps of a global batch of 4 in micro-batches of 2, dropout on (or
    the pretraining `settings` given), on `gpus` gloo processes."""
    root = pretrain_workdir(root, tokenizer, **{"steps": STEPS, "batch_size": 4, "micro_batch_size": 2, "dropout": 0.1,
                                                "checkpoint_every": 100, "log_every": 5, "eval_every": 10,
                                                "device": "cpu", **settings})
    set_processes(root, gpus)
    return root


def set_processes(root: Path, gpus: int) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["launch"] = {"gpus": gpus, "nodes": 1}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def pretrain(root: Path, run: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", run], cwd=root,
                          capture_output=True, text=True, timeout=900, env={**os.environ, **env})


def assert_same_parameters(a: Path, b: Path, run: str) -> None:
    model = paths.PRETRAIN_MODEL.format(run=run)
    first, second = load_file(a / model / "model.safetensors"), load_file(b / model / "model.safetensors")
    assert first.keys() == second.keys()
    for key in first:
        torch.testing.assert_close(first[key], second[key], **TOLERANCE, msg=lambda m: f"{run} {key}: {m}")


def logged_steps(root: Path, run: str) -> list[int]:
    with open(root / paths.PRETRAIN_LOG.format(run=run)) as fh:
        return [int(float(row["step"])) for row in csv.DictReader(fh)]


@pytest.mark.slow
@pytest.mark.parametrize("run", PRETRAINED_OBJECTIVES)  # a run of params.yaml named as each objective
def test_two_ranks_train_every_objective_as_one_process_accumulating(run, tmp_path, tiny_tokenizer):
    assert yaml.safe_load((REPO / "params.yaml").read_text())["runs"][run]["objective"] == run
    ranks, single = workdir(tmp_path / "ranks", tiny_tokenizer, 2), workdir(tmp_path / "single", tiny_tokenizer, 1)
    two = pretrain(ranks, run)
    assert two.returncode == 0, two.stderr[-4000:]
    assert "launching 2 process(es)" in (ranks / f"logs/pretrain/{run}.log").read_text()
    assert (ranks / f"logs/pretrain/{run}.log.rank1").exists()  # rank 1 logs beside rank 0
    assert logged_steps(ranks, run) == [5, 10, 15, 20]  # one writer: no duplicated rows
    one = pretrain(single, run)
    assert one.returncode == 0, one.stderr[-4000:]
    assert_same_parameters(ranks, single, run)


@pytest.mark.slow
@pytest.mark.parametrize("run", ["mlm", "exlm"])
def test_two_ranks_train_on_whole_documents_as_one_process_accumulating(run, tmp_path, tiny_tokenizer):
    """`blocks: documents` (the paper profile's): a step's block length varies (documents of 60
    tokens in pieces of 22, 22 and 16), and every rank draws the same one."""
    settings = {"blocks": "documents", "seq_len": 24}
    ranks = workdir(tmp_path / "ranks", tiny_tokenizer, 2, **settings)
    single = workdir(tmp_path / "single", tiny_tokenizer, 1, **settings)
    for root in (ranks, single):
        done = pretrain(root, run)
        assert done.returncode == 0, done.stderr[-4000:]
    assert_same_parameters(ranks, single, run)


@pytest.mark.slow
def test_the_comparison_of_parameters_can_fail(tmp_path, tiny_tokenizer):
    """Another global batch (2 sequences, not 4) trains other parameters beyond the tolerance."""
    root, other = workdir(tmp_path / "a", tiny_tokenizer, 1), workdir(tmp_path / "b", tiny_tokenizer, 1)
    params = yaml.safe_load((other / "params.yaml").read_text())
    params["profiles"]["smoke"]["pretrain"]["batch_size"] = 2
    (other / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    assert pretrain(root, "mlm").returncode == 0 and pretrain(other, "mlm").returncode == 0
    with pytest.raises(AssertionError):
        assert_same_parameters(root, other, "mlm")


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_both_and_one_process_resumes_to_the_same_end(tmp_path, tiny_tokenizer):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    root = workdir(tmp_path / "preempted", tiny_tokenizer, 2)
    stopped = pretrain(root, "exlm", PYTHONPATH=os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
                       SIGNAL_RANK="1", SIGNAL_STEP="8")
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-4000:]
    for log in ("exlm.log", "exlm.log.rank1"):  # both ranks stopped after the step under way, the 8th
        assert "stopped by SIGTERM at step 8" in (root / "logs/pretrain" / log).read_text(), log
    checkpoint = torch.load(root / paths.PRETRAIN_CHECKPOINT.format(run="exlm") / "state.pt", weights_only=False)
    assert checkpoint["step"] == 8 and checkpoint["processes"] == 2
    assert not (root / paths.PRETRAIN_MODEL.format(run="exlm")).exists()

    set_processes(root, 1)
    resumed = pretrain(root, "exlm")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "written by 2 process(es), this run has 1; the global batch stays 4 sequences" in resumed.stderr
    straight = workdir(tmp_path / "straight", tiny_tokenizer, 1)
    assert pretrain(straight, "exlm").returncode == 0
    assert_same_parameters(root, straight, "exlm")


# A stand-in for SLURM's srun inside an allocation: starts --ntasks copies of the command with
# the task ids srun gives each (as if --ntasks-per-node of them ran on each node), and exits
# with the worst status.
FAKE_SRUN = """#!{python}
import os, subprocess, sys
first = next(i for i, a in enumerate(sys.argv) if i and not a.startswith("--"))  # srun's options end there
options, command = dict(a[2:].split("=", 1) for a in sys.argv[1:first]), sys.argv[first:]
with open(os.environ["FAKE_SRUN_CALLS"], "a") as out:
    out.write(" ".join(sys.argv[1:]) + "\\n")
per_node = int(options["ntasks-per-node"])
tasks = [subprocess.Popen(command, env={{**os.environ, "SLURM_PROCID": str(i), "SLURM_NTASKS": options["ntasks"],
                                        "SLURM_LOCALID": str(i % per_node)}})
         for i in range(int(options["ntasks"]))]
sys.exit(max(task.wait() for task in tasks))
"""


@pytest.mark.slow
def test_two_nodes_start_one_srun_task_per_gpu_and_train_as_one_process(tmp_path, tiny_tokenizer, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN.format(python=sys.executable))
    (bin_dir / "srun").chmod(0o755)
    root = workdir(tmp_path / "nodes", tiny_tokenizer, 1)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["launch"] = {"gpus": 1, "nodes": 2}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    calls = tmp_path / "srun.calls"
    nodes = pretrain(root, "mae_lm", PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", SLURM_JOB_ID="42",
                     FAKE_SRUN_CALLS=str(calls))
    assert nodes.returncode == 0, nodes.stderr[-4000:]
    [call] = calls.read_text().splitlines()
    assert call.startswith("--nodes=2 --ntasks-per-node=1 --ntasks=2 --cpus-per-task=1 --kill-on-bad-exit=1 ")
    assert call.endswith("-m maskbench.cli pretrain --run mae_lm --log logs/pretrain/mae_lm.log")
    single = workdir(tmp_path / "single", tiny_tokenizer, 1)
    assert pretrain(single, "mae_lm").returncode == 0
    assert_same_parameters(root, single, "mae_lm")


def test_several_nodes_outside_slurm_run_on_this_node_with_accumulation(monkeypatch, caplog):
    """A paper run launched on 2 nodes, started on one 8-GPU machine: its 8 processes there (the
    global batch is the setting: the same result, twice the micro-batches each)."""
    from maskbench.train import distributed

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    started = []
    monkeypatch.setattr(distributed, "launch", lambda argv: started.append(argv) or 0)
    assert distributed.relaunch(["pretrain", "--run", "mlm"], gpus=8, nodes=2, threads=4) == 0
    assert started == [["--nproc_per_node=8", "--standalone", "--", "pretrain", "--run", "mlm"]]
    assert "launch asks 2 nodes but this is one machine outside SLURM" in caplog.text


@pytest.mark.slow
def test_sigterm_to_the_launcher_stops_every_rank_after_the_same_step(tmp_path, tiny_tokenizer):
    """What a scheduler does: SIGTERM to the job's process, which torchrun passes to every rank."""
    import re
    import time

    root = workdir(tmp_path / "w", tiny_tokenizer, 2)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["profiles"]["smoke"]["pretrain"].update(steps=1_000_000, eval_every=1_000_000)  # runs until stopped
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    launcher = subprocess.Popen([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", "mlm"], cwd=root,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # the ranks are training once the first checkpoint is written (a signal during start-up stops
    # them before any step, as it should, with nothing to compare)
    checkpoint, deadline = root / paths.PRETRAIN_CHECKPOINT.format(run="mlm") / "state.pt", time.monotonic() + 300
    while not checkpoint.exists() and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert checkpoint.exists(), "no checkpoint within 300 s: the ranks did not train"
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=120) == 128 + signal.SIGTERM
    stopped = [re.search(r"stopped by SIGTERM at step (\d+)", (root / "logs/pretrain" / log).read_text())
               for log in ("mlm.log", "mlm.log.rank1")]
    assert all(stopped) and stopped[0][1] == stopped[1][1]
    checkpoint = torch.load(checkpoint, weights_only=False)
    assert checkpoint["step"] == int(stopped[0][1]) > 0
