"""One build at a time in a workspace (maskbench.workspace): a `maskbench` stage command (what
DVC's stages run, `validate --stamp` first) is refused while Snakemake holds the workspace,
and Snakemake while DVC holds its repository lock, each naming the other and how to wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from maskbench import paths
from tests.helpers import copy_workflow

HOLD = "import sys, time; from maskbench.workspace import acquire; acquire(sys.argv[1]); print('held', flush=True); " \
       "time.sleep(120)"


@pytest.fixture
def workspace(tmp_path):
    return copy_workflow(tmp_path / "project")


def holder(root, tool: str) -> subprocess.Popen:
    """A process holding the workspace as `tool` (Snakemake's `onstart` takes it so)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, tool], cwd=root, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def maskbench(root, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(["maskbench", *args], cwd=root, capture_output=True, text=True,
                          env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None})


def test_dvcs_first_stage_is_refused_while_snakemake_runs_naming_it_and_how_to_wait(workspace):
    snakemake = holder(workspace, "snakemake")
    try:
        refused = maskbench(workspace, "validate", "--stamp", paths.PARAMS_STAMP,
                            env={"MASKBENCH_WORKSPACE_HOLDER": None})
        assert refused.returncode == 1
        assert f"error: snakemake is running in this workspace (pid {snakemake.pid}" in refused.stderr
        assert f"while kill -0 {snakemake.pid}" in refused.stderr and "dvc repro" in refused.stderr
        assert not (workspace / paths.PARAMS_STAMP).exists()  # refused before anything was written
        # a job Snakemake starts runs under its lock
        assert maskbench(workspace, "validate", "--stamp", paths.PARAMS_STAMP,
                         env={"MASKBENCH_WORKSPACE_HOLDER": str(snakemake.pid)}).returncode == 0
    finally:
        snakemake.kill()
        snakemake.wait()
    # a killed holder holds nothing (kill -9 leaves the file, not the lock)
    assert maskbench(workspace, "validate", "--stamp", paths.PARAMS_STAMP).returncode == 0


def test_a_stage_command_is_refused_too(workspace):
    snakemake = holder(workspace, "snakemake")
    try:
        refused = maskbench(workspace, "aggregate", "--run", "mlm", "--task", "rotten_tomatoes")
        assert refused.returncode == 1 and "snakemake is running in this workspace" in refused.stderr
    finally:
        snakemake.send_signal(signal.SIGKILL)
        snakemake.wait()


def test_snakemake_is_refused_while_dvc_holds_its_lock(workspace):
    """`dvc repro` holds .dvc/tmp/lock (zc.lockfile, its pid inside) from start to end."""
    from maskbench.workspace import Busy, acquire

    (workspace / ".dvc/tmp").mkdir(parents=True)
    hold = "import time, zc.lockfile; held = zc.lockfile.LockFile('.dvc/tmp/lock'); print('held', flush=True); " \
           "time.sleep(120)"
    dvc = subprocess.Popen([sys.executable, "-c", hold], cwd=workspace, stdout=subprocess.PIPE, text=True)
    try:
        assert dvc.stdout.readline().strip() == "held"
        with pytest.raises(Busy, match=rf"dvc is running in this workspace \(pid {dvc.pid}, .*while kill -0 {dvc.pid}"):
            acquire("snakemake", workspace, check_dvc=True)
        assert not (workspace / paths.WORKSPACE_LOCK).exists()
    finally:
        dvc.kill()
        dvc.wait()
