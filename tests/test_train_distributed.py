"""Pretraining under torchrun: two gloo processes on CPU train one model through DDP, and only
rank 0 writes the model, the log and the MLflow run."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
import torch

from maskbench.train.distributed import World
from tests.conftest import pretrain_workdir

pytestmark = pytest.mark.slow


def test_a_world_of_one_changes_nothing():
    world = World()
    model = torch.nn.Linear(2, 2)
    assert world.is_main and world.seed(7) == 7
    assert world.wrap(model, torch.device("cpu")) is model
    assert world.mean(1.5, torch.device("cpu")) == 1.5


def test_ranks_leave_the_group_together(monkeypatch):
    """A barrier drains every rank's pending work before the group is torn down (else gloo can hang)."""
    calls = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(torch.distributed, "destroy_process_group", lambda: calls.append("destroy"))
    World(rank=1, size=2).shutdown()
    assert calls == ["barrier", "destroy"]


def test_ranks_draw_different_batches():
    assert len({World(rank=r, size=4).seed(0) for r in range(4)}) == 4


def test_two_gloo_processes_pretrain_one_model(tmp_path, tiny_tokenizer):
    root = pretrain_workdir(tmp_path / "ddp", tiny_tokenizer)
    proc = subprocess.run(
        [sys.executable, "-m", "maskbench.train.distributed", "--standalone", "--nproc_per_node", "2",
         "--", "pretrain", "--run", "mlm"],
        cwd=root, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = root / "runs/pretrain/mlm"
    assert (run / "model/model.safetensors").exists() and (run / "metrics.json").exists()
    with open(run / "log.csv") as fh:
        steps = [int(float(row["step"])) for row in csv.DictReader(fh)]
    assert steps == sorted(set(steps)) and steps[-1] == 40  # one writer: no duplicated rows
