"""Resumable fine-tuning (`maskbench.finetune.loop`): a job stopped by SIGTERM (after the step
under way, checkpointed there) or killed hard (from its last end-of-epoch checkpoint) ends, when
re-run, with the same metrics.json (but its wall time) and byte-identical predictions as a job
that ran straight through, in the same MLflow run."""

from __future__ import annotations

import json
import re
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import pytest
import yaml

from maskbench import paths
from maskbench.finetune.loop import load_checkpoint, save_checkpoint
from maskbench.train.fingerprint import FINETUNE_OPERATIONAL, StaleCheckpoint, fingerprint
from tests.helpers import pretrain_workdir, stage_signalled, task_files

RUN, TASK, SEED = "mlm", "rotten_tomatoes", 1

def finetune_job(root: Path, signum: int | None = None, at_step: int = 0) -> subprocess.CompletedProcess:
    """`maskbench finetune` in `root`, with its own MLflow store there; with `signum`, sent that
    signal during its `at_step`-th optimizer step (over the whole job, grid points one after the other)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    argv = ["finetune", "--run", RUN, "--task", TASK, "--seed", str(SEED)]
    if signum is not None:
        return stage_signalled(root, "maskbench.finetune.loop", argv, signum, at_step, env)
    return subprocess.run([sys.executable, "-m", "maskbench.cli", *argv], cwd=root, capture_output=True, text=True,
                          env=env)


def mlflow_statuses(root: Path) -> list[str]:
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("maskbench").experiment_id],
                              filter_string=f"attributes.run_name = 'finetune/{RUN}/{TASK}/seed{SEED}'")
    return sorted(r.info.status for r in runs)


def outputs(root: Path) -> tuple[dict, bytes]:
    """metrics.json but its wall time, and predictions.jsonl's bytes."""
    where = {"run": RUN, "task": TASK, "seed": SEED}
    metrics = json.loads((root / paths.FINETUNE_METRICS.format(**where)).read_text())
    assert metrics.pop("seconds") >= 0
    return metrics, (root / paths.FINETUNE_PREDICTIONS.format(**where)).read_bytes()


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory, tiny_tokenizer) -> Path:
    """A workflow copy with `mlm` pretrained and a small sentence task, whose fine-tuning has two
    grid points of 3 epochs of 10 steps: 60 optimizer steps in all."""
    root = pretrain_workdir(tmp_path_factory.mktemp("resume") / "w", tiny_tokenizer, steps=10)
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["profiles"]["smoke"]["finetune"] = {
        "grid": {"lr": [1e-3, 3e-4]},
        "settings": {"epochs": 3, "batch_size": 4, "max_len": 32, "max_train_examples": None, "max_eval_examples": None,
                     "device": "cpu", "pooler_dropout": 0.1}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'pretrain.db'}"}
    done = subprocess.run([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", RUN], cwd=root,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    words = "the cat sat on mat while a dog ran in park and bird sang".split()
    rng = np.random.default_rng(0)
    rows = [{"text": " ".join(rng.choice(words, rng.integers(3, 12))), "text_pair": None, "label": i % 2}
            for i in range(60)]
    task_files(root / "task-files", {"train": rows[:40], "dev": rows[40:50], "test": rows[50:]}, "classification",
               ["rotten", "fresh"])
    shutil.move(root / "task-files/task", root / paths.TASK.format(task=TASK))
    shutil.move(root / "task-files/card.json", root / paths.TASK_CARD.format(task=TASK))
    shutil.move(root / "task-files/download.json", root / paths.DOWNLOAD_CARD.format(dataset=TASK))
    return root


@pytest.fixture(scope="module")
def straight(pretrained, tmp_path_factory) -> tuple[dict, bytes]:
    root = shutil.copytree(pretrained, tmp_path_factory.mktemp("straight") / "w")
    result = finetune_job(root)
    assert result.returncode == 0, result.stderr
    assert not (root / paths.FINETUNE_CHECKPOINT.format(run=RUN, task=TASK, seed=SEED)).exists()  # deleted when done
    return outputs(root)


@pytest.mark.slow
def test_sigterm_stops_after_the_step_and_the_rerun_matches_a_straight_run(pretrained, straight, tmp_path):
    root = shutil.copytree(pretrained, tmp_path / "w")
    stopped = finetune_job(root, signal.SIGTERM, at_step=15)  # grid point 0, epoch 2, its 5th step
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "stopped by SIGTERM at step 15" in stopped.stderr
    checkpoint = root / paths.FINETUNE_CHECKPOINT.format(run=RUN, task=TASK, seed=SEED)
    assert (checkpoint / "state.pt").exists()
    assert not (root / paths.FINETUNE_METRICS.format(run=RUN, task=TASK, seed=SEED)).exists()
    assert mlflow_statuses(root) == ["KILLED"]

    resumed = finetune_job(root)
    assert resumed.returncode == 0, resumed.stderr
    assert "grid point 0, epoch 2, batch 5" in resumed.stderr
    assert outputs(root) == straight
    assert not checkpoint.exists() and mlflow_statuses(root) == ["FINISHED"]  # the same run, resumed


@pytest.mark.slow
def test_a_job_killed_hard_resumes_from_its_last_epoch_and_matches_a_straight_run(pretrained, straight, tmp_path):
    root = shutil.copytree(pretrained, tmp_path / "w")
    killed = finetune_job(root, signal.SIGKILL, at_step=45)  # grid point 1, epoch 2, its 5th step
    assert killed.returncode == -signal.SIGKILL
    resumed = finetune_job(root)
    assert resumed.returncode == 0, resumed.stderr
    assert "grid point 1, epoch 2, batch 0" in resumed.stderr  # point 0's results came from the checkpoint
    assert outputs(root) == straight
    assert mlflow_statuses(root) == ["FINISHED"]


def test_a_checkpoint_resumes_across_operational_changes_refuses_others_and_skips_a_damaged_one(tmp_path, caplog):
    point = {"lr": 1e-3, "threads": 1, "device": "cpu"}
    inputs = {"points": [point], "task": {"kind": "classification"}, "seed": 1, "files": {"model/x": "aa"}}
    save_checkpoint(tmp_path, {"fingerprint": fingerprint(inputs, FINETUNE_OPERATIONAL), "inputs": inputs,
                               "results": [], "point": {"epoch": 2, "batch": 0}})
    before = (tmp_path / "state.pt").read_bytes()
    assert load_checkpoint(tmp_path, inputs, "")["point"] == {"epoch": 2, "batch": 0}
    moved = {**inputs, "points": [{**point, "threads": 4, "device": "cuda"}]}
    assert load_checkpoint(tmp_path, moved, "")["point"] == {"epoch": 2, "batch": 0}
    assert "points.0.threads: 1 -> 4" in caplog.text and "points.0.device: 'cpu' -> 'cuda'" in caplog.text
    for changed, named in (({**inputs, "points": [{**point, "lr": 2e-3}]}, "points.0.lr: 0.001 -> 0.002"),
                           ({**inputs, "files": {"model/x": "bb"}}, "files.model/x: 'aa' -> 'bb'"),
                           # a job that now keeps its encoder (an analysis reads it): the finished points have none
                           ({**inputs, "keeps_encoder": True}, "keeps_encoder")):
        with pytest.raises(StaleCheckpoint, match=re.escape(named) + ".*kept.*way out"):
            load_checkpoint(tmp_path, changed, "way out")
    assert (tmp_path / "state.pt").read_bytes() == before
    (tmp_path / "state.pt").write_bytes(b"not a checkpoint")
    assert load_checkpoint(tmp_path, inputs, "") == {} and "cannot be read" in caplog.text
    assert load_checkpoint(tmp_path / "missing", inputs, "") == {}


def test_a_job_that_keeps_its_encoder_holds_and_checkpoints_the_chosen_points_alone(pretrained, tmp_path, monkeypatch):
    """Over a grid of two points, the checkpoint after the first point holds its encoder; once
    the second is done, only the chosen point's is left, the one saved."""
    from safetensors.torch import load_file

    from maskbench.config import read_params
    from maskbench.finetune import loop
    from maskbench.stages import job

    monkeypatch.chdir(pretrained)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _, config = read_params(pretrained / "params.yaml")
    files = job(config, "finetune", {"run": RUN, "task": TASK, "seed": SEED}).input
    held, results = [], []
    monkeypatch.setattr(loop, "save_checkpoint", lambda directory, saved: held.append(
        [r["encoder"] is not None for r in saved["results"]]))
    original = loop.job_metrics
    monkeypatch.setattr(loop, "job_metrics", lambda run, task, seed, spec, done, *rest: (
        results.extend(done), original(run, task, seed, spec, done, *rest))[1])
    metrics = loop.finetune(config, RUN, TASK, SEED, *(Path(files[k]) for k in ("model", "task", "card", "data_card")),
                            tmp_path / "metrics.json", tmp_path / "predictions.jsonl", encoder_dir=tmp_path / "encoder")
    assert [True] in held and all(sum(kept) <= 1 for kept in held)
    assert [r["encoder"] is not None for r in results] == [i == metrics["grid_point"] for i in range(2)]
    saved = load_file(tmp_path / "encoder/model.safetensors")
    chosen = results[metrics["grid_point"]]["encoder"]
    assert all(torch.equal(saved[k], chosen[k]) for k in saved)
