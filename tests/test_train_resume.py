"""Killing pretraining mid-run and re-running resumes from the last checkpoint, and ends
exactly where an uninterrupted run ends."""

from __future__ import annotations

import csv
import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tests.helpers import pretrain_signalled, pretrain_workdir

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


def set_pretrain(root: Path, **settings) -> None:
    """Change the smoke profile's pretraining settings in `root`'s params.yaml."""
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["profiles"]["smoke"]["pretrain"].update(settings)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def weights(root: Path) -> dict[str, torch.Tensor]:
    return load_file(root / "runs/pretrain/mlm/model/model.safetensors")


def test_operational_changes_resume_and_end_with_the_uninterrupted_weights(tmp_path, tiny_tokenizer):
    """SIGTERM at step 12, then threads, eval_every, log_every and checkpoint_every changed: the
    run resumes at step 12 (not afresh), says what changed, records it in metrics.json, and ends
    with the weights of a run that was never stopped."""
    straight = pretrain_workdir(tmp_path / "straight", tiny_tokenizer)
    assert pretrain(straight).wait() == 0
    root = pretrain_workdir(tmp_path / "moved", tiny_tokenizer)
    assert pretrain_signalled(root, signal.SIGTERM, at_step=12).returncode == 143
    set_pretrain(root, threads=2, eval_every=20, log_every=4, checkpoint_every=7)
    resumed = pretrain(root)
    output = resumed.communicate()[0]
    assert resumed.returncode == 0, output
    assert "resumed mlm from checkpoint at step 12" in output and "afresh" not in output
    for change in ("settings.threads: 1 -> 2", "settings.eval_every: 10 -> 20", "settings.log_every: 5 -> 4",
                   "settings.checkpoint_every: 5 -> 7"):
        assert change in output
    metrics = json.loads((root / "runs/pretrain/mlm/metrics.json").read_text())
    assert "settings.threads: 1 -> 2 at step 12" in metrics["resumed_with"]
    assert "resumed_with" not in json.loads((straight / "runs/pretrain/mlm/metrics.json").read_text())
    a, b = weights(straight), weights(root)
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-5) for k in a)


def test_a_result_changing_setting_is_refused_by_name_and_the_checkpoint_kept(tmp_path, tiny_tokenizer):
    root = pretrain_workdir(tmp_path / "stale", tiny_tokenizer)
    assert pretrain_signalled(root, signal.SIGTERM, at_step=8).returncode == 143
    checkpoint = root / "runs/pretrain/mlm/checkpoint"
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in checkpoint.iterdir()}
    set_pretrain(root, lr=3e-4, threads=2)
    refused = pretrain(root)
    output = refused.communicate()[0]
    assert refused.returncode == 1, output
    assert "settings.lr: 0.001 -> 0.0003" in output and "threads" not in output.split("change the result:")[1]
    assert "--fresh" in output and "Traceback" not in output
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in checkpoint.iterdir()} == before
    assert not (root / "runs/pretrain/mlm/model").exists()
    fresh = subprocess.run([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", "mlm", "--fresh"], cwd=root,
                           capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr
    assert f"--fresh: deleting {Path('runs/pretrain/mlm/checkpoint')}" in fresh.stderr
    assert "resumed" not in fresh.stderr and (root / "runs/pretrain/mlm/model").is_dir()
