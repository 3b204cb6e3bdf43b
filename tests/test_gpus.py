"""One GPU per job (`maskbench.gpus`): jobs Snakemake starts side by side under
`--resources gpu=N` each take GPUs of their own, on stand-in devices (CPU torch ignores
CUDA_VISIBLE_DEVICES, so 8 GPU ids can be declared on a machine without one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskbench import gpus

EIGHT = ",".join(str(i) for i in range(8))

# A job that claims `gpu` GPUs as a stage job does, writes what it sees, and holds them until
# `expected` jobs have written theirs: jobs Snakemake ran one after the other would never meet.
JOB = """
import json, os, sys, time
from pathlib import Path
from maskbench.gpus import assign
assign({gpu})
Path("{output}").write_text(json.dumps(os.environ["CUDA_VISIBLE_DEVICES"].split(",")))
deadline = time.monotonic() + 120
while len(list(Path(".").glob("seen/*.json"))) < {expected}:
    if time.monotonic() > deadline:
        sys.exit("the other jobs never ran beside this one")
    time.sleep(0.2)
"""

SNAKEFILE = """
JOBS = {jobs!r}
rule all:
    input: [f"seen/{{name}}.json" for name in JOBS]
rule job:
    output: "seen/{{name}}.json"
    resources: gpu=lambda w: JOBS[w.name]
    params: script=lambda w, output: {script!r}.format(gpu=JOBS[w.name], output=output[0], expected=len(JOBS))
    shell: "{python} -c '{{params.script}}'"
"""


def run_jobs(tmp_path: Path, jobs: dict[str, int]) -> dict[str, list[str]]:
    """Run one job per entry of `jobs` (name: GPUs it asks) under `snakemake --cores 8
    --resources gpu=8` with 8 stand-in GPUs; what each job saw in CUDA_VISIBLE_DEVICES."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(jobs=jobs, script=JOB.replace("'", '"'),
                                                         python=sys.executable))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": EIGHT, gpus.LOCKS_ENV: str(tmp_path / "locks")}
    env.pop("SLURM_JOB_ID", None)
    done = subprocess.run(["snakemake", "--cores", "8", "--resources", "gpu=8", "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {name: json.loads((tmp_path / f"seen/{name}.json").read_text()) for name in jobs}


@pytest.mark.slow  # a Snakemake run of 8 jobs end to end (5-8 s)
def test_eight_one_gpu_jobs_each_see_a_different_gpu(tmp_path):
    seen = run_jobs(tmp_path, {f"finetune{i}": 1 for i in range(8)})
    assert all(len(s) == 1 for s in seen.values())
    assert sorted(g for s in seen.values() for g in s) == EIGHT.split(",")


@pytest.mark.slow  # a Snakemake run of 8 jobs end to end (5-8 s)
def test_a_four_gpu_pretraining_and_four_one_gpu_jobs_share_eight_without_overlap(tmp_path):
    seen = run_jobs(tmp_path, {"pretrain": 4, **{f"finetune{i}": 1 for i in range(4)}})
    assert len(seen["pretrain"]) == 4
    assert sorted(g for s in seen.values() for g in s) == EIGHT.split(",")


@pytest.fixture
def stand_in_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", EIGHT)
    monkeypatch.setenv(gpus.LOCKS_ENV, str(tmp_path / "locks"))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    yield
    while gpus._held:  # what this process claimed, as its exit would
        gpus._held.pop().release()


def test_a_cuda_stage_job_claims_its_launch_gpus_before_cuda_starts(config, stand_in_gpus):
    from maskbench.cli import _claim_gpus

    config["pretrain"]["device"] = "cuda"
    config["launch"] = {"gpus": 4, "nodes": 1}
    _claim_gpus(config, "pretrain", {"run": "mlm"})
    mine = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(mine) == 4 and set(mine) <= set(EIGHT.split(","))
    # the next job's claim gets the other four
    assert set(gpus.claim(4, EIGHT.split(","), gpus.lock_dir())) == set(EIGHT.split(",")) - set(mine)


def test_no_claim_without_a_gpu_job_under_slurm_or_beyond_what_is_visible(stand_in_gpus, monkeypatch, tmp_path):
    assert gpus.assign(0) == []
    with pytest.raises(ValueError, match="asks for 9 GPU.*8 visible"):
        gpus.claim(9, EIGHT.split(","), tmp_path)
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    assert gpus.assign(2) == [] and os.environ["CUDA_VISIBLE_DEVICES"] == EIGHT
