"""Killing pretraining mid-run and re-running resumes from the last checkpoint, and ends
exactly where an uninterrupted run ends."""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.conftest import pretrain_signalled, pretrain_workdir

pytestmark = pytest.mark.slow


def pretrain(root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", "mlm"], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_killed_pretraining_resumes_and_matches_uninterrupted(tmp_path, tiny_tokenizer):
    straight = pretrain_workdir(tmp_path / "straight", tiny_tokenizer)
    assert pretrain(straight).wait() == 0

    killed = pretrain_workdir(tmp_path / "killed", tiny_tokenizer)
    assert pretrain_signalled(killed, signal.SIGKILL, at_step=23).returncode == -signal.SIGKILL
    state = killed / "runs/pretrain/mlm/checkpoint/state.pt"
    stopped_at = torch.load(state, weights_only=False)["step"]
    assert stopped_at == 20  # the last checkpoint (one every 5 steps) before the kill
    # no declared output yet (Snakemake would call it incomplete); the progress log is in checkpoint/
    assert not [p.name for p in (killed / "runs/pretrain/mlm").iterdir() if p.name != "checkpoint"]
    assert len(log_rows(killed, "checkpoint/log.csv")) >= 2

    resumed = pretrain(killed)
    output = resumed.communicate()[0]
    assert resumed.returncode == 0, output
    assert f"resumed mlm from checkpoint at step {stopped_at}" in output
    assert not state.exists()  # a finished run leaves no checkpoint behind
    a = load_file(straight / "runs/pretrain/mlm/model/model.safetensors")
    b = load_file(killed / "runs/pretrain/mlm/model/model.safetensors")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)
    straight_log, resumed_log = log_rows(straight), log_rows(killed)
    assert [r["step"] for r in resumed_log] == [r["step"] for r in straight_log] == list(range(5, 41, 5))
    assert [r["loss"] for r in resumed_log] == pytest.approx([r["loss"] for r in straight_log], rel=1e-4)


def log_rows(root: Path, name: str = "log.csv") -> list[dict]:
    with open(root / "runs/pretrain/mlm" / name) as fh:
        return [{"step": int(row["step"]), "loss": float(row["loss"])} for row in csv.DictReader(fh)]


def test_changed_parameters_do_not_resume_a_stale_checkpoint(tmp_path, tiny_tokenizer):
    root = pretrain_workdir(tmp_path / "stale", tiny_tokenizer)
    assert pretrain_signalled(root, signal.SIGKILL, at_step=8).returncode == -signal.SIGKILL
    assert (root / "runs/pretrain/mlm/checkpoint/state.pt").exists()
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["pretrain"]["lr"] = 3e-4
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    rerun = pretrain(root)
    output = rerun.communicate()[0]
    assert rerun.returncode == 0 and "starting mlm afresh" in output
