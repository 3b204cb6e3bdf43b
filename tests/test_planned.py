"""A build knows its parameters (`maskbench.config.planned`): a job started after params.yaml
changed in a key it reads refuses, naming each key with its planned and current value, and
writes nothing; the report, which stamps the hash of every parameter, refuses on any change."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from maskbench.config import ParamsError, read_params
from maskbench.config.planned import PLANNED_ENV, changed_keys, record_plan, require_plan


def test_changed_keys_are_the_leaves_that_differ_among_those_read(config):
    edited = json.loads(json.dumps(config))
    edited["pretrain"]["steps"] = config["pretrain"]["steps"] + 10
    edited["tables"]["table1"]["title"] = "another"
    del edited["tokenizer"]["max_unknown_rate"]
    assert changed_keys(config, edited, ["pretrain", "tokenizer.max_unknown_rate"]) == {
        "pretrain.steps": (config["pretrain"]["steps"], config["pretrain"]["steps"] + 10),
        "tokenizer.max_unknown_rate": (0.005, "(not set)")}
    assert changed_keys(config, edited, ["tasks", "runs.mlm"]) == {}
    assert set(changed_keys(config, edited)) == {"pretrain.steps", "tables.table1.title", "tokenizer.max_unknown_rate"}


def test_a_job_refuses_naming_the_keys_that_changed_and_passes_an_unrelated_edit(config, tmp_path):
    plan = tmp_path / record_plan(config, tmp_path)
    assert plan.parent == tmp_path / ".snakemake/maskbench/planned"
    edited = json.loads(json.dumps(config))
    edited["pretrain"]["steps"] = 40
    edited["tables"]["table1"]["title"] = "another"
    require_plan(plan, edited, ["tasks.bbbp"], "maskbench task --task bbbp", "params.yaml")  # reads neither
    with pytest.raises(ParamsError, match=r"^params.yaml changed since this build was planned \(params hash \w{12} -> "
                                          r"\w{12}\), in keys `maskbench pretrain --run mlm` reads:\n  pretrain.steps: "
                                          rf"{config['pretrain']['steps']} -> 40\nThe job did not start"):
        require_plan(plan, edited, ["pretrain", "runs.mlm"], "maskbench pretrain --run mlm", "params.yaml")


def checksums(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_relative_to(root / "logs")}


def test_the_report_refuses_to_stamp_parameters_its_models_were_not_built_with(workdir):
    """params.yaml edited during a build (pretrain.steps 30 -> 40 under smoke): before, the table
    was stamped with the edited parameters' hash while its models trained 30 steps."""
    params = workdir / "params.yaml"
    params.write_text(params.read_text().replace("profile: tiny", "profile: smoke", 1))
    plan = record_plan(read_params(params)[1], workdir)
    params.write_text(params.read_text().replace("steps: 30, warmup_steps: 5", "steps: 40, warmup_steps: 5", 1))
    (workdir / "reports").mkdir()
    (workdir / "reports/table1.md").write_text("built before\n")
    before = checksums(workdir)
    for given in (["--planned", str(plan)], []):  # the option, or the environment the Snakefile sets
        result = subprocess.run([sys.executable, "-m", "maskbench.cli", "report", "--table", "table1", *given],
                                cwd=workdir, capture_output=True, text=True,
                                env={**os.environ, "PYTHONPATH": str(workdir / "src"), PLANNED_ENV: str(plan)})
        assert result.returncode == 1, result.stderr
        assert "in keys `maskbench report --table table1` reads:\n  pretrain.steps: 30 -> 40\n" in result.stderr
    assert checksums(workdir) == before


@pytest.mark.slow
def test_the_snakefile_hands_jobs_the_plan_without_changing_their_commands(workdir):
    """A command naming the plan's hash would change with every edit of params.yaml, and Snakemake
    re-runs every job whose rule's command changed."""
    def dry_run() -> list[str]:
        out = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", "data/tasks/bbbp"], cwd=workdir,
                             capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(workdir / "src")},
                             check=True).stdout
        return sorted(line for line in out.splitlines() if "maskbench " in line)

    first = dry_run()
    params = workdir / "params.yaml"
    params.write_text(params.read_text().replace("max_unknown_rate: 0.005", "max_unknown_rate: 0.01", 1))
    assert "Shell command: maskbench task --task bbbp --log logs/task/bbbp.log" in first and dry_run() == first
    assert len(list((workdir / ".snakemake/maskbench/planned").iterdir())) == 2  # one plan per parameter set
