"""The lease table (benchmarks/lease_table.py): its profile fits the lease, its carried folder is
checked against the 64 MiB, and its CPU twin builds table1 through Snakemake from the prepared
folder in an environment holding only the lent machine's packages."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import lease_table  # noqa: E402
from device_twin import DEVICE_PACKAGES, environment  # noqa: E402

from maskbench.config import read_yaml, schema_path, validate  # noqa: E402

# what the build imports (Snakemake, the report's figures) that the lent machine's image has
# (KINDS.md), beside the suite's set
IMAGE_FOR_BUILD = ["jinja2", "requests", "psutil", "tabulate", "wrapt", "packaging", "matplotlib"]


def lease_config(profile: str = "lease") -> dict:
    raw = read_yaml(REPO / "params.yaml") | {"profile": profile}
    return validate(raw, read_yaml(schema_path()), REPO / "params.yaml", every_profile=False)


def test_the_lease_profile_builds_table1_text_arms_on_the_gpu_within_the_budget():
    config = lease_config()
    assert config["tables"]["table1"]["runs"] == ["none", "mlm", "mae_lm", "exlm"]
    assert config["pretrain"]["device"] == "cuda" and config["cluster"]["gpu"] == "h200"
    assert len(config["finetune"]["seeds"]) >= 3
    planned = lease_table.planned_seconds()
    assert 60 < planned <= lease_table.BUDGET_S, planned


def test_the_carried_size_is_refused_over_the_lease():
    assert lease_table.over_limit({"tree": 5.0, ".whl": 30.8, ".lease": 28.2}) is None
    refused = lease_table.over_limit({"tree": 5.0, ".whl": 30.8, ".lease": 28.3})
    assert refused == "64.1 MiB to carry (tree 5.0, .whl 30.8, .lease 28.3), over the lease's 64 MiB"


def test_job_times_count_each_job_once_from_snakemakes_records(tmp_path):
    metadata = tmp_path / ".snakemake" / "metadata"
    metadata.mkdir(parents=True)
    records = [("pretrain", "maskbench pretrain --run mlm --log x", 100.0, 130.5, "a"),
               ("pretrain", "maskbench pretrain --run mlm --log x", 100.0, 130.5, "b"),  # another output, same job
               ("finetune", "maskbench finetune --run mlm --task word_order --seed 2 --log y", 131.0, 141.0, "c"),
               ("download", None, 1.0, 2.0, "d")]  # a data output --touch marked: no command
    for rule, command, start, end, name in records:
        record = {"rule": rule, "shellcmd": command, "starttime": start, "endtime": end}
        (metadata / name).write_text(json.dumps(record))
    assert lease_table.job_times(tmp_path) == [
        {"stage": "pretrain", "wildcards": {"run": "mlm"}, "start": 0.0, "seconds": 30.5},
        {"stage": "finetune", "wildcards": {"run": "mlm", "task": "word_order", "seed": 2}, "start": 31.0,
         "seconds": 10.0}]


@pytest.mark.slow
def test_the_cpu_twin_builds_the_lease_table_from_the_prepared_folder(tmp_path):
    """`prepare` here, then the GPU suite's part g dry (`lease_table.py run --dry`) in a clean
    clone of the checkout (its commit: CI's) with a Python that can import only the lent
    machine's packages (no Snakemake, no MLflow): the carried wheels must complete it."""
    tree, version = tmp_path / "tree", f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "OUT")}
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(tree)], check=True)
    prepared = subprocess.run([sys.executable, "benchmarks/lease_table.py", "prepare", ".lease", "--python-version",
                               version], cwd=tree, capture_output=True, text=True, env=env)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    assert "of the lease's 64" in prepared.stdout
    python = environment(tmp_path / "env", DEVICE_PACKAGES + IMAGE_FOR_BUILD)
    assert subprocess.run([str(python), "-c", "import snakemake"], capture_output=True).returncode == 1
    out = tmp_path / "out"
    built = subprocess.run([str(python), "benchmarks/gpu_suite.py", "--dry", "--parts", "g", "--wheels", ".whl",
                            "--site", str(tmp_path / "site"), "--commit", "twin", "--out", str(out)],
                           cwd=tree, capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stdout[-6000:] + built.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["lease-table.md", "records.json", "summary.md"]
    part = json.loads((out / "records.json").read_text())["part-g"]
    assert part["status"] == "passed" and part["returned"] == ["lease-table.md"]
    record = part["figures"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()
    assert record["exit_status"] == 0 and record["profile"] == "lease-dry" and record["commit"] == head  # .git wins
    stages = [job["stage"] for job in record["jobs"]]
    assert stages.count("pretrain") == 4 and stages.count("finetune") == 12 and "report" in stages
    assert not set(stages) & set(lease_table.DATA_RULES)  # the carried data was found made
    assert all(job["seconds"] > 0 for job in record["jobs"])
    table = (out / "lease-table.md").read_text()
    assert all(f"`{run}`" in table or run in table for run in ("none", "mlm", "mae_lm", "exlm"))
    assert record["card"]["profile"] == "lease-dry"
    assert "## g lease: passed" in (out / "summary.md").read_text()


def test_tracking_init_makes_no_store_with_tracking_off(tmp_path):
    """The Snakefile's onstart on a machine without MLflow: nothing to create, nothing imported."""
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())  # the experiment's name
    env = {**os.environ, "MASKBENCH_TRACKING": "off", "PYTHONPATH": str(REPO / "src")}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run([sys.executable, "-m", "maskbench.cli", "tracking-init"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MASKBENCH_TRACKING=off: no MLflow store"
    assert not (tmp_path / "mlflow.db").exists()
