"""`maskbench status`: what is left of the profile's reports, per stage, in a few lines, on any
partial build (maskbench.status)."""

from __future__ import annotations

import subprocess

from maskbench import built
from maskbench.dvc_yaml import reported_jobs
from maskbench.status import states, summary
from tests.helpers import copy_workflow, use_profile


def make(root, job) -> None:
    """The job's outputs, as its command leaves them, and its stamp."""
    for name, path in job.output.items():
        target = root / path
        if name in job.stage.directories:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("{}")


def test_a_half_built_tree_answers_in_a_few_lines_what_is_left(tmp_path):
    root = copy_workflow(tmp_path / "project")
    config = use_profile(root, "smoke")
    jobs = reported_jobs(config)
    downloads = [job for job in jobs if job.stage.name == "download"]
    for job in downloads:
        make(root, job)
        built.finish("download", job.wildcards, built.source(config, "download", job.wildcards, built.makers(config),
                                                              {}, root), root)
    answer = summary(config, root)
    assert answer.splitlines()[0] == f"profile smoke: {len(downloads)} of {len(jobs)} jobs built, " \
                                     f"{len(jobs) - len(downloads)} left"
    assert "download" not in answer and "  pretrain " in answer and len(answer.splitlines()) <= 16
    # a fine-tuning job's files on disk, its pretraining not built: it will run again after it
    [finetune] = [job for job in jobs if job.stage.job_name(job.wildcards) == "finetune-mlm-rotten_tomatoes-seed1"]
    make(root, finetune)
    assert dict((job.stage.job_name(job.wildcards), state) for job, state in states(config, root))[
        "finetune-mlm-rotten_tomatoes-seed1"] == "stale"
    # and the command says so, with exit code 0
    answered = subprocess.run(["maskbench", "status"], cwd=root, capture_output=True, text=True)
    assert answered.returncode == 0 and answered.stdout.strip() == summary(config, root)


def test_dvc_repro_dry_cannot_answer_on_a_partial_build(tmp_path):
    """Why `maskbench status` is the answer (docs/dvc.md, "What is left"): `dvc repro --dry` fails
    on any pipeline whose first stage has not run, however dvc.yaml is written: before printing
    a changed stage's command it looks the stage up in its run cache, hashing its deps, and the
    dep the stage before would write is not there. Two stages show it; once a DVC release answers
    here, docs/dvc.md should say so."""
    (tmp_path / "dvc.yaml").write_text("stages:\n  one: {cmd: echo one > one.txt, outs: [one.txt]}\n"
                                       "  two: {cmd: cat one.txt > two.txt, deps: [one.txt], outs: [two.txt]}\n")
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    dry = subprocess.run(["dvc", "repro", "--dry"], cwd=tmp_path, capture_output=True, text=True)
    assert dry.returncode != 0 and "failed to reproduce 'two': [Errno 2] No such file or directory" in dry.stderr, \
        dry.stdout + dry.stderr
