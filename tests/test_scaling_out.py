"""Scaling out, as docs/scaling-out.md spells it: a Snakemake build handed to DVC
without rebuilding, a DVC remote shared through a clone, an MLflow tracking server, the SLURM
profile with its executor plugin (sbatch faked).

The session's one smoke build of table1 (tests/conftest.py) serves the DVC and MLflow tests;
the SLURM tests plan on an empty or stand-in tree and never run a stage.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from maskbench.stages import STAGES
from tests.helpers import REPO, copy_build, copy_workflow, products, run, smoke_copy

GIT = ["git", "-c", "user.name=maskbench-test", "-c", "user.email=test@maskbench.invalid"]


def edit_params(root: Path, edit) -> None:
    """Apply `edit` to root/params.yaml and regenerate dvc.yaml from it."""
    params = yaml.safe_load((root / "params.yaml").read_text())
    edit(params)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["maskbench", "dvc-yaml"], root)


@pytest.fixture(scope="module")
def built(smoke_table1, tmp_path_factory) -> Path:
    """The session's smoke build of table1, in what a clone has (the repository's .gitignore included)."""
    root = copy_build(smoke_table1, tmp_path_factory.mktemp("scaling") / "project")
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    return root


@pytest.fixture(scope="module")
def handed_over(built) -> tuple[Path, dict[str, str]]:
    """The documented handoff: DVC records the Snakemake build as its own; also what it held before."""
    before = products(built)
    run([*GIT, "init", "-q"], built)
    run(["dvc", "init", "-q"], built)
    run(["dvc", "repro", "validate"], built)
    run(["dvc", "commit", "-f", "--with-deps", "report-table1"], built)
    return built, before


def assert_dvc_has_nothing_to_do(root: Path) -> None:
    # the guard runs at every `dvc repro` (maskbench.dvc_yaml), and no other stage
    assert run(["dvc", "status", "--with-deps", "report-table1"], root).split() == ["validate:", "always", "changed"]
    out = run(["dvc", "repro", "report-table1"], root)
    assert re.findall(r"Running stage '([^']+)'", out) == ["validate"]


@pytest.mark.slow
def test_dvc_takes_over_a_snakemake_build_without_rerunning_it(handed_over):
    root, before = handed_over
    assert_dvc_has_nothing_to_do(root)
    assert products(root) == before  # the report (stamped with its time) included: nothing re-ran


@pytest.mark.slow
def test_dvc_remote_shares_the_build_with_a_clone(handed_over, tmp_path):
    root, before = handed_over
    run([*GIT, "add", ".gitignore", ".dvc", ".dvcignore", "Snakefile", "dvc.yaml", "params.yaml",
         "workflow", "src"], root)
    run([*GIT, "commit", "-qm", "the project, as cloned"], root)
    # the documented commands
    run(["dvc", "remote", "add", "-d", "shared", str(tmp_path / "dvc-remote")], root)
    run(["dvc", "push", "--with-deps", "report-table1"], root)
    run([*GIT, "add", "dvc.yaml", "profile.yaml", "dvc.lock", ".dvc/config", "data/cards", "runs"], root)
    run([*GIT, "add", "-f", "logs/params-valid.json", "logs/params", "logs/built", "reports/table1.md"], root)
    run([*GIT, "commit", "-qm", "table1"], root)

    clone = tmp_path / "clone"
    run([*GIT, "clone", "-q", str(root), str(clone)], tmp_path)
    assert not (clone / "runs/pretrain/mlm/model").exists()
    run(["dvc", "pull", "--with-deps", "report-table1"], clone)
    assert_dvc_has_nothing_to_do(clone)
    assert products(clone) == before


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tracking_server(tmp_path):
    """`mlflow server` (SQLite store, proxied artifacts) on 127.0.0.1, stopped afterwards."""
    port, store = free_port(), tmp_path / "mlflow-server"
    store.mkdir()
    log = (store / "server.log").open("w")
    # One worker and no job runner: a lighter start on a small machine; neither is needed.
    server = subprocess.Popen(
        ["mlflow", "server", "--backend-store-uri", f"sqlite:///{store / 'mlflow.db'}",
         "--artifacts-destination", str(store / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--allowed-hosts", f"127.0.0.1:{port},localhost:{port}", "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, f"mlflow server exited:\n{(store / 'server.log').read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"mlflow server not up:\n{(store / 'server.log').read_text()[-3000:]}"
            time.sleep(1)
        yield url, store
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.mark.slow
def test_mlflow_server_receives_pretraining_and_finetuning(built, tracking_server, tmp_path, monkeypatch):
    import mlflow

    url, store = tracking_server
    root = tmp_path / "project"
    root.mkdir()
    for name in ("params.yaml", "workflow", "data"):  # the prepared data; pretraining and fine-tuning run anew
        (shutil.copytree if (built / name).is_dir() else shutil.copy)(built / name, root / name)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    run(["maskbench", "pretrain", "--run", "mlm"], root)
    run(["maskbench", "finetune", "--run", "mlm", "--task", "rotten_tomatoes", "--seed", "1"], root)

    client = mlflow.MlflowClient(tracking_uri=url)
    experiment = client.get_experiment_by_name("maskbench")
    runs = {r.data.tags["stage"]: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["finetune", "pretrain"]
    assert all(r.info.status == "FINISHED" for r in runs.values())
    assert {"train_loss", "valid_loss", "tokens_per_s"} <= runs["pretrain"].data.metrics.keys()
    assert {"dev_accuracy", "test_accuracy", "score"} <= runs["finetune"].data.metrics.keys()
    assert runs["finetune"].data.tags["pretrain_run_id"] == runs["pretrain"].info.run_id
    # artifacts went through the server into its --artifacts-destination
    assert "metrics.json" in {a.path for a in client.list_artifacts(runs["pretrain"].info.run_id)}
    assert list((store / "artifacts").rglob("metrics.json"))
    assert not (root / "mlflow.db").exists() and not (root / "mlartifacts").exists()

    # The documented way to the runs table: the experiment's id (1 in a fresh store, the server's
    # or the default SQLite one), then the UI's "Training runs" route, #/experiments/<id>/runs.
    assert experiment.experiment_id == "1" and re.search(r"^1 +maskbench ",
                                                         run(["mlflow", "experiments", "search"], root), re.MULTILINE)
    default_store = mlflow.MlflowClient(tracking_uri=f"sqlite:///{built / 'mlflow.db'}")
    assert default_store.get_experiment_by_name("maskbench").experiment_id == "1"
    with urllib.request.urlopen(url) as page:
        bundle = re.search(r'src="(static-files/static/js/main\.\w+\.js)"', page.read().decode())[1]
    with urllib.request.urlopen(f"{url}/{bundle}") as script:
        ui = script.read().decode()
    assert "createHashRouter" in ui and '"/experiments/:experimentId/runs"' in ui

    # --allowed-hosts: a request addressed to any other name is refused
    elsewhere = urllib.request.Request(f"{url}/api/2.0/mlflow/experiments/search?max_results=1",
                                       headers={"Host": f"elsewhere.invalid:{url.rsplit(':', 1)[1]}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(elsewhere)
    assert refused.value.code == 403


# --- SLURM ---------------------------------------------------------------------------------

SLURM_PROFILE = ["--workflow-profile", "workflow/profiles/slurm"]


def use_gpus(params: dict) -> None:
    """Pretraining and fine-tuning on `device: cuda`, the paper profile's setting."""
    params["profiles"]["smoke"]["pretrain"]["device"] = "cuda"
    params["profiles"]["smoke"]["finetune"]["settings"]["device"] = "cuda"


def planned_gpus(root: Path) -> dict[str, set[int]]:
    """rule -> the `gpu` resource of its jobs, as `snakemake -n` with the SLURM profile plans them."""
    out = run(["snakemake", "-n", *SLURM_PROFILE, "reports/table1.md"], root)
    jobs = re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: .*\bgpu=(\d+)", out, re.MULTILINE)
    assert jobs, out
    gpus: dict[str, set[int]] = {}
    for rule, gpu in jobs:
        gpus.setdefault(rule, set()).add(int(gpu))
    return gpus


@pytest.mark.slow
def test_slurm_profile_dry_runs_and_asks_gpus_only_for_cuda_jobs(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    root = smoke_copy(tmp_path / "project")
    cpu_rules = {"download": {0}, "tokenizer": {0}, "tokenize": {0}, "task": {0}, "aggregate": {0}, "baseline": {0},
                 "report": {0}}
    # smoke: CPU everywhere; the probe runs the frozen encoder where fine-tuning runs it
    assert planned_gpus(root) == {**cpu_rules, "pretrain": {0}, "finetune": {0}, "probe": {0}}
    edit_params(root, use_gpus)
    assert planned_gpus(root) == {**cpu_rules, "pretrain": {1}, "finetune": {1}, "probe": {1}}


FAKE_SLURM = """\
#!{python}
# sbatch, sacct, squeue, scancel, sinfo, scontrol, sacctmgr, sshare: record the call; sbatch
# answers with a job id, sacct reports every submitted job $FAKE_SLURM_STATE (default FAILED: so
# Snakemake stops there).
import json, os, sys
from pathlib import Path

calls = Path(os.environ["FAKE_SLURM_CALLS"])
with calls.open("a") as out:
    out.write(json.dumps([Path(sys.argv[0]).name, *sys.argv[1:]]) + "\\n")
submitted = [c for c in map(json.loads, calls.read_text().splitlines()) if c[0] == "sbatch"]
if Path(sys.argv[0]).name == "sbatch":
    print(f"Submitted batch job {{len(submitted)}}")
elif Path(sys.argv[0]).name == "sacct" and "--format=JobIdRaw,State" in sys.argv:
    state = os.environ.get("FAKE_SLURM_STATE", "FAILED")
    print("".join(f"{{i}}|{{state}}\\n" for i in range(1, len(submitted) + 1)), end="")
"""


def fake_slurm(bin_dir: Path) -> None:
    bin_dir.mkdir()
    (bin_dir / "slurm").write_text(FAKE_SLURM.format(python=sys.executable))
    (bin_dir / "slurm").chmod(0o755)
    for name in ("sbatch", "sacct", "squeue", "scancel", "sinfo", "scontrol", "sacctmgr", "sshare"):
        (bin_dir / name).symlink_to("slurm")


def stand_in_outputs(root: Path, jobs: list[tuple[str, dict]]) -> None:
    """Empty outputs of `jobs`, oldest first, so Snakemake takes them as built."""
    stamp = time.time() - 1000
    for i, (stage, wildcards) in enumerate(jobs):
        kind = STAGES[stage]
        for name, path in kind.output_paths(wildcards).items():
            path = root / path
            if name in kind.directories:
                path.mkdir(parents=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("{}")
            os.utime(path, (stamp + i, stamp + i))


def sbatch_option(call: list[str], option: str) -> str | None:
    return call[call.index(option) + 1] if option in call else None


@pytest.mark.slow
def test_slurm_submissions_ask_gpus_only_for_gpu_jobs(tmp_path, monkeypatch):
    """Four jobs ready at once go to a faked sbatch: a GPU and a CPU pretraining run, a GPU
    fine-tuning job, a (CPU) download; with the partitions described, each lands in its own."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    root = smoke_copy(tmp_path / "project")

    def two_runs(params):
        params["runs"]["mlm_gpu"] = {**params["runs"]["mlm"], "overrides": {"device": "cuda"}}
        params["runs"]["mlm_cpu"] = params["runs"]["mlm"]
        params["profiles"]["smoke"]["finetune"]["settings"]["device"] = "cuda"

    edit_params(root, two_runs)
    stand_in_outputs(root, [("download", {"dataset": "wikitext2"}), ("download", {"dataset": "rotten_tomatoes"}),
                            ("tokenizer", {"modality": "text"}), ("tokenize", {"modality": "text"}),
                            ("task", {"task": "rotten_tomatoes"}), ("pretrain", {"run": "mlm"})])
    (root / "partitions.yaml").write_text("partitions: {cpu: {max_gpu: 0}, gpu: {max_gpu: 4}}\n")
    fake_slurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_CALLS", str(tmp_path / "calls.jsonl"))

    result = subprocess.run(
        ["snakemake", *SLURM_PROFILE, "--slurm-partition-config", "partitions.yaml",
         "--slurm-no-account", "--slurm-init-seconds-before-status-checks", "1",  # no accounts here; answer fast
         "--retries", "0",  # what is asked shows in the first submission; resubmitting a failed fake adds nothing
         "runs/pretrain/mlm_gpu/model", "runs/pretrain/mlm_cpu/model",
         "runs/finetune/mlm/rotten_tomatoes/seed1/metrics.json", "data/raw/vader_movies"],
        cwd=root, capture_output=True, text=True, timeout=300, check=False)
    log = result.stdout + result.stderr
    assert result.returncode != 0 and "SLURM status is: 'FAILED'" in log, log  # the fake fails every job
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    sbatch = {sbatch_option(c, "--comment"): c for c in calls if c[0] == "sbatch"}
    gpu_jobs = {"rule_pretrain_wildcards_mlm_gpu", "rule_finetune_wildcards_mlm_rotten_tomatoes_1"}
    cpu_jobs = {"rule_pretrain_wildcards_mlm_cpu", "rule_download_wildcards_vader_movies"}
    assert sbatch.keys() == gpu_jobs | cpu_jobs, log
    for job, call in sbatch.items():
        asked = [a for a in call if a.startswith(("--gpus", "--gres", "--gpus-per"))]
        assert asked == (["--gpus=1"] if job in gpu_jobs else []), (job, call)
        assert sbatch_option(call, "-p") == ("gpu" if job in gpu_jobs else "cpu"), (job, call)
        assert sbatch_option(call, "--mem") and sbatch_option(call, "-t"), (job, call)
        assert "--export=ALL" in call, (job, call)  # MLFLOW_TRACKING_URI reaches the jobs
    assert sbatch_option(sbatch["rule_pretrain_wildcards_mlm_gpu"], "--mem") == "16000"  # resources.pretrain


@pytest.mark.slow
def test_slurm_profile_keeps_going_and_resubmits_a_job_its_time_limit_stopped(tmp_path, monkeypatch):
    """Every job SLURM reports TIMEOUT (stopped at its limit; pretraining and fine-tuning then
    exit 143 with a checkpoint, tests/test_train_resume.py) is submitted again, `retries` times,
    with the same command (which resumes the checkpoint), SIGTERM asked 5 minutes before the
    limit, and a limit of at least cluster.min_runtime; the other ready job is not abandoned."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    profile = yaml.safe_load((REPO / "workflow/profiles/slurm/config.yaml").read_text())
    assert profile["keep-going"] is True and profile["retries"] >= 1
    root = smoke_copy(tmp_path / "project")
    stand_in_outputs(root, [("download", {"dataset": "wikitext2"}), ("tokenizer", {"modality": "text"}),
                            ("tokenize", {"modality": "text"})])
    fake_slurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("FAKE_SLURM_STATE", "TIMEOUT")
    result = subprocess.run(["snakemake", *SLURM_PROFILE, "--slurm-no-account",
                             "--slurm-init-seconds-before-status-checks",
                             "1", "runs/pretrain/mlm/model", "data/raw/vader_movies"], cwd=root, capture_output=True,
                            text=True, timeout=900, check=False)
    log = result.stdout + result.stderr
    assert result.returncode != 0 and "TIMEOUT" in log, log[-3000:]
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    submitted = [c for c in calls if c[0] == "sbatch"]
    by_job: dict[str, list[list[str]]] = {}
    for call in submitted:
        by_job.setdefault(sbatch_option(call, "--comment"), []).append(call)
    assert {job: len(calls) for job, calls in by_job.items()} == {
        "rule_pretrain_wildcards_mlm": 1 + profile["retries"],
        "rule_download_wildcards_vader_movies": 1 + profile["retries"]}, log[-3000:]
    for call in submitted:
        assert "--signal=TERM@300" in call and int(sbatch_option(call, "-t")) >= 15, call
    # the same job each time (its command, `maskbench pretrain --run mlm`, resumes the checkpoint)
    assert all("pretrain:run=mlm" in " ".join(call) for call in by_job["rule_pretrain_wildcards_mlm"])


def paper_copy(path: Path) -> tuple[Path, dict]:
    """A copy of the workflow switched to the paper profile, and its parameters (validated)."""
    from maskbench.config import read_params

    copy_workflow(path)
    params = yaml.safe_load((path / "params.yaml").read_text())
    params["profile"] = "paper"
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return path, read_params(path / "params.yaml")[1]


def planned_resources(out: str) -> list[tuple[str, dict, dict]]:
    """(rule, wildcards, resources) of every job a `snakemake -n` output lists."""
    jobs = []
    for block in out.split("\n\n"):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.MULTILINE)
        asked = re.search(r"^    resources: (.*)$", block, re.MULTILINE)
        if rule and asked:
            wildcards = re.search(r"^    wildcards: (.*)$", block, re.MULTILINE)
            pairs = lambda text: dict(item.split("=", 1) for item in text.split(", ")) if text else {}
            jobs.append((rule[1], pairs(wildcards[1] if wildcards else ""), pairs(asked[1])))
    return jobs


@pytest.mark.slow
def test_slurm_paper_jobs_ask_what_their_work_needs_and_the_cluster_gives(tmp_path):
    """The paper profile through the SLURM profile, planned on an empty tree: every job asks at
    most cluster.max_runtime, every CUDA job at least the host-memory floor for each GPU of a
    node, pretraining its launch's GPUs (several nodes: nodes, one task per GPU, srun)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from maskbench.config import launch_settings

    root, config = paper_copy(tmp_path / "project")
    jobs = planned_resources(run(["snakemake", "-n", *SLURM_PROFILE, "reports"], root))
    cluster = config["cluster"]
    assert len(jobs) > 1900 and {rule for rule, _, _ in jobs} >= set(STAGES)
    for rule, wildcards, asked in jobs:
        assert 1 <= int(asked["runtime"]) <= cluster["max_runtime"], (rule, wildcards, asked)
        gpus, nodes = int(asked.get("gpu", 0)), int(asked.get("nodes", 1))
        if gpus:
            assert int(asked["mem_mb"]) >= cluster["cuda_host_mem_mb"] * gpus // nodes, (rule, wildcards, asked)
        if rule == "pretrain":
            launch = launch_settings(config, wildcards["run"])
            assert gpus == launch["gpus"] * launch["nodes"] and nodes == launch["nodes"], (wildcards, asked)
            several = {"nodes": str(launch["nodes"]), "tasks_per_node": "8", "tasks_per_gpu": "0", "mpi": "srun"}
            assert {k: asked.get(k) for k in several} == (several if nodes > 1 else dict.fromkeys(several)), asked
    multi_node = sorted(w["run"] for rule, w, a in jobs if rule == "pretrain" and "nodes" in a)
    assert multi_node == sorted(r for r, spec in config["launch"]["runs"].items() if spec.get("nodes", 1) > 1)


@pytest.mark.slow
def test_slurm_paper_pretraining_submissions_ask_their_gpus_and_nodes(tmp_path, monkeypatch):
    """Every paper pretraining run submitted to a faked sbatch (its data stood in for): one
    node's GPUs in one task (torchrun inside), or whole nodes with one task per GPU and no
    --ntasks-per-gpu (SLURM refuses it beside --ntasks-per-node); -t within cluster.max_runtime,
    --mem per node at least the CUDA floor per GPU."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from maskbench.config import launch_settings

    root, config = paper_copy(tmp_path / "project")
    data = [(stage, w) for stage in ("download", "tokenizer", "tokenize") for w in STAGES[stage].jobs(config)]
    stand_in_outputs(root, data)
    fake_slurm(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_CALLS", str(tmp_path / "calls.jsonl"))
    result = subprocess.run(["snakemake", *SLURM_PROFILE, "--slurm-no-account",
                             "--slurm-init-seconds-before-status-checks", "1",
                             "--retries", "0",  # each run's first submission says what it asks
                             "pretrained"], cwd=root, capture_output=True, text=True, timeout=600, check=False)
    log = result.stdout + result.stderr
    assert result.returncode != 0 and "SLURM status is: 'FAILED'" in log, log[-3000:]
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    sbatch = {sbatch_option(c, "--comment").removeprefix("rule_pretrain_wildcards_"): c for c in calls
              if c[0] == "sbatch"}
    assert sorted(sbatch) == sorted(config["runs"]), log[-3000:]
    for run_name, call in sbatch.items():
        launch, threads = launch_settings(config, run_name), config["pretrain"]["threads"]
        gpus, nodes = launch["gpus"], launch["nodes"]
        assert f"--gpus={gpus * nodes}" in call and not any(a.startswith("--ntasks-per-gpu") for a in call), call
        assert int(sbatch_option(call, "-t")) <= config["cluster"]["max_runtime"], call
        assert int(sbatch_option(call, "--mem")) >= gpus * config["cluster"]["cuda_host_mem_mb"], call
        if nodes == 1:
            assert f"--cpus-per-task={gpus * threads}" in call and not any(a.startswith("--nodes") for a in call), call
        else:
            assert {f"--nodes={nodes}", f"--ntasks-per-node={gpus}", f"--cpus-per-task={threads}"} <= set(call), call
